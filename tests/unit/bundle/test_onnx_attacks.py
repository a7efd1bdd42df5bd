"""Issue 41's attacks on a bundle's ONNX graph, one test each, from a bundle directory and from its ``.tar.gz``.

* External data anywhere — in a sparse ``Constant`` (``sparse_value``, a ``sparse_tensors`` list), in a sparse
  initializer's indices, in a model-local function's body and a subgraph inside it, in a training step — made ONNX
  Runtime open a file outside the bundle; each is now refused before a session exists, and the sys.audit hook of
  conftest.py checks the file is never opened.
* A 2 KB graph with a ``Loop`` of 2^62 iterations hung the load-time parity check; a ``ConstantOfShape`` allocated
  3.1 GB. Only the operators the exporters write, with static shapes linear in the batch, are accepted now: each is
  refused in one line, in well under a second.
* ``decision.classifier`` must be what the files are.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.unit.bundle.test_bundle_attacks import _manifest, _reseal
from workbench.bundle.archive import write_archive
from workbench.classify.onnx_check import check_bounded_graph
from workbench.classify.onnx_export import OnnxClassifier
from workbench.core.errors import DataError
from workbench.runtime import load_bundle


def _install(bundle: Path, proto) -> None:
    """Put ``proto`` in the bundle as its classifier graph and reseal the manifest (a self-consistent attack)."""
    (bundle / "learned" / "classifier.onnx").write_bytes(proto.SerializeToString())
    _reseal(bundle, _manifest(bundle))


def _load(bundle: Path, tmp_path: Path, via: str):
    """Load the bundle from its directory or from a ``.tar.gz`` of it (ONNX Runtime path: the graph answers)."""
    if via == "archive":
        archive = write_archive(bundle, tmp_path / "attack.tar.gz", "tiny-1.0.0")
        return load_bundle(archive, {"extract_dir": str(tmp_path / "cache"), "classifier": "onnx"})
    return load_bundle(bundle, {"classifier": "onnx"})


def _external(name: str, location: str, dims=(2,), dtype=TensorProto.FLOAT):
    """A tensor whose data lives in ``location`` (what onnxruntime would open)."""
    tensor = TensorProto(name=name, data_type=dtype, dims=list(dims))
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(4 * int(np.prod(dims))))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def _sparse(values, indices=None):
    indices = indices if indices is not None else numpy_helper.from_array(np.array([0, 1], dtype=np.int64), "i")
    return helper.make_sparse_tensor(values, indices, [4])


def _classifier_with(bundle: Path, *extra_nodes, functions=(), sparse=(), training=None):
    """The fixture's classifier graph plus ``extra_nodes`` (outputs unused), local ``functions``, sparse initializers
    and a training step: still the classifier to ONNX Runtime."""
    proto = onnx.load(str(bundle / "learned" / "classifier.onnx"))
    proto.graph.node.extend(extra_nodes)
    proto.graph.sparse_initializer.extend(sparse)
    if functions:
        proto.functions.extend(functions)
        proto.opset_import.append(helper.make_opsetid("local", 1))
    if training is not None:
        proto.training_info.append(training)
    return proto


def _subgraph_with(tensor) -> onnx.GraphProto:
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    return helper.make_graph([helper.make_node("Identity", [tensor.name], ["y"])], "inner", [], [out], [tensor])


def _attacks(location: str) -> dict:
    """Each attack's graph: an external-data reference in a place the check once missed (or never walked)."""
    constant = _external("c", location)
    return {
        "sparse Constant (sparse_value)": lambda b: _classifier_with(
            b, helper.make_node("Constant", [], ["leak"], sparse_value=_sparse(_external("v", location)))
        ),
        "sparse_tensors attribute": lambda b: _with_sparse_list(b, location),
        "sparse initializer's indices": lambda b: _classifier_with(
            b,
            sparse=[_sparse(numpy_helper.from_array(np.ones(2, np.float32), "v"), _external("i", location, (2,), 7))],
        ),
        "function body": lambda b: _classifier_with(
            b,
            helper.make_node("Leak", [], ["leak"], domain="local"),
            functions=[
                helper.make_function(
                    "local",
                    "Leak",
                    [],
                    ["out"],
                    [helper.make_node("Constant", [], ["out"], sparse_value=_sparse(_external("v", location)))],
                    [helper.make_opsetid("", 17)],
                )
            ],
        ),
        "subgraph inside a function": lambda b: _classifier_with(
            b,
            helper.make_node("Leak", ["cond"], ["leak"], domain="local"),
            functions=[
                helper.make_function(
                    "local",
                    "Leak",
                    ["cond"],
                    ["out"],
                    [
                        helper.make_node(
                            "If",
                            ["cond"],
                            ["out"],
                            then_branch=_subgraph_with(constant),
                            else_branch=_subgraph_with(constant),
                        )
                    ],
                    [helper.make_opsetid("", 17)],
                )
            ],
        ),
        "training step": lambda b: _classifier_with(
            b, training=onnx.TrainingInfoProto(initialization=_subgraph_with(constant))
        ),
    }


def _with_sparse_list(bundle: Path, location: str):
    node = helper.make_node("Constant", [], ["leak"])
    attribute = node.attribute.add()
    attribute.name, attribute.type = "sparse_values", onnx.AttributeProto.SPARSE_TENSORS
    attribute.sparse_tensors.append(_sparse(_external("v", location)))
    return _classifier_with(bundle, node)


ATTACKS = list(_attacks("x"))


@pytest.mark.parametrize("via", ["directory", "archive"])
@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "dotdot"])
@pytest.mark.parametrize("attack", ATTACKS)
def test_external_data_anywhere_in_the_graph_is_refused_and_never_opened(
    bundle, tmp_path, secret, opened, attack, relative, via
):
    secret.write_bytes(np.arange(16, dtype=np.float32).tobytes())
    location = os.path.relpath(secret, Path.cwd()) if relative else str(secret)  # '../' relative to the cwd
    _install(bundle, _attacks(location)[attack](bundle))
    opened.clear()
    with pytest.raises(DataError, match=r"tensor\(s\) in external data: not allowed") as refused:
        _load(bundle, tmp_path, via)
    assert "\n" not in str(refused.value)
    assert not any(Path(p).name == secret.name for p in opened)


# ------------------------------------------------------------------------------------------ bounded graphs
def _graph(nodes, initializers=(), output_dtype=TensorProto.FLOAT):
    """A graph with the decision graph's input and output names around ``nodes``."""
    graph = helper.make_graph(
        nodes,
        "attack",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("p_correct", output_dtype, ["batch"])],
        initializer=list(initializers),
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    return proto


def _loop_graph():
    """A 2 KB graph whose ``Loop`` runs 2^62 times (what hung the parity check)."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["acc_in", "one"], ["acc_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, ["batch", 3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, ["batch", 3]),
        ],
        [numpy_helper.from_array(np.ones(1, np.float32), "one")],
    )
    inits = [
        numpy_helper.from_array(np.array(2**62, dtype=np.int64), "trips"),
        numpy_helper.from_array(np.array(True), "go"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axis"),
    ]
    nodes = [
        helper.make_node("Loop", ["trips", "go", "features"], ["spun"], body=body),
        helper.make_node("ReduceSum", ["spun", "axis"], ["p_correct"], keepdims=0),
    ]
    return _graph(nodes, inits)


def _constant_of_shape_graph():
    """A graph that allocates 3.2 GB (400 million float64 zeros) whatever its input."""
    inits = [numpy_helper.from_array(np.array([400_000_000], dtype=np.int64), "shape")]
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["zeros"], value=numpy_helper.from_array(np.zeros(1))),
        helper.make_node("ReduceSum", ["features"], ["p_correct"], keepdims=0),
    ]
    return _graph(nodes, inits)


def _batch_squared_graph():
    """Only allowed operators, but a [batch, batch, 3] value: quadratic in the rows the runtime sends."""
    inits = [
        numpy_helper.from_array(np.array([1], dtype=np.int64), "a1"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "a0"),
        numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "a12"),
    ]
    nodes = [
        helper.make_node("Unsqueeze", ["features", "a1"], ["rows"]),
        helper.make_node("Unsqueeze", ["features", "a0"], ["cols"]),
        helper.make_node("Add", ["rows", "cols"], ["square"]),
        helper.make_node("ReduceSum", ["square", "a12"], ["p_correct"], keepdims=0),
    ]
    return _graph(nodes, inits)


def _huge_sparse_constant_graph():
    """A dense 10^10-element tensor described by a few bytes of sparse constant."""
    values = numpy_helper.from_array(np.ones(1, np.float32), "v")
    indices = numpy_helper.from_array(np.array([0], dtype=np.int64), "i")
    nodes = [
        helper.make_node("Constant", [], ["big"], sparse_value=helper.make_sparse_tensor(values, indices, [10**10])),
        helper.make_node("ReduceSum", ["features"], ["p_correct"], keepdims=0),
    ]
    return _graph(nodes)


def _huge_initializer_graph():
    """An initializer that claims 2^23 elements (more than every real constant together)."""
    big = TensorProto(name="big", data_type=TensorProto.FLOAT, dims=[1 << 23])
    return _graph([helper.make_node("ReduceSum", ["features"], ["p_correct"], keepdims=0)], [big])


def _custom_op_graph():
    return _graph([helper.make_node("Run", ["features"], ["p_correct"], domain="com.example")])


def _unknown_shape_graph():
    """A value whose shape inference cannot know: Squeeze with axes computed at run time."""
    nodes = [
        helper.make_node("Cast", ["features"], ["as_int"], to=TensorProto.INT64),
        helper.make_node("ReduceSum", ["as_int"], ["axes"], keepdims=0),
        helper.make_node("Unsqueeze", ["features", "axes"], ["lifted"]),
        helper.make_node("ReduceSum", ["lifted"], ["p_correct"], keepdims=0),
    ]
    return _graph(nodes)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_loop_graph, r"node 0 is a 'Loop': not an operator the workbench exports"),
        (_constant_of_shape_graph, r"node 0 is a 'ConstantOfShape': not an operator the workbench exports"),
        (_batch_squared_graph, r"grows faster than the number of rows"),
        (_huge_sparse_constant_graph, r"node 0 \(Constant\) has an attribute of a kind not allowed"),
        (_huge_initializer_graph, r"constants hold over 4194304 elements"),
        (_custom_op_graph, r"node 0 is a custom operator"),
        (_unknown_shape_graph, r"shape cannot be inferred"),
    ],
    ids=["loop", "constant_of_shape", "batch_squared", "sparse_constant", "huge_initializer", "custom_op", "dynamic"],
)
@pytest.mark.parametrize("via", ["directory", "archive"])
def test_an_unbounded_graph_is_refused_in_one_line_fast(bundle, tmp_path, make, message, via):
    proto = make()
    assert len(proto.SerializeToString()) < 4096  # a few bytes of attack each
    _install(bundle, proto)
    began = time.perf_counter()
    with pytest.raises(DataError, match=message) as refused:
        _load(bundle, tmp_path, via)
    assert time.perf_counter() - began < 10.0 and "\n" not in str(refused.value)


def test_every_graph_the_exporters_write_passes_the_bound(bundle):
    """The fixture's classifier graph and a decision graph over it (the exporters' outputs) are accepted as they are,
    and a function or a subgraph — which the exporters never write — is not."""
    from workbench.calibration.calibrator_set import CalibratorSet
    from workbench.classify.onnx_decision import decision_graph

    legacy = onnx.load(str(bundle / "learned" / "classifier.onnx"))
    calibrators = CalibratorSet.from_dict(json.loads((bundle / "learned" / "calibrators.json").read_text()))
    for proto in (legacy, decision_graph(calibrators, legacy, 0.5)):
        check_bounded_graph(proto, "exported")
    with_function = _classifier_with(
        bundle,
        functions=[helper.make_function("local", "F", [], [], [], [helper.make_opsetid("", 17)])],
    )
    with pytest.raises(DataError, match="local functions or training steps: not allowed"):
        check_bounded_graph(with_function, "crafted")


# ------------------------------------------------------------------------------------------ classifier kind
def test_a_declared_classifier_kind_that_is_not_the_files_is_refused(bundle):
    manifest = _manifest(bundle)
    manifest["decision"]["classifier"] = "logistic"  # the files are an MLP
    _reseal(bundle, manifest)
    with pytest.raises(DataError, match=r"'decision\.classifier' is logistic, but decision\.files\.classifier is mlp"):
        load_bundle(bundle)


def test_an_onnx_graph_whose_structure_is_not_its_declared_kind_is_refused(bundle):
    from workbench.classify.logistic import LogisticModel
    from workbench.classify.onnx_export import export_onnx

    features = tuple(_manifest(bundle)["decision"]["features"])
    graph = bundle / "learned" / "classifier.onnx"
    export_onnx(LogisticModel(np.zeros(3), np.ones(3), np.zeros(3), 0.0, features), graph, features)
    proto = onnx.load(str(graph))
    helper.set_model_props(proto, {"kind": "mlp", "feature_names": json.dumps(list(features))})  # says mlp; is not
    _install(bundle, proto)
    assert OnnxClassifier(graph).classifier_kind == "logistic"
    with pytest.raises(
        DataError, match=r"'decision\.classifier' is mlp, but decision\.files\.classifier_onnx is logistic"
    ):
        load_bundle(bundle)
