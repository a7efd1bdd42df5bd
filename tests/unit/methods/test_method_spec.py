"""The method contract (workbench/methods/spec.py) as the registry and the pipeline use it: typed settings made once
and handed to the builder as they are, one decision rule per method shared by the method and the study's replays,
the default method by rank, and what a spec's other fields decide elsewhere (gold-free twin, learned policy)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.methods import registry
from workbench.methods.spec import MethodSpec


@dataclass(frozen=True)
class CountedSettings:
    """Settings that count their validations."""

    tau: float = doc("a threshold", 0.5)

    def validate(self) -> CountedSettings:
        CHECKS.append(self.tau)
        if not 0 <= self.tau <= 1:
            raise ConfigError(f"tau must be in [0, 1], got {self.tau}", "counted.tau")
        return self


CHECKS: list[float] = []


def test_the_typed_settings_reach_the_builder_as_made_once(tools, monkeypatch):
    from workbench.methods.baselines import NoRAG

    received = []

    def build(request):
        received.append(request.settings())
        return NoRAG(request.tools)

    monkeypatch.setitem(
        registry.METHOD_TABLE, "counted", MethodSpec("counted", "test", build, settings=CountedSettings)
    )
    CHECKS.clear()
    config = registry.configure("counted", {"tau": 0.25})
    assert isinstance(config.settings, CountedSettings) and CHECKS == [0.25]
    registry.build_method("counted", tools, config, None)
    assert received == [config.settings] and received[0] is config.settings and CHECKS == [0.25]  # not re-validated
    with pytest.raises(ConfigError) as bad:
        registry.configure("counted", {"tau": 2.0})
    assert bad.value.where == "evaluate.options.counted.tau"


def test_dtrs_rule_is_written_once_and_the_replay_uses_it():
    from workbench.methods.dtr import METHOD, decide
    from workbench.methods.dtr.method import DTR
    from workbench.tuning.replay import ReplayTable

    assert METHOD.decide is decide
    assert decide(1.0, 1.0) and not decide(0.99, 1.0) and not decide(math.inf, math.inf)  # u ≥ τ; τ = ∞ never
    scores = np.array([0.0, 0.5, 1.0, math.inf])
    table = ReplayTable("dtr", scores, decide, {}, {}, np.ones(4, dtype=bool))
    assert table.decisions(0.5).tolist() == [False, True, True, True]
    assert table.decisions(math.inf).tolist() == [False] * 4
    assert "decide(" in __import__("inspect").getsource(DTR._closed_book)  # the method calls the same function


def test_d2rags_rule_retrieves_below_tau():
    from workbench.methods.d2rag import ALWAYS_RETRIEVE_TAU, decide

    p = np.array([0.2, 0.5, 1.0])
    assert decide(p, 0.5).tolist() == [True, False, False]
    assert decide(p, ALWAYS_RETRIEVE_TAU).all()


def test_the_default_method_is_the_highest_ranked_then_the_first():
    assert registry.default_method(["no_rag", "dtr", "d2rag"]) == "d2rag"
    assert registry.default_method(["dtr", "no_rag"]) == "dtr"
    assert registry.default_method(["unknown", "no_rag"]) == "unknown"
    with pytest.raises(ValueError):
        registry.default_method([])


def test_the_specs_say_what_the_pipeline_asks_of_a_method():
    table = registry.METHOD_TABLE
    assert {"oracle", "d2rag_oracle"} == registry.GOLD_METHODS
    assert table["d2rag_oracle"].gold_free_twin == "d2rag"
    assert [m for m in table if registry.uses_decision_policy(m)] == ["d2rag", "d2rag_oracle"]
    assert registry.INSEMRAG_METHODS == ("insemrag", "insemrag_distilled")
    from workbench.methods.backend_needs import method_needs

    assert method_needs("dtr") == {"logprobs"} and method_needs("no_rag") == frozenset()
    assert method_needs("insemrag_distilled") == frozenset()


def test_a_method_package_init_stays_light():
    import subprocess
    import sys

    code = (
        "import sys; from workbench.methods.registry import METHODS; "
        "heavy = [m for m in sys.modules if m.startswith('workbench.methods') "
        "and m.endswith(('.method', '.retrieval'))]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
