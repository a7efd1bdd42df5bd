"""The bundle layer asks the deciding method's spec, never a method's name: which method's settings a shipped
decision shows (``decision_settings``), the key a run records the decision policy's τ under (``learned_params``:
``<method>_<param>``) and which methods' digests hold τ (those that use the decision policy). A toy method that
decides with the policy, put in the registry's table, gets all three."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from workbench.bundle.learned import parameters_digests, recorded_tau
from workbench.bundle.shipped import decision_line, shipped_decision, symbol
from workbench.methods import registry
from workbench.methods.spec import MethodSpec


@dataclass
class ToySettings:
    """A toy decider's settings: one shown with the decision, one not."""

    beta_gain: float = 0.25
    k: int = 3


TOY = MethodSpec(
    "toy_decider",
    "a toy method deciding with the fitted policy",
    build=lambda req: None,
    settings=ToySettings,
    requires=("classifier",),
    learned_params={"cut": "tau"},
    decision_settings=("beta_gain",),
)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(registry.METHOD_TABLE, TOY.name, TOY)
    return TOY


def _manifest(methods: dict) -> dict:
    decision = {"features": ["entropy"], "classifier": "logistic", "tau": 0.4, "rule": "target_rate"}
    return {"decision": decision, "methods": methods}


def test_the_built_in_facts_are_d2rag_s():
    assert registry.learned_keys("tau") == ["d2rag_tau"]  # the study's and evaluate's on-disk key, unchanged
    assert registry.decision_method() == "d2rag" and registry.decision_method(["no_rag", "dtr"]) is None
    spec = registry.METHOD_TABLE["d2rag"]
    assert spec.decision_settings == ("alpha_pos", "alpha_neg")
    assert all(hasattr(spec.settings_class()(), name) for name in spec.decision_settings)


def test_a_shipped_decision_shows_the_deciding_method_s_own_settings(toy):
    manifest = _manifest({"no_rag": {"options": {}}, "toy_decider": {"options": {"beta_gain": 0.5}}})
    manifest["provenance"] = {"fitted": {"toy_decider.beta_gain": {"set_by": "study", "split": "val", "questions": 3}}}
    decision = shipped_decision(manifest)
    assert list(decision.alphas) == ["beta_gain"] and decision.alphas["beta_gain"].value == 0.5
    line = decision_line(decision)
    assert "β_gain = 0.5 (study on `val`, 3 questions)" in line and "α_pos" not in line
    defaulted = shipped_decision(_manifest({"toy_decider": {"options": {}}}))
    assert defaulted.alphas["beta_gain"].value == 0.25 and defaulted.alphas["beta_gain"].set_by == "default"


def test_without_defaults_no_decision_setting_is_read():
    decision = shipped_decision(_manifest({"d2rag": {"options": {"alpha_pos": 0.5}}}), with_defaults=False)
    assert decision.alphas == {} and decision.tau.value == 0.4
    assert decision_line(decision).startswith("D²-RAG retrieves iff P(correct) < τ = 0.400")


def test_the_recorded_tau_is_read_under_the_key_of_the_method_that_sets_it(toy):
    assert registry.learned_keys("tau") == ["d2rag_tau", "toy_decider_cut"]
    assert recorded_tau({"toy_decider_cut": 0.3}) == 0.3
    assert recorded_tau({"d2rag_tau": 0.4, "toy_decider_cut": 0.3}) == 0.4  # the table's order
    assert recorded_tau({"d2rag_tau": None, "methods": {}}) is None


def test_the_digest_of_a_method_that_uses_the_policy_holds_tau(toy):
    options = {"no_rag": {}, "toy_decider": {"beta_gain": 0.5}, "d2rag": {}}
    at_one, at_other = parameters_digests(options, 0.4), parameters_digests(options, 0.5)
    assert at_one["no_rag"] == at_other["no_rag"]
    assert at_one["toy_decider"] != at_other["toy_decider"] and at_one["d2rag"] != at_other["d2rag"]


def test_a_setting_s_leading_greek_letter_is_printed_as_the_letter():
    assert symbol("alpha_pos") == "α_pos" and symbol("theta") == "θ" and symbol("k") == "k"
    assert symbol("alphabet_size") == "alphabet_size"
