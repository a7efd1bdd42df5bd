"""The strict JSON parser (workbench.core.strict_json): each refusal is one DataError line naming the file."""

from __future__ import annotations

import pytest

from workbench.core.errors import DataError
from workbench.core.strict_json import MAX_INT_DIGITS, loads_strict


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"a": NaN}', "NaN is not a JSON number"),
        ('{"a": -Infinity}', "-Infinity is not a JSON number"),
        ('{"a": 1e400}', "a number too large for a float"),
        ('{"a": -1e400}', "a number too large for a float"),
        ('{"id": ' + "7" * 5000 + "}", f"an integer of more than {MAX_INT_DIGITS} digits"),
        ("[" + "-" + "9" * (MAX_INT_DIGITS + 1) + "]", f"an integer of more than {MAX_INT_DIGITS} digits"),
        ("[" * 100 + "]" * 100, "JSON nested deeper than 64 levels"),
    ],
)
def test_refusals_are_one_line_naming_the_file(text, expected):
    with pytest.raises(DataError) as err:
        loads_strict(text, "f.json:3")
    message = str(err.value)
    assert message == f"f.json:3: not accepted as JSON: {expected}" or message == f"f.json:3: {expected}", message
    assert "7777" not in message  # the value read is never echoed


def test_ordinary_numbers_pass_unchanged():
    value = loads_strict(
        '{"n": -' + "9" * MAX_INT_DIGITS + ', "f": 1.5e300, "z": -0.0, "s": 12345678901234567890}', "f.json"
    )
    assert value == {"n": -int("9" * MAX_INT_DIGITS), "f": 1.5e300, "z": -0.0, "s": 12345678901234567890}
    assert isinstance(value["s"], int) and isinstance(value["f"], float)
