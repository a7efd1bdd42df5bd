"""The scorer of a loaded bundle: what ``workbench score --bundle`` and the ``lifecycle`` benchmark score with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.core.errors import ConfigError
from workbench.scoring.decisions import bundle_decider, decision_features, decision_stats
from workbench.scoring.run import Scorer, ScoreSettings
from workbench.uncertainty.calculators import StatSettings


def bundle_scorer(
    runtime: Any,
    chosen: Sequence[str] = (),
    batch: int = 8,
    shard: str = "0/1",
    methods: Sequence[str] | None = None,
) -> tuple[Scorer, ScoreSettings, str]:
    """``(scorer, settings, reference)`` of the bundle loaded as ``runtime``: its generator, judge and embedder, its
    collection's stats settings, its LARS scorer and its decisions; the features are its decision features plus
    ``chosen``; the decisions are those of ``methods`` (default all the bundle's); ``reference`` names the bundle and
    version (for :func:`~workbench.scoring.run.run_fingerprint`).
    ConfigError when that leaves no feature."""
    names = tuple(dict.fromkeys([*decision_features(runtime), *chosen]))
    if not names:
        raise ConfigError("the bundle decides on no features: name some with --features", "--features")
    tools = runtime.tools()
    learned = runtime.learned
    stats = learned.stats if learned is not None and learned.stats is not None else None
    if stats is None:
        stats = StatSettings(max_new_tokens=int(runtime.manifest["answering"].get("max_new_tokens", 16)))
    scorer = Scorer(
        tools.generator,
        judge=tools.judge,
        embedder=tools.embedder,
        lars_scorer=getattr(learned, "lars_scorer", None),
        decide=bundle_decider(runtime, methods),
        decision_stats=decision_stats(runtime, methods),
    )
    return scorer, ScoreSettings(names, stats, batch, shard), f"{runtime.name} {runtime.version}"
