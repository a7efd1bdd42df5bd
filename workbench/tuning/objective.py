"""What one trial costs and scores: a method's parameters → its metrics on the study split.

:class:`MethodObjective` evaluates a method through :func:`workbench.methods.evaluation.evaluate_method` — the same
function the evaluate stage uses — with the generation cache on, so a generation made by an earlier trial (or
stage) is never made again, while its cost still counts (cached calls are priced as uncached ones). When the
method's space has a *threshold* parameter (DTR's and D²-RAG's τ), the method runs once per setting of the other
parameters at "always retrieve", and every threshold is a replay of those traces
(:mod:`workbench.tuning.replay`). Trial kinds: ``replay`` (re-routing only), ``decode`` (the method ran), ``memo``
(the same parameters again: the stored result). A decoding trial of a method without a threshold (DENSE-RAG,
InSemRAG: long) reports its running score after each batch, so the study's median pruner can stop it early.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from workbench.core.errors import ConfigError
from workbench.methods.evaluation import evaluate_built
from workbench.methods.registry import MethodConfig, build_method, configure, method_spec
from workbench.tuning.replay import ReplayTable, replay_rule, replay_table
from workbench.tuning.space import ParamSpec

__all__ = ["MethodObjective", "Pruned", "Reporter", "metrics_of"]

Reporter = Callable[[int, float], bool]
"""``report(step, value) -> prune?``: how a study watches a long trial (``trial.report`` + ``should_prune``)."""


class Pruned(Exception):
    """A trial stopped early by its study's pruner."""


def metrics_of(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Per-question means of trace records: quality, retrieval rate, and cost priced uncached (``lm_calls`` and
    ``tokens`` include generations served by the cache, ``cached_tokens`` says how many were)."""
    if not records:
        raise ValueError("no records to score")

    def mean(key: str) -> float:
        return float(np.mean([float(r.get(key, 0.0)) for r in records]))

    cached_tokens = mean("cached_prefill_tokens") + mean("cached_decoded_tokens")
    return {
        "em": mean("em"),
        "f1": mean("f1"),
        "contains": mean("contains"),
        "retrieval_rate": mean("retrieved"),
        "lm_calls": mean("lm_calls") + mean("cached_lm_calls"),
        "tokens": mean("tokens") + cached_tokens,
        "cached_tokens": cached_tokens,
        "nli_pairs": mean("nli_pairs"),
        "latency": mean("seconds"),
        "n": float(len(records)),
    }


class MethodObjective:
    """Scores parameter settings of one method on fixed ``rows``.

    ``options`` are the method's base options: its :class:`~workbench.methods.registry.MethodConfig` (the recipe's
    ``evaluate.options[method]``, configured once) or a mapping, configured here once; ``learned`` the run's
    learned parts (a parameter of the spec's ``learned_params`` replaces one of them: D²-RAG's ``tau``). A method is
    built as a bundle builds it: ``utility_fallback = "none"``, never with a gold-using oracle utility.
    Calling it with a parameter dict returns ``(metrics, kind)``; results are memoised by parameters.
    """

    def __init__(
        self,
        tools: Any,
        method: str,
        rows: Sequence[dict[str, Any]],
        specs: Sequence[ParamSpec],
        *,
        options: Any = None,
        learned: Any = None,
        batch_questions: int = 8,
        progress: bool = False,
        objective: str = "contains",
    ) -> None:
        self.tools = tools
        self.method = method
        self.rows = list(rows)

        # typed once: a run's trials lay their parameters over it, configuring only what they change
        self.config = options if isinstance(options, MethodConfig) else configure(method, dict(options or {}))
        self.learned = learned
        self.batch_questions = batch_questions
        self.progress = progress
        self.objective = objective
        self.threshold = next((s.name for s in specs if s.threshold), None)
        self.tables: dict[str, ReplayTable] = {}
        self.memo: dict[str, dict[str, float]] = {}

    def run(self, params: dict[str, Any], report: Reporter | None = None) -> list[dict[str, Any]]:
        """Trace records of the method run with ``params`` over the rows (cache on).

        With ``report``, the rows are answered ``batch_questions`` at a time and after each batch
        ``report(batch index, mean objective so far)`` is called; when it returns True the run stops and
        :class:`Pruned` is raised (a study prunes a long trial that is already worse than most)."""

        spec = method_spec(self.method)
        options = dict(self.config.given)
        learned = self.learned
        for name, value in params.items():
            if name in spec.learned_params:  # a parameter of a learned part (D²-RAG's τ), not an option
                if learned is None:
                    stages = " and ".join(spec.requires_stages)
                    where = f"study.space.{self.method}"
                    raise ConfigError(f"{self.method}'s {name} needs the run's {stages} stages", where)
                learned = dataclasses.replace(learned, **{spec.learned_params[name]: float(value)})
            else:
                options[name] = value
        config = self.config.updated(options)  # the same instance when the trial sets no option
        method = build_method(self.method, self.tools, config, learned, utility_fallback="none")
        if report is None:
            return evaluate_built(
                self.method, method, self.rows, batch_questions=self.batch_questions, progress=self.progress
            ).records
        records: list[dict[str, Any]] = []
        size = self.batch_questions
        for step, start in enumerate(range(0, len(self.rows), size)):
            batch = self.rows[start : start + size]
            records += evaluate_built(self.method, method, batch, batch_questions=size, progress=False).records
            if start + size < len(self.rows) and report(step, metrics_of(records)[self.objective]):
                raise Pruned(f"pruned after {len(records)} of {len(self.rows)} questions")
        return records

    def __call__(self, params: dict[str, Any], report: Reporter | None = None) -> tuple[dict[str, float], str]:
        """``(metrics, kind)`` of ``params``; ``report`` lets a decoding trial be pruned (see :meth:`run`)."""
        key = json.dumps(params, sort_keys=True)
        if key in self.memo:
            return dict(self.memo[key]), "memo"
        if self.threshold is None:
            metrics, kind = metrics_of(self.run(params, report)), "decode"
        else:
            others = {k: v for k, v in params.items() if k != self.threshold}
            table_key = json.dumps(others, sort_keys=True)
            kind = "replay"
            if table_key not in self.tables:
                rule = replay_rule(self.method)
                always = {**others, **rule.always_options, self.threshold: rule.always}
                records = self.run(always)
                self.tables[table_key] = replay_table(self.method, records, self.rows)
                kind = "decode"
            metrics = self.tables[table_key].evaluate(float(params[self.threshold]))
        self.memo[key] = metrics
        return dict(metrics), kind
