"""The k-NN and decision-tree routers: they decide as scikit-learn's estimators do, survive the learned-artifact
round trip (the k-NN's points as safetensors), export to bounded ONNX graphs that ONNX Runtime runs to the numpy
answer, and refuse bad hyperparameters and tampered files in one line."""

from __future__ import annotations

import itertools
import json
from types import SimpleNamespace

import numpy as np
import pytest

from tests.unit.classify.helpers import FEATURE_NAMES, Split
from workbench.classify.knn import KNNConfig, KNNModel, fit_knn
from workbench.classify.onnx_check import check_bounded_graph
from workbench.classify.onnx_export import OnnxClassifier, export_onnx
from workbench.classify.select import out_of_fold_proba, train_classifiers
from workbench.classify.tree import TreeConfig, TreeModel, fit_tree
from workbench.core.errors import ConfigError, DataError
from workbench.methods.learned import CLASSIFIER_KINDS, load_learned, save_learned
from workbench.stages.classify.settings import knn_config_of, tree_config_of


@pytest.fixture(scope="module")
def knn(data: Split) -> KNNModel:
    return fit_knn(data.X_train, data.y_train, KNNConfig(7), feature_names=FEATURE_NAMES)


@pytest.fixture(scope="module")
def tree(data: Split) -> TreeModel:
    return fit_tree(
        data.X_train, data.y_train, TreeConfig(max_depth=4, min_samples_leaf=5), feature_names=FEATURE_NAMES
    )


def test_the_knn_gives_scikit_learns_neighbour_shares(data, knn):
    from sklearn.neighbors import KNeighborsClassifier

    reference = KNeighborsClassifier(n_neighbors=7).fit(knn.points, data.y_train)
    standardised = (data.X_val.astype(np.float32).astype(np.float64) - knn.mean) / knn.scale
    np.testing.assert_allclose(knn.predict_proba(data.X_val), reference.predict_proba(standardised)[:, 1], atol=1e-12)
    p = knn.predict_proba(data.X_val)
    assert set(np.round(p * 7).tolist()) <= set(range(8)) and 0 < p.mean() < 1


def test_knn_ties_go_to_the_lower_reference_index_in_numpy_and_onnx(tmp_path):
    X = np.array([[0.0], [2.0], [-2.0]])  # mean 0: 2 and -2 are equally far from 0 once standardised
    model = fit_knn(X, [1.0, 0.0, 1.0], KNNConfig(2))
    assert model.neighbours([[0.0]]).tolist() == [[0, 1]]  # the point itself, then index 1 before index 2
    assert model.predict_proba([[0.0]]).tolist() == [0.5]
    assert OnnxClassifier(export_onnx(model, tmp_path / "tie.onnx")).predict_proba([[0.0]]).tolist() == [0.5]


def test_the_tree_gives_scikit_learns_leaf_shares(data, tree):
    from sklearn.tree import DecisionTreeClassifier

    reference = DecisionTreeClassifier(max_depth=4, min_samples_leaf=5, random_state=0).fit(data.X_train, data.y_train)
    np.testing.assert_allclose(tree.predict_proba(data.X_val), reference.predict_proba(data.X_val)[:, 1], atol=1e-12)
    assert 1 <= tree.depth <= 4 and (tree.left >= 0).any()


@pytest.mark.parametrize("kind", ["knn", "tree"])
def test_each_kind_round_trips_as_a_learned_artifact(tmp_path, data, knn, tree, kind):
    model = {"knn": knn, "tree": tree}[kind]
    written = save_learned(model, tmp_path / f"{kind}.json")
    suffixes = sorted(p.suffix for p in written)
    assert suffixes == ([".json", ".safetensors"] if kind == "knn" else [".json"])  # points as tensors, never pickles
    loaded = load_learned(tmp_path / f"{kind}.json", expect=CLASSIFIER_KINDS)
    assert type(loaded) is type(model) and loaded.feature_names == FEATURE_NAMES
    np.testing.assert_array_equal(loaded.predict_proba(data.X_val), model.predict_proba(data.X_val))


@pytest.mark.parametrize("kind", ["knn", "tree"])
def test_each_kind_exports_a_bounded_graph_that_decides_as_numpy(tmp_path, data, knn, tree, kind):
    model = {"knn": knn, "tree": tree}[kind]
    path = export_onnx(model, tmp_path / f"{kind}.onnx", FEATURE_NAMES)
    graph = OnnxClassifier(path)  # the bundle loader's checks run here: self-contained, bounded, known operators
    assert graph.classifier_kind == kind and graph.declared_kind == kind
    rows = np.vstack([data.X_val, data.X_train[:20]])
    if kind == "tree":  # rows exactly on each split's threshold go left in both
        inner = np.flatnonzero(tree.left >= 0)
        on_split = np.tile(data.X_val[:1], (inner.size, 1))
        on_split[np.arange(inner.size), tree.feature[inner]] = tree.threshold[inner]
        rows = np.vstack([rows, on_split])
    np.testing.assert_allclose(graph.predict_proba(rows), model.predict_proba(rows), atol=1e-7)
    tau = 0.5
    np.testing.assert_array_equal(graph.predict_proba(rows) < tau, model.predict_proba(rows) < tau)


def test_a_one_level_tree_exports_and_decides_as_numpy(tmp_path, data):
    stump = fit_tree(data.X_train, data.y_train, TreeConfig(max_depth=1, min_samples_leaf=1))
    graph = OnnxClassifier(export_onnx(stump, tmp_path / "stump.onnx"))
    assert graph.classifier_kind == "tree"
    np.testing.assert_allclose(graph.predict_proba(data.X_val), stump.predict_proba(data.X_val), atol=1e-7)


def test_a_topk_whose_k_is_computed_is_refused_before_onnx_runtime(tmp_path, knn):
    import onnx
    from onnx import helper

    proto = onnx.load(str(export_onnx(knn, tmp_path / "knn.onnx")))
    for node in proto.graph.node:  # k from the data: the row count, not a constant
        if node.op_type == "TopK":
            node.input[1] = "rows_k"
    proto.graph.node.insert(0, helper.make_node("Shape", ["calibrated_features"], ["rows_k"], start=0, end=1))
    with pytest.raises(DataError, match=r"operator|shape"):
        check_bounded_graph(proto, "knn.onnx")


def test_train_classifiers_and_out_of_fold_fit_the_new_kinds(data):
    result = train_classifiers(
        data.X_train,
        data.y_train,
        data.X_val,
        data.y_val,
        kinds=("knn", "tree"),
        seeds=(0,),
        feature_names=FEATURE_NAMES,
        knn_config=KNNConfig(9),
        tree_config=TreeConfig(max_depth=3),
    )
    assert set(result.summary) == {"knn", "tree"} and result.kind in {"knn", "tree"}
    folds = np.arange(data.y_train.size) % 3
    for kind in ("knn", "tree"):
        oof = out_of_fold_proba(kind, data.X_train, data.y_train, folds, seed=0, val_fraction=0.3)
        assert np.isfinite(oof).all() and ((oof >= 0) & (oof <= 1)).all()


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (lambda: KNNConfig(0), "knn.n_neighbors"),
        (lambda: KNNConfig(2.5), "knn.n_neighbors"),
        (lambda: TreeConfig(max_depth=0), "tree.max_depth"),
        (lambda: TreeConfig(max_depth=33), "tree.max_depth"),
        (lambda: TreeConfig(min_samples_leaf=0), "tree.min_samples_leaf"),
        (lambda: knn_config_of(SimpleNamespace(knn_neighbors=0)), "classify.knn_neighbors"),
        (
            lambda: tree_config_of(SimpleNamespace(tree_max_depth=40, tree_min_samples_leaf=1)),
            "classify.tree_max_depth",
        ),
    ],
)
def test_bad_hyperparameters_are_refused_in_one_line(make, where):
    with pytest.raises(ConfigError) as caught:
        make()
    assert caught.value.where == where and "\n" not in str(caught.value)


def test_more_neighbours_than_rows_is_refused(data):
    with pytest.raises(ConfigError, match=r"knn\.n_neighbors"):
        fit_knn(data.X_train[:5], [1.0, 0.0, 1.0, 0.0, 1.0], KNNConfig(6))


def _tampered_tree(tree: TreeModel, **changes) -> dict:
    d = json.loads(json.dumps(tree.to_dict()))
    for key, edit in changes.items():
        d[key] = edit(d[key])
    return d


@pytest.mark.parametrize(
    "changes",
    [
        {"left": lambda v: [0, *v[1:]]},  # the root its own child: a cycle
        {"right": lambda v: [v[0], *([-1] * (len(v) - 1))] if len(v) > 1 else v},  # children dropped unevenly
        {"feature": lambda v: [99, *v[1:]]},  # a feature the tree does not read
        {"value": lambda v: [1.5, *v[1:]]},
        {"depth": lambda v: v + 1},
        {"threshold": lambda v: ["nan-text", *v[1:]]},
    ],
)
def test_a_tampered_tree_is_refused(tree, changes):
    with pytest.raises(DataError):
        TreeModel.from_dict(_tampered_tree(tree, **changes))


def test_a_knn_without_its_points_or_with_foreign_labels_is_refused(knn):
    with pytest.raises(DataError, match="tensors"):
        KNNModel.from_dict(knn.to_dict(), tensors={})
    labels = knn.labels.copy()
    labels[0] = 2.0
    with pytest.raises(DataError, match="labels"):
        KNNModel.from_dict(knn.to_dict(), tensors={"points": knn.points, "labels": labels})
    with pytest.raises(DataError, match="neighbours"):
        KNNModel.from_dict(knn.to_dict() | {"n_neighbors": knn.labels.size + 1}, tensors=knn.tensors())


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("classify.tree_max_depth=40", "classify.tree_max_depth"),
        ("classify.tree_min_samples_leaf=0", "classify.tree_min_samples_leaf"),
        ("classify.knn_neighbors=0", "classify.knn_neighbors"),
        ("classify.kinds=[knn,forest]", "classify.kinds"),
    ],
)
def test_a_recipe_with_a_bad_router_setting_is_refused_at_load_naming_the_key(override, key):
    from workbench.recipe import load_recipe

    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_recipe("quickstart", [override])


def test_a_recipe_may_train_the_new_kinds():
    from workbench.recipe import load_recipe

    loaded = load_recipe("quickstart", ["classify.kinds=[knn,tree]", "classify.knn_neighbors=9"])
    assert loaded.config.classify.kinds == ["knn", "tree"] and knn_config_of(loaded.config.classify).n_neighbors == 9


class _Files:
    """A verified bundle's files, reduced to the one learned classifier a parent decision reads."""

    def __init__(self, model: object) -> None:
        self.model = model

    def learned(self, *args: object) -> object:
        return self.model


def _manifest(**classify: object) -> dict:
    decision = {"files": {"classifier": "learned/classifier.json"}, "tau": 0.5, "rule": "max_f1"}
    return {"decision": decision, "recipe": {"resolved": {"classify": classify}}}


def test_recalibrate_refits_a_knn_or_tree_with_the_parents_settings(data, knn, tree):
    from workbench.recalibration.decision import parent_decision, refit_router

    manifest = _manifest(tree_max_depth=2, tree_min_samples_leaf=3)
    parent = parent_decision(manifest, _Files(knn))
    refitted = refit_router(parent, data.X_train, data.y_train, FEATURE_NAMES, 0)
    assert refitted.kind == "knn" and refitted.n_neighbors == knn.n_neighbors == 7  # not the default 5
    refitted = refit_router(parent_decision(manifest, _Files(tree)), data.X_train, data.y_train, FEATURE_NAMES, 0)
    assert refitted.kind == "tree" and refitted.depth == 2  # the recipe's depth, not the default 5
    with pytest.raises(ConfigError, match=r"classify\.tree_max_depth"):
        parent_decision(_manifest(tree_max_depth=40), _Files(tree))


@pytest.mark.parametrize("kind", ["knn", "tree"])
def test_the_router_search_fits_knn_and_tree_routers_with_the_recipes_settings(data, kind):
    from workbench.routing.candidates import RouterSpec, RoutingData, fit_router

    rng = np.random.default_rng(0)
    n = data.y_train.size
    routing = RoutingData(
        FEATURE_NAMES,
        data.X_train,
        data.y_train,
        data.y_train,
        rng.integers(0, 2, n).astype(float),
        folds=np.arange(n) % 3,
        knn_config=KNNConfig(11),
        tree_config=TreeConfig(max_depth=2),
    )
    spec = RouterSpec(("conf", "entropy"), kind=kind)
    assert spec.label.startswith({"knn": "kNN(", "tree": "Tree("}[kind])
    oof = routing.oof_proba(spec)
    assert np.isfinite(oof).all() and ((oof >= 0) & (oof <= 1)).all()
    fitted = fit_router(spec, routing, 0.5).classifier
    assert fitted.kind == kind
    assert (fitted.n_neighbors == 11) if kind == "knn" else (fitted.depth == 2)


def test_knn_equidistant_points_summed_in_any_order_tie_the_same_way_in_numpy_and_onnx(tmp_path):
    # every permutation of one point: from the centre all are equally far, but ONNX Runtime's float64 sums of the
    # squares differ from numpy's in the last bit — ranked in float64, the two picked different neighbours
    rng = np.random.default_rng(0)
    for _ in range(8):
        base = rng.random(4)
        X = np.array(list(itertools.permutations(base)))
        y = (rng.random(len(X)) < 0.5).astype(float)
        y[:2] = (0.0, 1.0)
        rows = np.vstack([X.mean(axis=0), np.full(4, base.mean()), np.full(4, 0.5)])
        for k in (3, 5, 7):
            model = fit_knn(X, y, KNNConfig(k))
            graph = OnnxClassifier(export_onnx(model, tmp_path / "ties.onnx"))
            np.testing.assert_allclose(graph.predict_proba(rows), model.predict_proba(rows), atol=1e-6)
