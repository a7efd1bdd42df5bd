"""The study stage end to end on the tiny models: DTR and D²-RAG studies, replayed thresholds equal to runs at that
threshold, parameters that flow into evaluate and export, the CLI joining a study, and bad recipes refused."""

from __future__ import annotations

import json

import pytest

from tests.bundle_run import run_overrides, run_with_synthetic_collect
from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe

pytestmark = pytest.mark.integration

STUDY = [
    "stages=[build_data,collect,calibrate,classify,fit_utility,study,evaluate,export,report]",
    "evaluate.methods=[no_rag,dtr,d2rag]",
    "study.methods=[dtr,d2rag]",
    "study.limit=3",
    "study.n_trials=6",
    "study.ship_tau=true",  # the study's D²-RAG τ replaces classify's (when its trials are separated)
    "study.space={dtr: {tau: {low: 0.01, high: 10, log: true}}, d2rag: {tau: {low: 0, high: 1.0000000000000002}, "
    "alpha_pos: {choices: [0.0, 1.0]}}}",
]


@pytest.fixture(scope="module")
def study_run(tmp_path_factory, tiny_lm_long_dir, tiny_encoder_dir):
    tmp = tmp_path_factory.mktemp("study")
    overrides = run_overrides(tmp, tiny_lm_long_dir, tiny_encoder_dir, *STUDY)
    run_with_synthetic_collect("study", overrides)
    return tmp, overrides


def test_study_writes_parameters_scores_and_a_report(study_run):
    tmp, _ = study_run
    stage = tmp / "run" / "stages" / "study"
    summary = json.loads((stage / "summary.json").read_text())
    assert set(summary["methods"]) == {"dtr", "d2rag"} and summary["questions"] == {"val": 3, "test": 3}
    dtr = summary["methods"]["dtr"]
    assert len(dtr["trials"]) == 6 and dtr["trials"][0]["defaults"] is False  # τ = 0.001 lies outside the space
    assert dtr["kinds"]["decode"]["trials"] == 1 and dtr["kinds"]["replay"]["trials"] == 5  # one run, then replays
    d2rag = summary["methods"]["d2rag"]
    assert d2rag["trials"][0]["defaults"], d2rag["trials"][0]
    assert d2rag["kinds"]["decode"]["trials"] <= 2, d2rag["kinds"]  # one run per α value
    for name in ("dtr", "d2rag"):
        params = json.loads((stage / "params" / f"{name}.json").read_text())
        assert params["scores"]["best"]["test"]["n"] == 3.0 and params["scores"]["defaults"]["val"]["n"] == 3.0
    best = json.loads((stage / "best_params.json").read_text())
    assert best["methods"]["dtr"] == {"tau": dtr["params"]["tau"]}
    # the random tiny model scores 0 on every trial: the study cannot tell its τ values apart and keeps classify's
    verdict = best["d2rag_tau_verdict"]
    assert "d2rag_tau" not in best and not verdict["ship"] and verdict["ship_tau"] and verdict["tied"] == 6
    params = json.loads((stage / "params" / "d2rag.json").read_text())
    assert "tau" not in params and params["tau_found"] == d2rag["params"]["tau"]
    assert (tmp / "run" / "studies" / "studies.db").is_file()
    report = (tmp / "report" / "report.md").read_text()
    assert "## Hyperparameter studies" in report and (tmp / "report" / "study_history.png").is_file()
    assert "is not shipped: the study cannot separate its trials (6 of 6 trials tie" in report
    assert "optuna-dashboard sqlite:///" in report


def test_optunas_best_trial_is_the_shipped_one(study_run):
    """What Optuna's CLI and dashboard show as best is what best_params.json ships, and the pick is in the storage."""
    import optuna

    tmp, _ = study_run
    stage = tmp / "run" / "stages" / "study"
    best = json.loads((stage / "best_params.json").read_text())
    storage = f"sqlite:///{tmp / 'run' / 'studies' / 'studies.db'}"
    for method in ("dtr", "d2rag"):
        study = optuna.load_study(study_name=f"study-{method}", storage=storage)
        params = json.loads((stage / "params" / f"{method}.json").read_text())
        assert study.best_trial.number == study.user_attrs["pick_trial"] == params["trial"]
        shipped = dict(best["methods"][method])
        if method == "d2rag":  # the τ Optuna chose, recorded even when it is not shipped
            shipped["tau"] = params["tau_found"]
        assert study.best_trial.params == shipped and "fewer tokens" in study.user_attrs["pick_rule"]


def test_the_chosen_parameters_reach_evaluate_and_the_bundle(study_run):
    import datasets

    tmp, _ = study_run
    best = json.loads((tmp / "run" / "stages" / "study" / "best_params.json").read_text())
    router = json.loads((tmp / "run" / "stages" / "classify" / "selection.json").read_text())["router"]
    traces = datasets.load_from_disk(str(tmp / "run" / "stages" / "evaluate" / "traces"))
    for row in traces:
        steps = {s["name"]: s["detail"] for s in json.loads(row["trace"])["steps"]}
        if row["method"] == "dtr":
            assert steps["closed_book"]["tau"] == best["methods"]["dtr"]["tau"]
        if row["method"] == "d2rag":  # the study's τ was not shipped (its trials tie): classify's decides
            assert steps["decide"]["tau"] == router["tau"]
    bundles = sorted((tmp / "bundles").glob("tiny/*/manifest.json"))
    manifest = json.loads(bundles[-1].read_text())
    assert manifest["methods"]["dtr"]["options"]["tau"] == best["methods"]["dtr"]["tau"]
    assert manifest["decision"]["tau"] == router["tau"] and manifest["decision"]["rule"] == router["rule"]
    assert manifest["provenance"]["fitted"]["decision.tau"]["set_by"] == "classify"
    if "alpha_pos" in best["methods"]["d2rag"]:
        assert manifest["methods"]["d2rag"]["options"]["alpha_pos"] == best["methods"]["d2rag"]["alpha_pos"]


def test_evaluate_params_file_overrides_the_recipe(study_run, tmp_path):
    from workbench.stages.runner import run_recipe

    _, overrides = study_run
    params = tmp_path / "dtr.json"
    params.write_text(json.dumps({"method": "dtr", "options": {"tau": 99.0}}))
    extra = [
        "stages=[build_data,evaluate]",
        "evaluate.methods=[dtr]",
        f"evaluate.params=[{params}]",
        f"run_dir={tmp_path}/run",
    ]
    run_recipe(load_recipe("study", [*overrides, *extra]))
    import datasets

    rows = datasets.load_from_disk(str(tmp_path / "run" / "stages" / "evaluate" / "traces"))
    assert {json.loads(r["trace"])["steps"][0]["detail"]["tau"] for r in rows} == {99.0}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"method": "insemrag", "options": {}}))
    with pytest.raises(ConfigError, match=r"not in evaluate\.methods"):
        load_recipe("study", [*overrides, *extra[:2], f"evaluate.params=[{bad}]"])


def test_a_replayed_threshold_scores_what_the_method_scores_when_run_at_it(study_run):
    import datasets

    from workbench.data.dataset_store import load_saved_dataset_dict
    from workbench.methods.evaluation import evaluate_method
    from workbench.tuning.objective import MethodObjective, metrics_of
    from workbench.tuning.space import parse_space

    tmp, overrides = study_run
    config = load_recipe("study", overrides).config
    run = tmp / "run" / "stages"
    rows = list(load_saved_dataset_dict(run / "build_data" / "qa")["val"].select(range(3)))
    corpus = datasets.load_from_disk(str(run / "build_data" / "corpus"))
    tools = _tools(config, corpus)
    options = dict(config.evaluate.options["dtr"])
    objective = MethodObjective(
        tools, "dtr", rows, parse_space("dtr", {"tau": {"low": 0.01, "high": 10}}, "t"), options=options
    )
    first = True
    for tau in (0.5, float("inf")):  # the tiny model's answers have u = inf (empty): both branches, one each
        replayed, kind = objective({"tau": tau})
        assert kind == ("decode" if first else "replay")  # the first call makes the always-retrieve table
        first = False
        direct = metrics_of(evaluate_method(tools, "dtr", {**options, "tau": tau}, rows, progress=False).records)
        for key in ("em", "f1", "contains", "retrieval_rate", "lm_calls", "tokens", "nli_pairs"):
            assert replayed[key] == pytest.approx(direct[key]), (tau, key)
        assert replayed["retrieval_rate"] == (1.0 if tau == 0.5 else 0.0)
    assert objective({"tau": 0.5})[1] == "memo"


def _tools(config, corpus):
    """The run's Tools, built by the stages' own Resources (as the study stage builds them)."""
    from workbench.backends.cost import CostCounter
    from workbench.methods.base import Tools
    from workbench.stages.context import Resources

    counter = CostCounter()
    resources = Resources(config, counter)
    return Tools(
        generator=resources.generator(),
        retriever=resources.retriever(corpus),
        corpus=corpus,
        counter=counter,
        judge=resources.judge(),
        embedder=resources.embedder(),
        passage_chars=config.evaluate.passage_chars,
        max_new_tokens=config.evaluate.max_new_tokens,
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("study.methods=[no_rag]", "nothing to tune"),
        ("study.space={dtr: {tau: {low: 2, high: 1}}}", "empty or inverted range"),
        ("study.space={dtr: {alpha: {low: 0, high: 1}}}", "unknown parameter 'alpha'"),
        ("study.constraints={speed: 1}", "constraint on unknown metric 'speed'"),
        ("study.token_budget=100", "set multi_objective: true"),
        ("study.split=nope", "study reads split 'nope'"),
    ],
)
def test_bad_study_settings_fail_at_load(override, message):
    with pytest.raises(ConfigError, match=message):
        load_recipe("study", [override])


def test_d2rag_needs_its_learned_stages():
    with pytest.raises(ConfigError, match="tuning d2rag needs the stages collect, calibrate, classify"):
        load_recipe("study", ["stages=[build_data,study]"])


def test_a_long_trial_stops_when_its_study_says_so(study_run):
    import datasets

    from workbench.data.dataset_store import load_saved_dataset_dict
    from workbench.tuning.objective import MethodObjective, Pruned

    tmp, overrides = study_run
    config = load_recipe("study", overrides).config
    run = tmp / "run" / "stages"
    rows = list(load_saved_dataset_dict(run / "build_data" / "qa")["val"].select(range(3)))
    tools = _tools(config, datasets.load_from_disk(str(run / "build_data" / "corpus")))
    objective = MethodObjective(tools, "no_rag", rows, [], batch_questions=1)
    steps = []
    with pytest.raises(Pruned, match="after 2 of 3 questions"):
        objective({}, lambda step, value: steps.append((step, value)) or step == 1)
    assert [s for s, _ in steps] == [0, 1]
    metrics, kind = objective({}, lambda step, value: False)
    assert kind == "decode" and metrics["n"] == 3.0


def test_a_dense_rag_theta_study_searches_its_breakpoints(study_run, tmp_path):
    from workbench.stages.runner import run_recipe

    _, overrides = study_run
    extra = [
        "stages=[build_data,study]",
        "study.methods=[dense_rag]",
        "study.space={dense_rag: {theta: {breakpoints: true}}}",
        "study.n_trials=3",
        "study.limit=2",
        f"run_dir={tmp_path}/run",
    ]
    run_recipe(load_recipe("study", [*overrides, *extra]))
    summary = json.loads((tmp_path / "run" / "stages" / "study" / "summary.json").read_text())
    dense = summary["methods"]["dense_rag"]
    assert dense["breakpoints"] and {t["params"]["theta"] for t in dense["trials"]} <= set(dense["breakpoints"])
    assert len(dense["trials"]) == 3 and set(dense["kinds"]) <= {"decode", "memo"}
    assert dense["defaults"] == {"theta": 0.2} and dense["scores"]["defaults"]["test"]["n"] == 2.0
