"""Search spaces of the method studies: what may be tuned, its default range, and validation.

A recipe's ``study.space`` maps a method to ``{parameter: spec}``; a spec is one of

* ``{low: 0.01, high: 10, log: true}`` — a float range (``log`` optional);
* ``{low: 1, high: 5, int: true}`` — an integer range;
* ``{choices: [cos_sum, score_sum]}`` — a categorical;
* ``{breakpoints: true}`` — (DENSE-RAG θ only) a categorical over the midpoints between the distinct DSE₀ values the
  method saw on the study split, plus one value below and one above them: DSE takes few values, and every θ between
  two neighbouring values makes the same decisions.

A method's parameters are the fields of its settings (``workbench config`` lists them) plus ``tau`` for D²-RAG (the
decision threshold the classify stage chose). A parameter marked *threshold* in :data:`TUNABLE` only re-routes answers
computed once (:mod:`workbench.tuning.replay`); any other parameter changes what the method generates, and its trials
run the method (through the generation cache).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from workbench.core.errors import ConfigError

__all__ = ["DEFAULT_SPACES", "TUNABLE", "ParamSpec", "Tunable", "parse_space", "parse_spaces"]


@dataclass(frozen=True)
class Tunable:
    """What a method parameter is: its value ``kind`` (``float`` / ``int`` / ``str``), the bounds any value must lie
    in (``lowest`` / ``highest``, inclusive, None = open) and whether it is a ``threshold`` (re-routing only)."""

    kind: str
    lowest: float | None = None
    highest: float | None = None
    threshold: bool = False


ALWAYS_RETRIEVE_TAU = math.nextafter(1.0, 2.0)
"""1 + ε: the top of D²-RAG's τ space — retrieve for every question. The classify stage's router pick can be exactly
this (retrieving always was the cheapest within Δ of Always-RAG), and the paper-default trial must lie inside."""

TUNABLE: dict[str, dict[str, Tunable]] = {
    "dtr": {
        "tau": Tunable("float", 0.0, None, threshold=True),
        "rule": Tunable("str"),
        "k": Tunable("int", 1, None),
        "n_per_path": Tunable("int", 1, None),
    },
    "d2rag": {
        "tau": Tunable("float", 0.0, ALWAYS_RETRIEVE_TAU, threshold=True),
        "tau_pos": Tunable("float", -1.0, 1.0),
        "tau_neg": Tunable("float", -1.0, 1.0),
        "alpha_pos": Tunable("float", 0.0, None),
        "alpha_neg": Tunable("float", 0.0, None),
    },
    "dense_rag": {
        "theta": Tunable("float", 0.0, None),
        "tau": Tunable("float", 0.0, 1.0),
    },
    "insemrag": {
        "tau": Tunable("float", 0.0, 1.0),
        "gamma": Tunable("float", 0.0, 1.0),
        "keep_threshold": Tunable("float", 0.0, 1.0),
    },
}
"""Every tunable parameter by method. The names are the methods' option names (``evaluate.options``), except D²-RAG's
``tau``, the decision threshold on P(correct) (retrieve iff p < τ) that the classify stage otherwise chooses.
DENSE-RAG's ``tau`` is its semantic-chunking threshold, InSemRAG's ``tau`` / ``gamma`` its completeness and coverage
thresholds and ``keep_threshold`` the relevance filter of its LM controller (keep a candidate iff p(Yes) ≥ it)."""

DEFAULT_SPACES: dict[str, dict[str, dict[str, Any]]] = {
    "dtr": {"tau": {"low": 0.01, "high": 10.0, "log": True}},
    "d2rag": {
        "tau": {"low": 0.0, "high": ALWAYS_RETRIEVE_TAU},
        "alpha_pos": {"low": 0.0, "high": 2.0},
        "alpha_neg": {"low": 0.0, "high": 2.0},
    },
    "dense_rag": {"theta": {"breakpoints": True}},
}
"""The space a method gets when ``study.space`` names none for it. DTR: τ on a log scale over the normalised NLLs a
small model produces (nats per token); D²-RAG: its decision τ and the contrastive α of both utility classes (the
defaults α_pos = 1, α_neg = 0.1 lie inside; τ up to 1 + ε, which retrieves always); DENSE-RAG: θ over the DSE₀
breakpoints."""


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
    if method not in TUNABLE:
        raise ConfigError(f"method {method!r} has nothing to tune (tunable: {', '.join(TUNABLE)})", where)
    if not isinstance(space, dict) or not space:
        raise ConfigError("a search space must be a non-empty mapping {parameter: spec}", where)
    known = TUNABLE[method]
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
        if (method, name) != ("dense_rag", "theta") or spec["breakpoints"] is not True:
            raise ConfigError("breakpoints: true is only for dense_rag.theta", at)
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
    for method in methods:
        if method not in TUNABLE:
            raise ConfigError(f"method {method!r} has nothing to tune (tunable: {', '.join(TUNABLE)})", where)
    extra = sorted(set(spaces) - set(methods))
    if extra:
        raise ConfigError(f"space given for method(s) {extra} that are not in study.methods {methods}", where)
    out = {}
    for method in methods:
        given = spaces.get(method)
        if given is None and method not in DEFAULT_SPACES:
            raise ConfigError(f"{method} has no default search space: give study.space.{method}", where)
        out[method] = parse_space(method, DEFAULT_SPACES[method] if given is None else given, f"{where}.{method}")
    return out
