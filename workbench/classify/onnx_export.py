"""ONNX export of the retrieval-decision classifiers, and running an exported graph with onnxruntime.

Two graphs. The **classifier graph** (:func:`export_onnx`: the classify stage's ``logistic.onnx``, ``mlp.onnx``,
``knn.onnx``, ``tree.onnx``, ``router.onnx``), for every kind: input ``calibrated_features`` float32
``[batch, n_features]`` — the *calibrated* features u (the calibrators' outputs; un-standardised, in the model's
feature order) → output ``p_correct`` float32 ``[batch]``; the standardisation (where the kind has one) is inside the
graph. The **decision graph**
(:func:`~workbench.classify.onnx_decision.export_decision_onnx`, the
bundle's ``learned/classifier.onnx``): input ``raw_features`` float64 — the raw oriented features as collected —
with the imputation and the calibrators inside (:mod:`workbench.classify.onnx_decision`), so the file alone gives
P(correct) and, with τ, the decision. Each graph's metadata records its feature names, kind, ``input``
(``calibrated`` / ``raw``) and contract. Graphs written before this split name their input ``features``; they are
classifier graphs (their metadata said "raw features", but they always read the calibrated ones).
"""

from __future__ import annotations

import io
import json
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from workbench.classify.inputs import as_features
from workbench.classify.knn import KNNModel
from workbench.classify.logistic import LogisticModel
from workbench.classify.mlp import MLPModel
from workbench.classify.onnx_check import check_bounded_graph, check_self_contained, graph_kind, parse_model
from workbench.classify.tree import TreeModel
from workbench.core.atomic import atomic_write_bytes
from workbench.core.errors import ConfigError, DataError
from workbench.core.strict_json import loads_strict

INPUT_NAME = "calibrated_features"
"""The classifier graph's input: calibrated features (the calibrators' outputs), float32."""
LEGACY_INPUT = "features"
"""The classifier graph's input name before it said what it reads (the calibrated features too)."""
CLASSIFIER_INPUTS = (INPUT_NAME, LEGACY_INPUT)
OUTPUT_NAME = "p_correct"
RAW_INPUT = "raw_features"
"""The decision graph's input (:mod:`workbench.classify.onnx_decision`): raw oriented features, float64."""
OPSET = 17
IR_VERSION = 8  # onnx IR for opset 17; readable by onnxruntime releases since 1.11


def _logistic_graph(model: LogisticModel):
    """The logistic model as an ONNX ModelProto: Sub, Div, MatMul, Add, Sigmoid, Squeeze."""
    from onnx import helper, numpy_helper

    n = model.n_features
    inits = [
        numpy_helper.from_array(model.mean.astype(np.float32), "mean"),
        numpy_helper.from_array(model.scale.astype(np.float32), "scale"),
        numpy_helper.from_array(model.coef.astype(np.float32).reshape(n, 1), "coef"),
        numpy_helper.from_array(np.array([model.intercept], dtype=np.float32), "intercept"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "squeeze_axes"),
    ]
    nodes = [
        helper.make_node("Sub", [INPUT_NAME, "mean"], ["centred"]),
        helper.make_node("Div", ["centred", "scale"], ["standardised"]),
        helper.make_node("MatMul", ["standardised", "coef"], ["dot"]),
        helper.make_node("Add", ["dot", "intercept"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["p_column"]),
        helper.make_node("Squeeze", ["p_column", "squeeze_axes"], [OUTPUT_NAME]),
    ]
    return _classifier_proto(nodes, inits, "logistic_p_correct", n)


def _classifier_proto(nodes: list, inits: list, name: str, n_features: int):
    """A checked ModelProto of a classifier graph: ``calibrated_features`` float32 ``[batch, n_features]`` →
    ``p_correct`` float32 ``[batch]`` (opset :data:`OPSET`, IR :data:`IR_VERSION`)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", n_features])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch"])],
        initializer=inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="workbench")
    proto.ir_version = IR_VERSION
    onnx.checker.check_model(proto)
    return proto


def _knn_graph(model: KNNModel):
    """The k-NN as an ONNX ModelProto (plain operators; float64 inside, as numpy computes it): the input cast to
    float64 and standardised, squared distances to every reference point (Sub, Mul, ReduceSum over
    ``[batch, points, features]``) ranked at float32 precision, the ``n_neighbors`` nearest by ``TopK`` (smallest
    first, ties to the lower index), their labels gathered and averaged."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(model.mean, "mean"),
        numpy_helper.from_array(model.scale, "scale"),
        numpy_helper.from_array(np.ascontiguousarray(model.points), "points"),
        numpy_helper.from_array(np.ascontiguousarray(model.labels), "labels"),
        numpy_helper.from_array(np.array([model.n_neighbors], dtype=np.int64), "k"),
        numpy_helper.from_array(np.array(float(model.n_neighbors)), "k_float"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"),
    ]
    nodes = [
        helper.make_node("Cast", [INPUT_NAME], ["x64"], to=TensorProto.DOUBLE),
        helper.make_node("Sub", ["x64", "mean"], ["centred"]),
        helper.make_node("Div", ["centred", "scale"], ["standardised"]),
        helper.make_node("Unsqueeze", ["standardised", "axis1"], ["rows3"]),
        helper.make_node("Sub", ["rows3", "points"], ["diff"]),
        helper.make_node("Mul", ["diff", "diff"], ["squared"]),
        helper.make_node("ReduceSum", ["squared", "axis2"], ["distances64"], keepdims=0),
        helper.make_node("Cast", ["distances64"], ["distances"], to=TensorProto.FLOAT),  # ranked as numpy ranks them
        helper.make_node("TopK", ["distances", "k"], ["nearest", "neighbours"], axis=1, largest=0, sorted=1),
        helper.make_node("Gather", ["labels", "neighbours"], ["neighbour_labels"], axis=0),
        helper.make_node("ReduceSum", ["neighbour_labels", "axis1"], ["correct"], keepdims=0),
        helper.make_node("Div", ["correct", "k_float"], ["share"]),
        helper.make_node("Cast", ["share"], [OUTPUT_NAME], to=TensorProto.FLOAT),
    ]
    return _classifier_proto(nodes, inits, "knn_p_correct", model.n_features)


def _tree_graph(model: TreeModel):
    """The tree as an ONNX ModelProto (plain operators, no ``ai.onnx.ml`` domain): the root's split on every row,
    then ``depth − 1`` unrolled steps — gather the node's feature (GatherElements) and threshold, go left iff the
    float64 value is <= the threshold (LessOrEqual, Where) — leaves pointing to themselves; then the leaf's value."""
    from onnx import TensorProto, helper, numpy_helper

    feature, threshold, left, right = model.step_tables()
    inits = [
        numpy_helper.from_array(model.value, "value"),
        numpy_helper.from_array(np.array(feature[0]), "root_feature"),
        numpy_helper.from_array(np.array(threshold[0]), "root_threshold"),
        numpy_helper.from_array(np.array(left[0]), "root_left"),
        numpy_helper.from_array(np.array(right[0]), "root_right"),
    ]
    if model.depth > 1:  # the node tables are read only by the steps after the root's
        tables = {"feature": feature, "threshold": threshold, "left": left, "right": right}
        inits += [numpy_helper.from_array(v, k) for k, v in tables.items()]
        inits.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"))
    nodes = [
        helper.make_node("Cast", [INPUT_NAME], ["x64"], to=TensorProto.DOUBLE),
        helper.make_node("Gather", ["x64", "root_feature"], ["root_x"], axis=1),
        helper.make_node("LessOrEqual", ["root_x", "root_threshold"], ["root_goes_left"]),
        helper.make_node("Where", ["root_goes_left", "root_left", "root_right"], ["node_1"]),
    ]
    for step in range(1, max(model.depth, 1)):
        node, s = f"node_{step}", f"s{step}_"
        nodes += [
            helper.make_node("Gather", ["feature", node], [s + "feature"], axis=0),
            helper.make_node("Unsqueeze", [s + "feature", "axis1"], [s + "column"]),
            helper.make_node("GatherElements", ["x64", s + "column"], [s + "x_column"], axis=1),
            helper.make_node("Squeeze", [s + "x_column", "axis1"], [s + "x"]),
            helper.make_node("Gather", ["threshold", node], [s + "threshold"], axis=0),
            helper.make_node("LessOrEqual", [s + "x", s + "threshold"], [s + "goes_left"]),
            helper.make_node("Gather", ["left", node], [s + "left"], axis=0),
            helper.make_node("Gather", ["right", node], [s + "right"], axis=0),
            helper.make_node("Where", [s + "goes_left", s + "left", s + "right"], [f"node_{step + 1}"]),
        ]
    nodes += [
        helper.make_node("Gather", ["value", f"node_{max(model.depth, 1)}"], ["leaf_value"], axis=0),
        helper.make_node("Cast", ["leaf_value"], [OUTPUT_NAME], to=TensorProto.FLOAT),
    ]
    return _classifier_proto(nodes, inits, "tree_p_correct", model.n_features)


def _mlp_graph(model: MLPModel):
    """The MLP (standardisation and sigmoid included) traced to ONNX with torch's TorchScript-based exporter."""
    import onnx
    import torch

    module = model.scoring_module()
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the legacy exporter: offline, no onnxscript rewrite
        torch.onnx.export(
            module,
            (torch.zeros(2, model.n_features, dtype=torch.float32),),
            buffer,
            dynamo=False,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            opset_version=OPSET,
        )
    proto = onnx.load_from_string(buffer.getvalue())
    onnx.checker.check_model(proto)
    return proto


Classifier = LogisticModel | MLPModel | KNNModel | TreeModel
"""The classifier models the workbench fits and exports."""

GRAPH_BUILDERS = {LogisticModel: _logistic_graph, MLPModel: _mlp_graph, KNNModel: _knn_graph, TreeModel: _tree_graph}
"""Model class → the function that writes its classifier graph."""


def export_onnx(model: Classifier, path: str | Path, feature_names: Sequence[str] | None = None) -> Path:
    """Write ``model`` as an ONNX graph to ``path`` (atomically) and return the path.

    ``feature_names``, when given, must equal the model's own feature names (same order): it guards against
    exporting a model for the wrong feature layout (DataError otherwise). ConfigError for an unsupported model type.
    """
    import onnx

    if feature_names is not None and tuple(feature_names) != tuple(model.feature_names):
        raise DataError(
            f"feature names {list(feature_names)} differ from the model's {list(model.feature_names)}", "feature_names"
        )
    builder = GRAPH_BUILDERS.get(type(model))
    if builder is None:
        raise ConfigError(f"cannot export a {type(model).__name__} to ONNX", "model")
    proto = builder(model)
    meta = {
        "kind": model.kind,
        "input": "calibrated",
        "feature_names": json.dumps(list(model.feature_names)),
        "contract": (
            f"{INPUT_NAME} float32 [batch, {model.n_features}] calibrated features (the calibrators' outputs, not the "
            f"raw features) -> {OUTPUT_NAME} float32 [batch]"
        ),
    }
    onnx.helper.set_model_props(proto, meta)
    return atomic_write_bytes(path, proto.SerializeToString())


def onnx_feature_names(path: str | Path) -> tuple[str, ...]:
    """The feature names recorded in an exported graph's metadata (empty if none are recorded)."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    props = {p.key: p.value for p in proto.metadata_props}
    return tuple(json.loads(props["feature_names"])) if "feature_names" in props else ()


def run_onnx(path: str | Path, X: object) -> np.ndarray:
    """P(correct) from the exported graph at ``path`` for ``X`` — calibrated features for a classifier graph, raw
    ones for a decision graph (:attr:`OnnxClassifier.input`) — as a float64 vector ``[rows]``.

    Runs onnxruntime on the CPU. DataError if ``X`` is malformed or its width differs from the graph's input.
    """
    return OnnxClassifier(path).predict_proba(X)


class OnnxClassifier:
    """An exported graph run by ONNX Runtime, with the interface of the numpy models.

    ``predict_proba(X)`` → P(correct) float64 ``[rows]``; ``feature_names`` come from the graph's metadata. ``input``
    says what ``X`` is: ``"calibrated"`` for a classifier graph (input ``calibrated_features``, or ``features`` in a
    graph written before the name said so), ``"raw"`` for a decision graph (input ``raw_features``: the calibrators
    are inside; NaN and ±inf are imputed inside too). One session is kept (single-threaded: the graphs are a few
    hundred numbers, so threads only add latency).

    The graph is checked before ONNX Runtime sees it (:mod:`workbench.classify.onnx_check`): self-contained, only the
    operators the workbench exports, static shapes linear in the batch. ``classifier_kind`` is ``logistic``,
    ``mlp``, ``knn`` or ``tree`` as its structure shows (``unknown`` otherwise), ``declared_kind`` what its ``kind``
    metadata says.
    """

    kind = "onnx"

    def __init__(self, source: str | Path | bytes, where: str | None = None) -> None:
        import onnxruntime

        if isinstance(source, bytes):
            data, where = source, where or "classifier.onnx"
        else:
            where = where or str(source)
            try:
                data = Path(source).read_bytes()
            except OSError as exc:
                raise DataError(f"cannot read the ONNX graph ({type(exc).__name__})", where) from None
        proto = parse_model(data, where)
        check_self_contained(proto, where)
        check_bounded_graph(proto, where)  # before ONNX Runtime sees it: no loop, no runaway shape
        self.classifier_kind = graph_kind(proto)  # the kind as the graph's structure shows, not its metadata
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        try:
            self.session = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types for unreadable graphs
            raise DataError(f"not a loadable ONNX graph ({type(exc).__name__})", where) from None
        self.where = where

        inputs, outputs = self.session.get_inputs(), self.session.get_outputs()
        accepted = (*CLASSIFIER_INPUTS, RAW_INPUT)
        if len(inputs) != 1 or inputs[0].name not in accepted or OUTPUT_NAME not in [o.name for o in outputs]:
            raise DataError(f"the graph must take one input (one of {list(accepted)}) and give {OUTPUT_NAME!r}", where)
        self.input_name = inputs[0].name
        self.input = "raw" if self.input_name == RAW_INPUT else "calibrated"
        self.dtype = np.float64 if inputs[0].type == "tensor(double)" else np.float32
        shape = inputs[0].shape
        if len(shape) != 2:
            raise DataError(f"the graph's input {self.input_name!r} must be [batch, features]", where)
        meta = self.session.get_modelmeta().custom_metadata_map

        names = (
            loads_strict(meta["feature_names"], f"{where}: feature_names metadata") if "feature_names" in meta else []
        )
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise DataError("the graph's feature_names metadata must be a list of names", where)
        self.feature_names = tuple(names)
        declared = meta.get("kind", "")
        self.declared_kind = declared.removeprefix("decision:")  # what the metadata says the classifier is
        width = shape[1]
        self.n_features = width if isinstance(width, int) else len(self.feature_names) or None

    def predict_proba(self, X: object) -> np.ndarray:
        """P(correct) for the rows ``X`` (calibrated features, or raw ones for a decision graph: see :attr:`input`;
        only a decision graph takes NaN / ±inf); DataError on a malformed matrix or the wrong width."""
        if self.input == "raw":
            arr = as_raw_features(X, self.n_features)
        else:
            arr = as_features(X, n_features=self.n_features)
        try:
            (out,) = self.session.run([OUTPUT_NAME], {self.input_name: arr.astype(self.dtype)})
        except Exception as exc:  # a graph that loads but cannot run on its declared input
            raise DataError(f"the ONNX graph failed to run ({type(exc).__name__})", self.where) from None
        out = np.asarray(out, dtype=np.float64).reshape(-1)
        if out.shape != (arr.shape[0],):
            raise DataError(f"the ONNX graph gave the wrong number of values for {arr.shape[0]} rows", self.where)
        return out


def as_raw_features(X: object, n_features: int | None) -> np.ndarray:
    """``X`` as float64 ``[rows, features]`` for a decision graph: like :func:`as_features`, but NaN and ±inf pass
    (the graph imputes them)."""
    try:
        arr = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"features are not numeric ({exc})", "X") from None
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise DataError(f"features must be a non-empty 2-D array [rows, features], got shape {arr.shape}", "X")
    if n_features is not None and arr.shape[1] != n_features:
        raise DataError(f"expected {n_features} features per row, got {arr.shape[1]}", "X")
    return arr
