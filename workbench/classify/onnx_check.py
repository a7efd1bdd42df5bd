"""What an ONNX graph read from a bundle must be before ONNX Runtime is given it: self-contained and bounded.

A bundle's graph is data from whoever made the bundle, and ONNX Runtime does whatever a graph says: open files named
by external-data references, run a ``Loop`` 2^62 times, allocate a ``ConstantOfShape`` of gigabytes. The checks here
run on the parsed protobuf, before any session exists:

* :func:`check_self_contained` — no tensor anywhere keeps its data outside the file. Every message of the model is
  walked (initializers, sparse initializers' values and indices, node attributes — ``t``, ``tensors``,
  ``sparse_tensor``, ``sparse_tensors`` — subgraphs, model-local functions and the subgraphs inside them, training
  info), not a list of the places tensors are known to live today.
* :func:`check_bounded_graph` — the graph is one the workbench's exporters write: only the operators in
  :data:`ALLOWED_OPS` (the classifier graphs, the decision graph's imputation and calibrators, and τ's comparison;
  no loop, branch, scan, shape-producing or custom operator), in the default domain, no local function, no
  subgraph, no sparse tensor, at most :data:`MAX_NODES` nodes, at most :data:`MAX_CONSTANT_ELEMENTS` constant
  elements; and ONNX's own shape inference must give every value a static shape whose only free dimension is the
  batch (at most once per value) — so the work of a run grows linearly with the number of rows, at most
  :data:`MAX_ROW_ELEMENTS` elements per row over all values. The load-time parity check runs a few dozen rows, so it
  ends in milliseconds and a few megabytes whatever the graph says.
* :func:`graph_kind` — ``logistic``, ``mlp``, ``knn`` or ``tree``, read from the graph's structure (not from its
  metadata).

Refusals name the graph and what is wrong, never a value computed from the file's bytes.
"""

from __future__ import annotations

from typing import Any

from workbench.core.errors import DataError

ALLOWED_OPS = frozenset(
    {
        # the classifier graphs: standardisation, logistic (MatMul) and MLP (Gemm, Relu), the sigmoid, the squeeze
        "Sub",
        "Div",
        "MatMul",
        "Gemm",
        "Relu",
        "Add",
        "Sigmoid",
        "Squeeze",
        "Constant",
        # the decision graph: imputation, isotonic and Platt calibrators, the float32 cast, τ's comparison
        "IsNaN",
        "IsInf",
        "Where",
        "Unsqueeze",
        "Max",
        "Min",
        "Mul",
        "ReduceSum",
        "Tanh",
        "Cast",
        "Less",
        "Identity",
        # beta calibrators: the logarithms of the clipped score and the softplus of its log-odds
        "Log",
        "Exp",
        "Neg",
        # the k-NN (its k nearest reference points: k is a constant, so shape inference gives [batch, k]) and the
        # tree (its unrolled steps: gather a node's feature and threshold, compare, pick a child)
        "TopK",
        "Gather",
        "GatherElements",
        "LessOrEqual",
    }
)
"""The operators the workbench's ONNX exporters write (:mod:`workbench.classify.onnx_export`,
:mod:`workbench.classify.onnx_decision`): elementwise arithmetic, two matrix products, a reduction, static
reshapes, gathers by index and a top-k whose k shape inference must read as a constant. None of them loops, branches
or makes a shape from data (a TopK whose k is computed leaves its output's shape unknown: refused)."""

DOMAINS = ("", "ai.onnx")
"""The only operator domain allowed: the ONNX standard operators."""

MIN_OPSET = 13
"""Oldest opset accepted (Squeeze, Unsqueeze and ReduceSum take their axes as inputs from 13 on)."""

MAX_NODES = 1024
"""Most nodes in a graph (a decision graph over an MLP of three hidden layers has about 35)."""

MAX_CONSTANT_ELEMENTS = 1 << 22
"""Most elements over all initializers and ``Constant`` nodes (isotonic tables of 18 features × 10,000 breakpoints
× 3 fit in a tenth of it)."""

MAX_ROW_ELEMENTS = 1 << 22
"""Most elements per batch row over every value of the graph, as shape inference gives them (32 MiB in float64)."""

MAX_FEATURES = 4096
"""Widest input accepted: features per row."""

BATCH = "batch"
"""The symbol given to the input's first dimension for shape inference."""

_ATTRIBUTE_TYPES = ("INT", "INTS", "FLOAT", "FLOATS", "TENSOR", "STRING")
"""Attribute types a node may carry: numbers, a dense constant tensor, a string (no graph, sparse tensor or type)."""


def parse_model(data: bytes, where: str) -> Any:
    """The ``onnx.ModelProto`` in ``data``; DataError when it does not parse."""
    import onnx

    try:
        return onnx.load_from_string(data)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise DataError(f"not an ONNX graph ({type(exc).__name__})", where) from None


def _repeated(field: Any) -> bool:
    """Whether a protobuf field is repeated (``is_repeated`` in protobuf 5.x+, ``label`` before)."""
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else field.label == field.LABEL_REPEATED


def _messages(root: Any) -> Any:
    """Every protobuf message inside ``root`` (``root`` included), depth first, without recursion."""
    stack = [root]
    while stack:
        message = stack.pop()
        yield message
        for field, value in message.ListFields():
            if field.message_type is None:  # a scalar, string or enum field
                continue
            if _repeated(field):
                stack.extend(value)
            else:
                stack.append(value)


def check_self_contained(model: Any, where: str) -> None:
    """Refuse a model (a ``ModelProto`` or its bytes) that keeps any tensor outside itself: external data (a file path
    ONNX Runtime would open, relative to the working directory) or an external-location marker, wherever the tensor
    is — see the module docstring. A decision graph is a few hundred numbers; it never needs external data."""
    import onnx

    proto = parse_model(model, where) if isinstance(model, bytes) else model
    external = sum(
        1
        for message in _messages(proto)
        if isinstance(message, onnx.TensorProto)
        and (message.data_location == onnx.TensorProto.EXTERNAL or len(message.external_data) > 0)
    )
    if external:
        raise DataError(f"the ONNX graph keeps {external} tensor(s) in external data: not allowed", where)


def _elements(dims: Any, where: str, what: str) -> int:
    count = 1
    for dim in dims:
        if dim < 0:
            raise DataError(f"{what} has a negative dimension", where)
        count *= int(dim)
    return count


def _check_nodes(graph: Any, where: str) -> int:
    """Refuse a node outside the allowlist or with a forbidden attribute; the number of elements its constants hold."""
    import onnx

    if len(graph.node) > MAX_NODES:
        raise DataError(f"the ONNX graph has {len(graph.node)} nodes (limit {MAX_NODES})", where)
    allowed_types = {getattr(onnx.AttributeProto, name) for name in _ATTRIBUTE_TYPES}
    constants = 0
    for position, node in enumerate(graph.node):
        label = f"node {position}"
        if node.domain not in DOMAINS:
            raise DataError(f"{label} is a custom operator (domain {node.domain[:40]!r}): not allowed", where)
        if node.op_type not in ALLOWED_OPS:
            raise DataError(
                f"{label} is a {node.op_type[:40]!r}: not an operator the workbench exports (allowed: "
                f"{', '.join(sorted(ALLOWED_OPS))})",
                where,
            )
        for attribute in node.attribute:
            if attribute.ref_attr_name or attribute.type not in allowed_types:
                raise DataError(f"{label} ({node.op_type}) has an attribute of a kind not allowed", where)
            if attribute.type == onnx.AttributeProto.TENSOR:
                constants += _elements(attribute.t.dims, where, f"{label}'s constant")
            elif attribute.type in (onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS):
                constants += len(attribute.ints) + len(attribute.floats)
    return constants


def _static_shape(value: Any, where: str) -> int:
    """Elements per batch row of a value shape inference typed; DataError when its shape is not static or has the
    batch dimension more than once."""
    label = "the ONNX graph"
    tensor = value.type.tensor_type if value.type.HasField("tensor_type") else None
    if tensor is None or not tensor.HasField("shape"):
        raise DataError(f"{label} has a value whose shape cannot be inferred (shapes must be static)", where)
    per_row, batch = 1, 0
    for dim in tensor.shape.dim:
        if dim.HasField("dim_value") and dim.dim_value >= 0:
            per_row *= dim.dim_value
        elif dim.HasField("dim_param") and dim.dim_param == BATCH:
            batch += 1
        else:
            raise DataError(f"{label} has a value whose shape cannot be inferred (shapes must be static)", where)
    if batch > 1:
        raise DataError(f"{label} has a value that grows faster than the number of rows (a batch × batch shape)", where)
    return per_row


def _inferred(proto: Any, where: str) -> Any:
    """A copy of ``proto`` typed by ONNX shape inference from its one input alone (declared intermediate and output
    shapes dropped, the input's first dimension named :data:`BATCH`); DataError when inference fails."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    graph = copy.graph
    del graph.value_info[:]
    for output in graph.output:
        if output.type.HasField("tensor_type"):
            output.type.tensor_type.ClearField("shape")
    initializers = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    if len(inputs) != 1:
        raise DataError(f"the ONNX graph must take one input, it takes {len(inputs)}", where)
    shape = inputs[0].type.tensor_type.shape if inputs[0].type.HasField("tensor_type") else None
    width = shape.dim[1] if shape is not None and len(shape.dim) == 2 else None
    if width is None or not width.HasField("dim_value") or not 1 <= width.dim_value <= MAX_FEATURES:
        raise DataError(f"the ONNX graph's input must be [batch, features] with 1 to {MAX_FEATURES} features", where)
    shape.dim[0].Clear()
    shape.dim[0].dim_param = BATCH
    try:
        return onnx.shape_inference.infer_shapes(copy, check_type=True, strict_mode=True, data_prop=True)
    except Exception as exc:  # onnx's InferenceError / ValidationError on a malformed or inconsistent graph
        raise DataError(f"the ONNX graph's shapes cannot be inferred ({type(exc).__name__})", where) from None


def check_bounded_graph(proto: Any, where: str) -> None:
    """Refuse a ``ModelProto`` that is not a bounded graph of the workbench's operators (see the module docstring):
    one line naming ``where`` and what is wrong."""
    import onnx

    if len(proto.functions) or len(proto.training_info):
        raise DataError("the ONNX graph defines local functions or training steps: not allowed", where)
    newest = onnx.defs.onnx_opset_version()
    for opset in proto.opset_import:
        if opset.domain not in DOMAINS:
            raise DataError(f"the ONNX graph imports operator domain {opset.domain[:40]!r}: not allowed", where)
        if not MIN_OPSET <= opset.version <= newest:
            raise DataError(f"the ONNX graph's opset must be {MIN_OPSET} to {newest}", where)
    graph = proto.graph
    if len(graph.sparse_initializer):
        raise DataError("the ONNX graph holds sparse tensors: not allowed", where)
    constants = _check_nodes(graph, where)
    constants += sum(_elements(t.dims, where, "an initializer") for t in graph.initializer)
    if constants > MAX_CONSTANT_ELEMENTS:
        raise DataError(f"the ONNX graph's constants hold over {MAX_CONSTANT_ELEMENTS} elements", where)
    typed = _inferred(proto, where).graph
    values = {v.name: v for v in [*typed.input, *typed.value_info, *typed.output]}
    per_row = 0
    for node in typed.node:
        for name in node.output:
            if name not in values:
                raise DataError(
                    "the ONNX graph has a value whose shape cannot be inferred (shapes must be static)", where
                )
            per_row += _static_shape(values[name], where)
    if per_row > MAX_ROW_ELEMENTS:
        raise DataError(f"the ONNX graph computes over {MAX_ROW_ELEMENTS} elements per row", where)


def graph_kind(proto: Any) -> str:
    """``"knn"`` when the graph picks neighbours (a ``TopK``), ``"tree"`` when it walks nodes (a ``LessOrEqual``: a
    split's test), ``"mlp"`` when it has a hidden layer (a ``Relu``), ``"logistic"`` when its only product is one
    ``MatMul``, else ``"unknown"``: the classifier's kind as its structure shows it, whatever its metadata says."""
    ops = [node.op_type for node in proto.graph.node]
    if "TopK" in ops:
        return "knn"
    if "LessOrEqual" in ops:
        return "tree"
    if "Relu" in ops:
        return "mlp"
    if ops.count("MatMul") == 1 and "Gemm" not in ops:
        return "logistic"
    return "unknown"
