"""The utility classifier's labels are cut at the run's τ_pos / τ_neg (issue 27, item 4), not at D²-RAG's defaults:
the fit_utility stage on the tiny model with other cuts stores them in ``utility.json`` and labels its pairs there."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from workbench.recipe import load_recipe
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration


def test_the_classifier_learns_the_classes_cut_at_the_runs_taus(tmp_path, tiny_lm_long_dir):
    import datasets

    from workbench.methods.learned import load_learned
    from workbench.methods.seper.utility_classifier import class_labels

    overrides = [
        f"generator.model={tiny_lm_long_dir}",
        f"run_dir={tmp_path}/run",
        "tracker=none",
        "threads=0",
        "data.max_per_template=20",
        "stages=[build_data,fit_utility]",
        "fit_utility.limit=6",
        "fit_utility.folds=2",
        "fit_utility.samples=2",
        "fit_utility.max_new_tokens=3",
        "fit_utility.k=2",
        "fit_utility.tau_pos=0.3",
        "fit_utility.tau_neg=-0.25",
    ]
    run_recipe(load_recipe("evaluate", overrides))
    stage = tmp_path / "run" / "stages" / "fit_utility"
    fitted = load_learned(stage / "utility.json", expect={"logistic_utility"})
    assert (fitted.tau_pos, fitted.tau_neg) == (0.3, -0.25)
    summary = json.loads((stage / "summary.json").read_text())
    assert (summary["oof"]["tau_pos"], summary["oof"]["tau_neg"]) == (0.3, -0.25)
    pairs = datasets.load_from_disk(str(stage / "pairs"))
    labels = Counter(class_labels(pairs["delta_seper_s"], 0.3, -0.25).tolist())
    assert summary["oof"]["labels"] == {c: labels.get(c, 0) for c in ("noisy", "neutral", "relevant")}
