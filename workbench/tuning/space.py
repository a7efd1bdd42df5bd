"""Search spaces of the method studies: what may be tuned, its default range, and validation.

A recipe's ``study.space`` maps a method to ``{parameter: spec}``; a spec is one of

* ``{low: 0.01, high: 10, log: true}`` — a float range (``log`` optional);
* ``{low: 1, high: 5, int: true}`` — an integer range;
* ``{choices: [cos_sum, score_sum]}`` — a categorical;
* ``{breakpoints: true}`` — (a parameter whose :class:`Tunable` says ``breakpoints``, with the spec's
  ``breakpoints`` function: DENSE-RAG's θ) a categorical over the values the method's records say matter — for θ the
  midpoints between the distinct DSE values the method saw on the study split, plus one below and one above them.

What a method may tune, and the space it gets when the recipe names none, are its spec's ``tunable`` and ``space``
(:class:`~workbench.methods.spec.MethodSpec`): its settings' fields, plus a learned part's parameter where the spec
says so (D²-RAG's decision ``tau``). A parameter marked *threshold* only re-routes answers computed once
(:mod:`workbench.tuning.replay`); any other parameter changes what the method generates, and its trials run the method
(through the generation cache).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from workbench.core.errors import ConfigError
from workbench.methods.spec import Tunable

__all__ = ["ParamSpec", "Tunable", "default_spaces", "parse_space", "parse_spaces", "tunable_params"]


def tunable_params() -> dict[str, dict[str, Tunable]]:
    """Every tunable parameter by method, from the registry's specs (methods with nothing to tune left out)."""
    from workbench.methods.registry import METHOD_TABLE

    return {name: dict(spec.tunable) for name, spec in METHOD_TABLE.items() if spec.tunable}


def default_spaces() -> dict[str, dict[str, dict[str, Any]]]:
    """The space each method gets when ``study.space`` names none, from the registry's specs."""
    from workbench.methods.registry import METHOD_TABLE

    return {name: {k: dict(v) for k, v in spec.space.items()} for name, spec in METHOD_TABLE.items() if spec.space}


def __getattr__(name: str) -> Any:
    """``TUNABLE`` (:func:`tunable_params`) and ``DEFAULT_SPACES`` (:func:`default_spaces`), the former constants,
    read from the method registry when asked (PEP 562)."""
    if name == "TUNABLE":
        return tunable_params()
    if name == "DEFAULT_SPACES":
        return default_spaces()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a search space: ``kind`` is ``float``, ``int`` or ``categorical``."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()
    breakpoints: bool = False
    threshold: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what a study records as its search space)."""
        if self.breakpoints:
            return {"breakpoints": True}
        if self.kind == "categorical":
            return {"choices": list(self.choices)}
        out: dict[str, Any] = {"low": self.low, "high": self.high}
        if self.log:
            out["log"] = True
        if self.kind == "int":
            out["int"] = True
        return out


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"must be a finite number, got {value!r}", where)
    return float(value)


def _check_bounds(value: float, tunable: Tunable, where: str) -> None:
    if tunable.lowest is not None and value < tunable.lowest:
        raise ConfigError(f"{value} is below the smallest valid value {tunable.lowest}", where)
    if tunable.highest is not None and value > tunable.highest:
        raise ConfigError(f"{value} is above the largest valid value {tunable.highest}", where)


def parse_space(method: str, space: Any, where: str) -> tuple[ParamSpec, ...]:
    """Validate ``space`` (``{parameter: spec}``) for ``method``; ConfigError naming the key on anything wrong: an
    unknown method or parameter, a spec of the wrong shape, an empty or inverted range, a value outside what the
    parameter accepts, a log range that reaches 0."""
    tunable = tunable_params()
    if method not in tunable:
        raise ConfigError(f"method {method!r} has nothing to tune (tunable: {', '.join(tunable)})", where)
    if not isinstance(space, dict) or not space:
        raise ConfigError("a search space must be a non-empty mapping {parameter: spec}", where)
    known = tunable[method]
    out = []
    for name, spec in space.items():
        at = f"{where}.{name}"
        if name not in known:
            raise ConfigError(f"unknown parameter {name!r} of {method} (tunable: {', '.join(known)})", at)
        out.append(_parse_param(method, name, spec, known[name], at))
    return tuple(out)


def _parse_param(method: str, name: str, spec: Any, tunable: Tunable, at: str) -> ParamSpec:
    if not isinstance(spec, dict):
        raise ConfigError("a parameter spec is a mapping: {low, high[, log][, int]} or {choices: [...]}", at)
    keys = set(spec)
    if keys == {"breakpoints"}:
        if not tunable.breakpoints or spec["breakpoints"] is not True:
            with_breakpoints = [
                f"{m}.{p}" for m, params in tunable_params().items() for p, t in params.items() if t.breakpoints
            ]
            raise ConfigError(f"breakpoints: true is only for {', '.join(with_breakpoints)}", at)
        return ParamSpec(name, "categorical", breakpoints=True, threshold=tunable.threshold)
    if keys == {"choices"}:
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise ConfigError("choices must be a non-empty list", at)
        if len(set(map(repr, choices))) != len(choices):
            raise ConfigError(f"choices repeat a value: {choices}", at)
        for value in choices:
            if tunable.kind == "str":
                if not isinstance(value, str):
                    raise ConfigError(f"choices must be strings, got {value!r}", at)
            else:
                number = _number(value, at)
                if tunable.kind == "int" and number != int(number):
                    raise ConfigError(f"choices must be integers, got {value!r}", at)
                _check_bounds(number, tunable, at)
        return ParamSpec(name, "categorical", choices=tuple(choices), threshold=tunable.threshold)
    unknown = keys - {"low", "high", "log", "int"}
    if unknown or not {"low", "high"} <= keys:
        raise ConfigError(f"expected keys low, high (and optionally log, int) or choices; got {sorted(keys)}", at)
    if tunable.kind == "str":
        raise ConfigError(f"{name} takes names: give {{choices: [...]}}", at)
    low, high = _number(spec["low"], f"{at}.low"), _number(spec["high"], f"{at}.high")
    if not low < high:
        raise ConfigError(f"empty or inverted range: low {low} must be < high {high}", at)
    _check_bounds(low, tunable, f"{at}.low")
    _check_bounds(high, tunable, f"{at}.high")
    log = spec.get("log", False)
    as_int = spec.get("int", tunable.kind == "int")
    if not isinstance(log, bool) or not isinstance(as_int, bool):
        raise ConfigError("log and int must be true or false", at)
    if log and low <= 0:
        raise ConfigError(f"a log range needs low > 0, got {low}", at)
    if tunable.kind == "int" and not as_int:
        raise ConfigError(f"{name} is an integer: drop int: false", at)
    if as_int and (low != int(low) or high != int(high)):
        raise ConfigError(f"an integer range needs integer bounds, got {low} .. {high}", at)
    kind = "int" if as_int else "float"
    return ParamSpec(name, kind, low, high, log=log, threshold=tunable.threshold)


def parse_spaces(methods: list[str], spaces: dict[str, Any], where: str) -> dict[str, tuple[ParamSpec, ...]]:
    """The validated space of every method in ``methods``: the recipe's (``spaces[method]``) or the default. A space
    given for a method that is not studied is an error (most likely a typo)."""
    tunable, defaults = tunable_params(), default_spaces()
    for method in methods:
        if method not in tunable:
            raise ConfigError(f"method {method!r} has nothing to tune (tunable: {', '.join(tunable)})", where)
    extra = sorted(set(spaces) - set(methods))
    if extra:
        raise ConfigError(f"space given for method(s) {extra} that are not in study.methods {methods}", where)
    out = {}
    for method in methods:
        given = spaces.get(method)
        if given is None and method not in defaults:
            raise ConfigError(f"{method} has no default search space: give study.space.{method}", where)
        out[method] = parse_space(method, defaults[method] if given is None else given, f"{where}.{method}")
    return out
