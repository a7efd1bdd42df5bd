"""Routers on a cost–quality front: cost model, out-of-fold candidates, forward selection, study, pick, cascade."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.core.errors import ConfigError, DataError
from workbench.routing.candidates import RouterSpec, RoutingData, fit_router
from workbench.routing.cascade import cascade_features_cost, cascade_route, cheap_features
from workbench.routing.choose import RouterSearch, choose_router
from workbench.routing.cost import CostModel, RetrievalCost, retrieval_cost, scalar_cost
from workbench.routing.front import RoutePoint, compare_to_always, pareto
from workbench.routing.pick import PickRule, cheapest_within
from workbench.routing.search import forward_selection, router_study, spec_points

COMPONENTS = {  # per question: the greedy answer is cheap, the samples and their NLI pairs are not
    "greedy": {"lm_calls": 1.0, "prefill_tokens": 90.0, "decoded_tokens": 10.0, "seconds": 0.2},
    "samples": {"lm_calls": 1.0, "prefill_tokens": 90.0, "decoded_tokens": 50.0, "seconds": 0.8},
    "nli_answers": {"nli_pairs": 20.0, "seconds": 0.3},
}
RETRIEVAL = RetrievalCost(0.05, 500.0, 10.0, 0.6)


def _model(unit: str = "tokens") -> CostModel:
    return CostModel(COMPONENTS, RETRIEVAL, unit)


def _data(n: int, seed: int, *, folds: bool = True) -> RoutingData:
    """``confidence`` predicts correctness, ``semantic_entropy`` is noise; retrieval fixes every wrong answer."""
    from workbench.calibration.oof import stratified_folds

    rng = np.random.default_rng(seed)
    signal = rng.normal(size=n)
    label = (rng.random(n) < 1 / (1 + np.exp(-3.0 * signal))).astype(float)
    raw = np.stack([signal, rng.normal(size=n)], axis=1)
    return RoutingData(
        ("confidence", "semantic_entropy"),
        raw,
        label,
        qa_closed=label,
        qa_rag=np.ones(n),
        folds=stratified_folds(label, 5, seed) if folds else None,
        seed=seed,
    )


def test_a_router_pays_only_for_the_stats_its_features_need_each_shared_piece_once():
    model = _model()
    greedy_only = model.features_cost(["confidence", "mars", "dtr_nll"])
    assert scalar_cost(greedy_only, "tokens") == pytest.approx(100.0) and greedy_only["lm_calls"] == 1.0
    sampled = model.features_cost(["confidence", "semantic_entropy"])
    assert sampled["lm_calls"] == 2.0 and sampled["nli_pairs"] == 20.0
    assert scalar_cost(sampled, "tokens") == pytest.approx(240.0)
    assert scalar_cost(sampled, "seconds") == pytest.approx(1.3)
    routed = model.routed(greedy_only, 0.25)
    assert routed["lm_calls"] == pytest.approx(1.25) and scalar_cost(routed, "tokens") == pytest.approx(100 + 127.5)
    refs = model.baselines()
    assert scalar_cost(refs["Always-RAG"], "tokens") == pytest.approx(510.0)
    assert scalar_cost(refs["No-RAG"], "tokens") == pytest.approx(100.0)
    with pytest.raises(DataError, match="attention"):
        model.features_cost(["attention_score"])
    with pytest.raises(ConfigError, match="cost unit"):
        CostModel(COMPONENTS, RETRIEVAL, "dollars")


def test_the_retrieval_cost_model_is_measured_unless_the_recipe_sets_it():
    columns = {"rag_prompt_tokens": [400.0, 600.0], "rag_new_tokens": [8.0, 12.0], "closed_prompt_tokens": [80, 100]}
    measured = retrieval_cost({"retriever_seconds": 0.01, "rag_answer_seconds": 0.5}, columns)
    assert (measured.retriever_seconds, measured.answer_prompt_tokens, measured.answer_new_tokens) == (0.01, 500, 10)
    assert measured.source["retriever_seconds"] == "measured"
    web = retrieval_cost({"retriever_seconds": 0.01}, columns, seconds=1.5, tokens=1000)
    assert web.retriever_seconds == 1.5 and web.answer_prompt_tokens == pytest.approx(90 + 1000)
    assert web.source["retriever_seconds"] == "recipe"
    with pytest.raises(DataError, match="retrieval_seconds"):
        retrieval_cost({}, columns)
    with pytest.raises(DataError, match=r"rag to collect\.labels"):
        retrieval_cost({"retriever_seconds": 0.1}, {"rag_new_tokens": [1.0]})


def test_out_of_fold_predictions_come_from_models_that_never_saw_the_question():
    from workbench.calibration.registry import make_calibrator
    from workbench.classify.logistic import fit_logistic

    data = _data(120, 0)
    spec = RouterSpec(("confidence",))
    oof = data.oof_proba(spec)
    held = data.folds == 0
    x = data.raw[:, :1]
    cal = make_calibrator("isotonic").fit(x[~held, 0], data.label[~held])
    model = fit_logistic(cal.predict(x[~held, 0])[:, None], data.label[~held], feature_names=["confidence"])
    np.testing.assert_allclose(oof[held], model.predict_proba(cal.predict(x[held, 0])[:, None]))
    assert data.oof_proba(spec) is oof  # memoised
    raw = RouterSpec(("confidence",), inputs="raw", calibrator="platt")
    assert raw.calibrator == "raw" and raw.label == "LR(confidence; raw)"
    with pytest.raises(ConfigError):
        RouterSpec(())


def test_forward_selection_adds_the_informative_cheap_feature_and_not_the_costly_noise():
    data, model = _data(200, 1), _model()
    steps, points = forward_selection(data, model, RouterSpec(data.names), data.names)
    assert [s.features for s in steps] == [("confidence",)]
    assert steps[0].auroc > 0.75
    # free (its stats ride on the greedy answer): divided by the token ε = 1e-6 × the retrieval's cost
    assert steps[0].gain_per_cost == pytest.approx((steps[0].auroc - 0.5) / (1e-6 * 510.0))
    assert points and all(p.cost["lm_calls"] >= 1.0 for p in points)
    assert {p.rate for p in points} >= {0.0, 1.0}


def test_pareto_front_and_the_pick_rule():
    def point(name, quality, cost, kind="single"):
        return RoutePoint(name, quality, 0.5, cost, {}, 0.5, {"features": ["confidence"]}, kind=kind)

    pts = [point("a", 0.90, 100), point("b", 0.95, 300), point("c", 0.93, 400), point("d", 0.97, 250, "cascade")]
    assert [p.name for p in pareto(pts)] == ["a", "d"]
    single = [p for p in pts if p.kind == "single"]  # the cascade is measured, not shipped
    chosen, within = cheapest_within(single, always_quality=0.955, epsilon=0.01)
    assert chosen.name == "b" and within
    chosen, within = cheapest_within(single, always_quality=0.99, epsilon=0.01)
    assert chosen.name == "b" and not within


def test_compare_to_always_gives_paired_intervals_around_the_point_estimates():
    rng = np.random.default_rng(0)
    always = (rng.random(200) < 0.9).astype(float)
    routed = always.copy()
    routed[:10] = 0.0
    cost = np.where(rng.random(200) < 0.6, 610.0, 100.0)
    out = compare_to_always(routed, always, cost, 510.0, draws=500)
    lo, hi = out["difference_interval"]
    assert lo <= out["difference"] <= hi < 0.0
    s_lo, s_hi = out["saving_interval"]
    assert s_lo <= out["saving"] <= s_hi and out["saving"] == pytest.approx(1 - cost.mean() / 510.0)
    same = compare_to_always(always, always, np.full(200, 100.0), 510.0, draws=200)
    assert same["difference_interval"] == [0.0, 0.0]


def test_a_cascade_computes_the_expensive_features_only_inside_the_band():
    retrieve, band = cascade_route(
        np.array([0.1, 0.5, 0.5, 0.9]), np.array([0.0, 0.2, 0.8, 0.0]), low=0.3, high=0.7, tau=0.5
    )
    assert retrieve.tolist() == [True, True, False, False] and band.tolist() == [False, True, True, False]
    assert cheap_features(("confidence", "semantic_entropy", "entropy", "dtr_nll")) == ("confidence", "dtr_nll")
    cost = cascade_features_cost(_model(), ("confidence",), ("confidence", "semantic_entropy"), 0.5)
    assert cost["lm_calls"] == pytest.approx(1.5) and cost["nli_pairs"] == pytest.approx(10.0)


def test_the_study_is_an_optuna_multi_objective_study_others_can_open(tmp_path):
    import optuna

    data, model = _data(120, 2), _model()
    storage = tmp_path / "router.db"
    points, record = router_study(
        data,
        model,
        features=data.names,
        kinds=["logistic"],
        inputs=["calibrated", "raw"],
        calibrators=["isotonic", "platt"],
        trials=25,
        seed=0,
        storage=storage,
        enqueue=[RouterSpec(("confidence",))],
    )
    study = optuna.load_study(study_name="router", storage=f"sqlite:///{storage}")
    assert len(study.directions) == 2 and len(study.trials) == 25 == record["trials"]
    assert study.trials[0].params["use:confidence"] is True and study.trials[0].params["use:semantic_entropy"] is False
    assert len(points) == record["completed"] and {p.origin for p in points} == {"study"}
    for p in points:  # each point is what its trial returned
        assert study.trials[p.extra["trial"]].values == pytest.approx([p.quality, p.scalar])
    assert {p.kind for p in points} <= {"single", "cascade"}


def test_choose_router_measures_the_pick_against_always_rag_on_the_evaluation_split():
    fit, evaluation, model = _data(200, 3), _data(150, 4, folds=False), _model()
    record, router = choose_router(
        fit, evaluation, model, model, RouterSearch(pick=PickRule(epsilon=0.05), bootstrap=300), seed=0
    )
    assert router.spec.features == ("confidence",)  # the noise feature would only add cost
    assert record["picked"]["within_delta"] is True
    ev = record["evaluation"]
    assert ev["questions"] == 150 and ev["always_quality"] == 1.0
    retrieve = router.proba(evaluation.columns(["confidence"])) < router.tau
    assert ev["rate"] == pytest.approx(retrieve.mean())
    assert ev["cost"] == pytest.approx(100.0 + 510.0 * retrieve.mean())
    assert record["pays_for_itself"] == (ev["cost"] < 510.0)
    assert [r["name"] for r in record["fit_references"]] == ["No-RAG", "Always-RAG", "Oracle"]
    refit = fit_router(router.spec, fit, router.tau)
    np.testing.assert_allclose(refit.proba(fit.columns(["confidence"])), router.proba(fit.columns(["confidence"])))


def test_spec_points_sweep_every_distinct_retrieval_set():
    data, model = _data(60, 5), _model()
    pts = spec_points(RouterSpec(("confidence",)), data, model, "forward")
    rates = [p.rate for p in pts]
    assert rates == sorted(rates) and rates[0] == 0.0 and rates[-1] == 1.0
    assert pts[-1].quality == pytest.approx(1.0)
    # τ > 1 retrieves for every question without deciding: no feature is computed, it costs exactly Always-RAG
    assert pts[-1].tau > 1.0 and pts[-1].scalar == pytest.approx(510.0) and pts[-1].cost["lm_calls"] == 1.0
    assert pts[-2].scalar == pytest.approx(100.0 + 510.0 * pts[-2].rate)


def test_the_raw_calibrator_passes_values_through_and_round_trips():
    from workbench.calibration.registry import calibrator_from_dict, make_calibrator

    cal = make_calibrator("raw").fit([0.5, -3.0, 2.0], [1, 0, 1])
    np.testing.assert_array_equal(cal.predict([7.5, -1.0]), [7.5, -1.0])
    again = calibrator_from_dict(cal.to_dict())
    assert again.kind == "raw" and again.predict([1.0]).tolist() == [1.0]
    with pytest.raises(DataError):
        calibrator_from_dict({"kind": "raw", "version": 1, "extra": 1})


def test_when_retrieving_always_is_cheapest_within_delta_the_pick_decides_nothing_and_does_not_pay():
    from workbench.calibration.oof import stratified_folds

    rng = np.random.default_rng(7)

    def noise(n: int, folds: bool) -> RoutingData:
        label = (rng.random(n) < 0.6).astype(float)
        return RoutingData(
            ("confidence", "semantic_entropy"),
            rng.normal(size=(n, 2)),
            label,
            qa_closed=label,
            qa_rag=np.ones(n),
            folds=stratified_folds(label, 5, 0) if folds else None,
        )

    record, router = choose_router(
        noise(150, True), noise(100, False), _model(), _model(), RouterSearch(bootstrap=200), seed=0
    )
    assert router.tau > 1.0 and record["evaluation"]["rate"] == 1.0
    assert record["evaluation"]["cost"] == pytest.approx(record["evaluation"]["always_cost"])
    assert record["pays_for_itself"] is False
