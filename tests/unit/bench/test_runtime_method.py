"""bench_runtime times the bundle's deciding method the registry names, not a method written into the benchmark."""

from __future__ import annotations

import pytest

from workbench.bench.runtime.run import deciding_method
from workbench.core.errors import ConfigError
from workbench.methods import registry
from workbench.methods.spec import MethodSpec


def test_the_deciding_method_is_the_registry_default_among_the_policy_users():
    assert deciding_method(["no_rag", "standard_rag", "d2rag_oracle", "d2rag"]) == "d2rag"  # rank 10 over 0
    assert deciding_method(["no_rag", "d2rag_oracle"]) == "d2rag_oracle"  # the only one that decides


def test_a_plugin_that_decides_with_the_policy_and_ranks_higher_is_timed(monkeypatch):
    toy = MethodSpec("toy_decider", "a toy method", build=lambda req: None, requires=("classifier",), rank=20)
    monkeypatch.setitem(registry.METHOD_TABLE, "toy_decider", toy)
    assert deciding_method(["no_rag", "d2rag", "toy_decider"]) == "toy_decider"


def test_a_bundle_without_a_deciding_method_is_refused_in_one_line():
    with pytest.raises(ConfigError) as caught:
        deciding_method(["no_rag", "standard_rag"])
    assert caught.value.where == "bench_runtime.bundle" and "no_rag, standard_rag" in str(caught.value)
