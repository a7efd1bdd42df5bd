"""InSemRAG's search space holds the keep threshold of its relevance filter (issues 13 and 14), bounded to [0, 1]
(that a trial's value reaches the controller: tests/unit/methods/test_insemrag.py)."""

from __future__ import annotations

import pytest

from workbench.core.errors import ConfigError
from workbench.tuning.space import TUNABLE, parse_space


def test_insemrag_keep_threshold_is_tunable_in_zero_one():
    assert set(TUNABLE["insemrag"]) == {"tau", "gamma", "keep_threshold"}
    (spec,) = parse_space("insemrag", {"keep_threshold": {"low": 0.05, "high": 0.95}}, "study.space.insemrag")
    assert (spec.name, spec.kind, spec.low, spec.high, spec.threshold) == ("keep_threshold", "float", 0.05, 0.95, False)
    with pytest.raises(ConfigError) as caught:
        parse_space("insemrag", {"keep_threshold": {"low": 0.1, "high": 1.5}}, "s")
    assert caught.value.where == "s.keep_threshold.high" and "above the largest valid value" in caught.value.what
