"""The :class:`Feature` base class and the small numeric helpers every feature family shares."""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from workbench.core.errors import DataError
from workbench.uncertainty.stats import DerivedStat, get_stat

Category = Literal["probability", "consistency", "internal", "self-checking", "other"]
CATEGORIES: tuple[str, ...] = ("probability", "consistency", "internal", "self-checking", "other")
PLUGIN_PACKAGES: dict[str, dict[str, str]] = {}
"""``{feature: {"name": package, "version": its version}}`` for each feature loaded from another package's
``workbench.features`` entry point (:mod:`workbench.uncertainty.features.plugins`); built-in features are not in it."""
LOGPROB_FLOOR = math.log(1e-12)
"""Log-probs are floored here (p ≥ 1e-12) so a zero-probability token gives a large finite NLL (DTR spec §3.2)."""


class Feature(ABC):
    """One uncertainty feature: a pure function of named stats (:mod:`workbench.uncertainty.stats`).

    Class-level declarations (checked by the registry):

    * ``name`` — registry key; ``version`` — bumped whenever the computed value can change.
    * ``category`` — probability / consistency / internal / self-checking / other.
    * ``orientation`` — +1 or −1: the sign that turns the native quantity into "higher = more certain".
    * ``stats`` — the stat names :meth:`raw` reads; ``requires_gold`` — True if it needs the gold answer (a bundle
      refuses such features). False for every feature here.
    * ``derived_stats`` — for a feature from another package only: the :class:`~workbench.uncertainty.stats.
      DerivedStat` objects it brings, which ``stats`` may name besides the built-in ones (docs/adding-a-feature.md).

    :meth:`raw` returns the native quantity (e.g. an entropy, ↑ = uncertain); :meth:`compute` returns
    ``orientation * raw`` (↑ = more certain). Both return a Python float; NaN only where the quantity is undefined
    (documented per feature). A missing stat raises :class:`~workbench.uncertainty.stats.MissingStatError`; a stat of
    the wrong shape raises :class:`~workbench.core.errors.DataError`. Subclasses are frozen dataclasses whose fields
    are the method's hyper-parameters (defaults = the spec's).
    """

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    category: ClassVar[Category]
    orientation: ClassVar[int]
    stats: ClassVar[tuple[str, ...]]
    requires_gold: ClassVar[bool] = False
    derived_stats: ClassVar[tuple[DerivedStat, ...]] = ()

    @abstractmethod
    def raw(self, stats: Mapping[str, Any]) -> float:
        """The native quantity of the method, computed from ``stats`` (see the subclass docstring)."""

    def compute(self, stats: Mapping[str, Any]) -> float:
        """The oriented value ``orientation * raw(stats)``: higher = more certain (= more likely correct)."""
        return float(self.orientation * self.raw(stats))

    def params(self) -> dict[str, Any]:
        """The hyper-parameters of this instance (dataclass fields), JSON-serialisable."""
        if dataclasses.is_dataclass(self):
            return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {}

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description: name, version, category, orientation, stats, requires_gold, params, and for a
        feature from another package ``package`` (its name and version: a bundle records where to get it)."""
        described = {
            "name": self.name,
            "version": self.version,
            "category": self.category,
            "orientation": self.orientation,
            "stats": list(self.stats),
            "requires_gold": self.requires_gold,
            "params": self.params(),
        }
        if self.name in PLUGIN_PACKAGES:
            described["package"] = dict(PLUGIN_PACKAGES[self.name])
        return described

    def _stat(self, stats: Mapping[str, Any], name: str) -> Any:
        return get_stat(stats, name, self.name)

    def _bad(self, what: str) -> DataError:
        return DataError(what, f"feature {self.name!r}")


def has_nan(*arrays: Any) -> bool:
    """True when any of ``arrays`` holds a NaN (a producer bug or a failed model call): the feature returns NaN."""
    return any(np.isnan(np.asarray(a, dtype=float)).any() for a in arrays)


def as_logprobs(values: Any) -> np.ndarray:
    """A 1-D float array of log-probs, floored at :data:`LOGPROB_FLOOR` (NaN is kept: it marks a producer bug)."""
    arr = np.asarray(values, dtype=float).reshape(-1)
    return np.where(np.isnan(arr), arr, np.maximum(arr, LOGPROB_FLOOR))


def answer_logprobs(logprobs: Any, ends_with_eos: bool) -> np.ndarray:
    """The greedy answer's log-probs without the EOS entry (dropped when ``ends_with_eos`` and non-empty)."""
    arr = as_logprobs(logprobs)
    return arr[:-1] if ends_with_eos and arr.size else arr


def length_normalised(logprobs: Any) -> float:
    """LNS(s) = (1/L) Σ_l log p_l; NaN when L = 0 (undefined)."""
    arr = as_logprobs(logprobs)
    return float(arr.mean()) if arr.size else float("nan")


def sample_lns(sample_logprobs: Sequence[Any], n: int) -> tuple[np.ndarray, np.ndarray]:
    """LNS of the first ``n`` samples that have ≥ 1 scored token, and their positions in the sample list.

    Empty samples are skipped (no likelihood to score); a NaN log-prob propagates into that sample's LNS.
    """
    arrays = [as_logprobs(lp) for lp in list(sample_logprobs)[:n]]
    keep = np.array([i for i, a in enumerate(arrays) if a.size], dtype=int)
    lns = np.array([arrays[i].mean() for i in keep], dtype=float)
    return lns, keep


def nli_answer_set(
    feature: Feature, stats: Mapping[str, Any], n_samples: int, with_greedy: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The NLI sub-matrix of a feature's answer set and the answers' positions in ``nli_texts``.

    The answer set is the first ``n_samples`` samples, followed by the greedy answer when ``with_greedy`` (so the
    greedy answer is the LAST row, TTLM's "index j = last"). Returns ``(probs[m, m, 3], positions[m])``.
    """
    probs = np.asarray(feature._stat(stats, "nli_probs"), dtype=float)
    if probs.ndim != 3 or probs.shape[0] != probs.shape[1] or probs.shape[2] != 3:
        raise feature._bad(f"nli_probs must have shape (U, U, 3), got {probs.shape}")
    idx = np.asarray(feature._stat(stats, "nli_index_samples"), dtype=int).reshape(-1)[:n_samples]
    if with_greedy:
        idx = np.append(idx, int(feature._stat(stats, "nli_index_greedy")))
    if idx.size and (idx.min() < 0 or idx.max() >= probs.shape[0]):
        raise feature._bad(f"NLI positions {idx.tolist()} fall outside nli_probs of size {probs.shape[0]}")
    return probs[np.ix_(idx, idx)], idx
