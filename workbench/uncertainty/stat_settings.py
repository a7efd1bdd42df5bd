"""How the stats graph produces its stats: :class:`StatSettings` (sample counts, temperatures, length caps, the
paraphrase budget, the seed), recorded in a collection's metadata and a bundle's manifest and read back from them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from workbench.core.bounds import NEW_TOKENS, SAMPLES, SEED, TEMPERATURE, check_counts, check_int, check_number
from workbench.core.errors import ConfigError

__all__ = ["StatSettings"]

LENGTH_RATIO_BOUND = 100.0
"""A paraphrase may be this many times its question's tokens at most (its token cap binds long before)."""

COUNT_BOUNDS = {
    "samples": SAMPLES,
    "paraphrases": SAMPLES,
    "max_new_tokens": NEW_TOKENS,
    "paraphrase_max_new_tokens": NEW_TOKENS,
}
"""The largest value of each integer setting counted from 1."""

MAX_STOPS = 64
"""Most stop strings."""

_RETIRED_SETTINGS = frozenset({"verbalized_max_new_tokens"})
"""Settings older collections and bundles record that no longer exist (ignored on load): the verbalized
confidence is read from a digit distribution now, not generated. Their prompts fingerprint differs anyway."""


@dataclass(frozen=True)
class StatSettings:
    """How the stats are produced (documented in the collection metadata).

    ``samples`` N answers sampled at ``temperature`` (each at most ``max_new_tokens`` tokens, cut at ``stop``);
    the greedy answer uses the same length and stop strings. N = 5 by default: every feature but INSIDE reads at
    most 5 samples; INSIDE reads min(10, N), so K = 5 instead of the paper's 10 unless N = 10 is asked for (each
    extra sample is one more decoded sequence per question). ``paraphrases`` P (the question + P − 1 paraphrases,
    sampled at ``paraphrase_temperature``, one line each, at most :func:`paraphrase_token_cap` tokens — about
    ``paraphrase_length_ratio`` × the question's tokens + ``paraphrase_length_margin``, never more than
    ``paraphrase_max_new_tokens`` — then cleaned by :func:`clean_paraphrase`); the first ``ptrue_ideas`` samples are
    listed (distinct, with counts) in the self-check prompt of P(True) and Verbalized Confidence. ``seed``
    overrides the generator's sampling seed (None: the generator's).
    """

    samples: int = 5
    temperature: float = 0.7
    max_new_tokens: int = 16
    stop: tuple[str, ...] = ("\n",)
    paraphrases: int = 5
    paraphrase_temperature: float = 1.0
    paraphrase_max_new_tokens: int = 64
    paraphrase_length_ratio: float = 1.5
    paraphrase_length_margin: int = 4
    ptrue_ideas: int = 5
    seed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict (``stop`` as a list)."""

        out = asdict(self)
        out["stop"] = list(self.stop)
        return out

    @classmethod
    def from_dict(cls, d: Any, where: str = "stats settings") -> StatSettings:
        """Settings from :meth:`to_dict` output (e.g. a collection's ``metadata.json`` or a bundle manifest);
        ConfigError on an unknown key or a bad value (a retired key is ignored)."""

        if not isinstance(d, dict):
            raise ConfigError(f"expected a mapping of settings, got {type(d).__name__}", where)
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k not in _RETIRED_SETTINGS}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown stats setting(s) {unknown} (known: {', '.join(sorted(known))})", where)
        values = dict(d)
        if "stop" in values:
            values["stop"] = tuple(str(s) for s in values["stop"])
        try:
            out = cls(**values)
            out.validate()
        except (TypeError, ConfigError) as exc:
            raise ConfigError(f"bad stats settings: {exc}", where) from None
        return out

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the setting (``stats.<name>``) when a value is of the wrong type or out
        of its bounds (:mod:`workbench.core.bounds`): a bundle's settings are checked here when it loads."""
        check_counts(self, COUNT_BOUNDS, "stats")
        check_int(
            self.paraphrase_length_margin,
            "paraphrase_length_margin",
            "stats.paraphrase_length_margin",
            NEW_TOKENS,
            low=0,
        )
        check_int(self.ptrue_ideas, "ptrue_ideas", "stats.ptrue_ideas", SAMPLES, low=0)
        check_int(self.seed, "seed", "stats.seed", SEED, low=0, optional=True)
        for name in ("temperature", "paraphrase_temperature"):
            check_number(getattr(self, name), name, f"stats.{name}", 0.0, TEMPERATURE, above=True)
        check_number(
            self.paraphrase_length_ratio,
            "paraphrase_length_ratio",
            "stats.paraphrase_length_ratio",
            0.0,
            LENGTH_RATIO_BOUND,
            above=True,
        )
        if (
            not isinstance(self.stop, tuple)
            or len(self.stop) > MAX_STOPS
            or not all(isinstance(s, str) for s in self.stop)
        ):
            raise ConfigError(f"stop must be at most {MAX_STOPS} strings", "stats.stop")
