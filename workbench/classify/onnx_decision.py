"""The whole retrieval decision as one ONNX graph: raw features → imputation → calibrators → classifier → P(correct).

A classifier graph (:func:`~workbench.classify.onnx_export.export_onnx`) reads *calibrated* features. The graph built
here puts the :class:`~workbench.calibration.calibrator_set.CalibratorSet` in front of it, so the file alone turns
what the collect stage records into the decision:

* input ``raw_features`` float64 ``[batch, n_features]``: the raw oriented features (higher = more certain) in the
  decision's feature order (the ``feature_names`` metadata), NaN and ±inf allowed;
* imputation as :meth:`CalibratorSet.clean` does it: NaN → the fit split's median, ±inf → the end of its finite range
  (IsNaN, IsInf, Where);
* each feature's calibrator, in float64: isotonic and centered isotonic — ``np.interp`` over the breakpoints, written
  as ``y₀ + Σ_k slope_k · (clip(x, x_k, x_{k+1}) − x_k)`` (Max, Min, Mul, ReduceSum); Platt — ``σ(a·x + b)`` as
  ``(1 + tanh((a·x + b) / 2)) / 2``; beta — ``σ(a·ln s' − b·ln(1 − s') + c)`` from the log-odds ``z`` of ``s'``
  (``(x − m) / d`` for a squashed feature, ``ln s − ln(1 − s)`` of the clipped score otherwise), with
  ``ln s' = −softplus(−z)`` and ``−ln(1 − s') = softplus(z)``, ``softplus(z) = max(z, 0) + ln(1 + e^{−|z|})`` (Max,
  Neg, Exp, Log; no Relu, which marks an MLP's hidden layer), as :mod:`workbench.calibration.beta` computes them;
  ``raw`` — the value itself;
* the classifier graph (standardisation inside) on the calibrated values cast to float32 → ``p_correct`` float32
  ``[batch]``; with a τ, also ``retrieve`` bool ``[batch]`` = ``p_correct < τ`` (compared in float64).

ONNX Runtime on this graph agrees with the numpy path (:meth:`~workbench.classify.policy.DecisionPolicy.p_correct`)
to the classifier graph's float32 precision (≤ 1e-5). Standard ONNX operators only (opset 17); no custom op, no
external data. The graph's metadata records the contract, the feature names, the calibrator kinds and τ.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from workbench.calibration.beta import EPS as BETA_EPS
from workbench.calibration.beta import BetaCalibrator
from workbench.calibration.calibrator_set import CalibratorSet, impute_value
from workbench.calibration.isotonic import IsotonicCalibrator
from workbench.calibration.platt import PlattCalibrator
from workbench.calibration.raw import RawCalibrator
from workbench.classify.onnx_export import CLASSIFIER_INPUTS, OUTPUT_NAME, RAW_INPUT
from workbench.core.atomic import atomic_write_bytes
from workbench.core.errors import ConfigError, DataError

__all__ = [
    "RAW_INPUT",
    "RETRIEVE_OUTPUT",
    "calibration_graph",
    "decision_contract",
    "decision_graph",
    "export_decision_onnx",
]

RETRIEVE_OUTPUT = "retrieve"
"""The decision graph's second output when built with a τ: ``p_correct < τ``."""
PREFIX = "decision/"
"""Prefix of every tensor the calibration part adds, so it never collides with the classifier graph's names."""


def decision_contract(n_features: int, tau: float | None) -> str:
    """The one-line contract recorded in the decision graph's ``contract`` metadata."""
    out = f"{RAW_INPUT} float64 [batch, {n_features}] raw oriented features (NaN / ±inf imputed inside) -> "
    out += "calibrators -> classifier -> p_correct float32 [batch]"
    if tau is not None:
        out += f"; {RETRIEVE_OUTPUT} bool [batch] = p_correct < tau ({tau!r})"
    return out


def _calibrator_tables(calibrators: CalibratorSet) -> dict[str, np.ndarray]:
    """Per-feature constants of the calibration part: fill values for NaN / +inf / −inf, the kind masks, the padded
    isotonic segments (low, high, slope; padding: zero-width, zero slope) with their start values, Platt's a and b,
    and beta calibration's a, b, c with its squash (``is_squashed``, centre, scale; 0 and 1 where unused)."""
    features = calibrators.features
    n = len(features)
    segments: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    out = {
        "nan_fill": np.zeros(n),
        "pos_fill": np.zeros(n),
        "neg_fill": np.zeros(n),
        "is_isotonic": np.zeros(n, dtype=bool),
        "is_beta": np.zeros(n, dtype=bool),
        "is_sigmoid": np.zeros(n, dtype=bool),
        "is_squashed": np.zeros(n, dtype=bool),
        "y0": np.zeros(n),
        "a": np.zeros(n),
        "b": np.zeros(n),
        "beta_a": np.zeros(n),
        "beta_b": np.zeros(n),
        "beta_c": np.zeros(n),
        "centre": np.zeros(n),
        "scale": np.ones(n),
    }
    for j, name in enumerate(features):
        median, value_range = calibrators.medians.get(name, math.nan), calibrators.ranges.get(name)
        out["nan_fill"][j] = impute_value(math.nan, median, value_range)
        out["pos_fill"][j] = impute_value(math.inf, median, value_range)
        out["neg_fill"][j] = impute_value(-math.inf, median, value_range)
        calibrator = calibrators.calibrators[name]
        empty = np.zeros(0)
        if isinstance(calibrator, IsotonicCalibrator):
            x, y = np.asarray(calibrator.x_, dtype=float), np.asarray(calibrator.y_, dtype=float)
            out["is_isotonic"][j] = True
            out["y0"][j] = y[0]
            slope = (y[1:] - y[:-1]) / (x[1:] - x[:-1])  # np.interp's slope; x strictly increases (from_dict checks)
            segments.append((x[:-1], x[1:], slope))
        elif isinstance(calibrator, PlattCalibrator):
            out["is_sigmoid"][j] = True
            out["a"][j], out["b"][j] = float(calibrator.a_), float(calibrator.b_)
            segments.append((empty, empty, empty))
        elif isinstance(calibrator, BetaCalibrator):
            out["is_beta"][j] = out["is_sigmoid"][j] = True
            out["beta_a"][j], out["beta_b"][j], out["beta_c"][j] = calibrator.a_, calibrator.b_, calibrator.c_
            if calibrator.squash_ is not None:
                out["is_squashed"][j] = True
                out["centre"][j], out["scale"][j] = calibrator.squash_
            segments.append((empty, empty, empty))
        elif isinstance(calibrator, RawCalibrator):
            segments.append((empty, empty, empty))
        else:
            raise ConfigError(f"no ONNX form for a {type(calibrator).__name__} calibrator", f"calibrators.{name}")
    width = max(1, max(lo.size for lo, _, _ in segments))
    low, high, slope = np.zeros((n, width)), np.zeros((n, width)), np.zeros((n, width))
    for j, (lo, hi, sl) in enumerate(segments):
        low[j, : lo.size], high[j, : hi.size], slope[j, : sl.size] = lo, hi, sl
    out.update(low=low, high=high, slope=slope)
    return out


def calibration_graph(calibrators: CalibratorSet, output: str, ir_version: int, opset: int) -> Any:
    """An ONNX ModelProto: ``raw_features`` float64 ``[batch, n]`` → ``output`` float32 ``[batch, n]``, the calibrated
    features (imputation and every feature's calibrator; see the module docstring). ConfigError for a calibrator
    kind with no ONNX form."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    n = len(calibrators.features)
    tables = _calibrator_tables(calibrators)

    def name(s: str) -> str:
        return PREFIX + s

    inits = [numpy_helper.from_array(np.asarray(v), name(k)) for k, v in tables.items()]
    inits += [
        numpy_helper.from_array(np.array([2], dtype=np.int64), name("axis2")),
        numpy_helper.from_array(np.array(0.5), name("half")),
        numpy_helper.from_array(np.array(1.0), name("one")),
        numpy_helper.from_array(np.array(0.0), name("zero")),
        numpy_helper.from_array(np.array(BETA_EPS), name("eps")),
        numpy_helper.from_array(np.array(1.0 - BETA_EPS), name("one_minus_eps")),
    ]
    nodes = [
        helper.make_node("IsNaN", [RAW_INPUT], [name("isnan")]),
        helper.make_node("Where", [name("isnan"), name("nan_fill"), RAW_INPUT], [name("x_nan")]),
        helper.make_node("IsInf", [name("x_nan")], [name("ispos")], detect_negative=0),
        helper.make_node("Where", [name("ispos"), name("pos_fill"), name("x_nan")], [name("x_pos")]),
        helper.make_node("IsInf", [name("x_pos")], [name("isneg")], detect_positive=0),
        helper.make_node("Where", [name("isneg"), name("neg_fill"), name("x_pos")], [name("x")]),
        # isotonic: y0 + Σ_k slope_k · (clip(x, low_k, high_k) − low_k), broadcast [batch, n, 1] against [n, K]
        helper.make_node("Unsqueeze", [name("x"), name("axis2")], [name("x3")]),
        helper.make_node("Max", [name("x3"), name("low")], [name("above")]),
        helper.make_node("Min", [name("above"), name("high")], [name("clipped")]),
        helper.make_node("Sub", [name("clipped"), name("low")], [name("run")]),
        helper.make_node("Mul", [name("run"), name("slope")], [name("rise")]),
        helper.make_node("ReduceSum", [name("rise"), name("axis2")], [name("risen")], keepdims=0),
        helper.make_node("Add", [name("risen"), name("y0")], [name("isotonic")]),
        # Platt's logit a·x + b
        helper.make_node("Mul", [name("x"), name("a")], [name("ax")]),
        helper.make_node("Add", [name("ax"), name("b")], [name("platt_logit")]),
        # beta: z = (x − centre) / scale when squashed, else ln s − ln(1 − s) of s = clip(x, eps, 1 − eps)
        helper.make_node("Sub", [name("x"), name("centre")], [name("shifted")]),
        helper.make_node("Div", [name("shifted"), name("scale")], [name("z_squashed")]),
        helper.make_node("Max", [name("x"), name("eps")], [name("s_low")]),
        helper.make_node("Min", [name("s_low"), name("one_minus_eps")], [name("s")]),
        helper.make_node("Log", [name("s")], [name("log_s")]),
        helper.make_node("Sub", [name("one"), name("s")], [name("one_minus_s")]),
        helper.make_node("Log", [name("one_minus_s")], [name("log_1_s")]),
        helper.make_node("Sub", [name("log_s"), name("log_1_s")], [name("z_unit")]),
        helper.make_node("Where", [name("is_squashed"), name("z_squashed"), name("z_unit")], [name("z")]),
        # softplus(±z) = max(±z, 0) + ln(1 + e^{−|z|}): ln s' = −softplus(−z), −ln(1 − s') = softplus(z)
        # (Max with 0, not Relu: a Relu is how a graph shows an MLP's hidden layer, onnx_check.graph_kind)
        helper.make_node("Max", [name("z"), name("zero")], [name("z_pos")]),
        helper.make_node("Neg", [name("z")], [name("neg_z")]),
        helper.make_node("Max", [name("neg_z"), name("zero")], [name("z_neg")]),
        helper.make_node("Add", [name("z_pos"), name("z_neg")], [name("abs_z")]),
        helper.make_node("Neg", [name("abs_z")], [name("neg_abs_z")]),
        helper.make_node("Exp", [name("neg_abs_z")], [name("exp_neg")]),
        helper.make_node("Add", [name("exp_neg"), name("one")], [name("exp_neg_1")]),
        helper.make_node("Log", [name("exp_neg_1")], [name("log_tail")]),
        helper.make_node("Add", [name("z_pos"), name("log_tail")], [name("softplus_z")]),
        helper.make_node("Add", [name("z_neg"), name("log_tail")], [name("softplus_neg_z")]),
        helper.make_node("Mul", [name("softplus_z"), name("beta_b")], [name("b_term")]),
        helper.make_node("Mul", [name("softplus_neg_z"), name("beta_a")], [name("a_term")]),
        helper.make_node("Sub", [name("b_term"), name("a_term")], [name("ab_terms")]),
        helper.make_node("Add", [name("ab_terms"), name("beta_c")], [name("beta_logit")]),
        # σ(logit) = (1 + tanh(logit / 2)) / 2, as the numpy sigmoid computes it
        helper.make_node("Where", [name("is_beta"), name("beta_logit"), name("platt_logit")], [name("logit")]),
        helper.make_node("Mul", [name("logit"), name("half")], [name("half_logit")]),
        helper.make_node("Tanh", [name("half_logit")], [name("tanh")]),
        helper.make_node("Add", [name("tanh"), name("one")], [name("tanh_1")]),
        helper.make_node("Mul", [name("tanh_1"), name("half")], [name("sigmoid")]),
        # per column: isotonic, else Platt or beta, else the raw value
        helper.make_node("Where", [name("is_sigmoid"), name("sigmoid"), name("x")], [name("sigmoid_or_raw")]),
        helper.make_node("Where", [name("is_isotonic"), name("isotonic"), name("sigmoid_or_raw")], [name("u")]),
        helper.make_node("Cast", [name("u")], [output], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "calibrate",
        [helper.make_tensor_value_info(RAW_INPUT, TensorProto.DOUBLE, ["batch", n])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["batch", n])],
        initializer=inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="workbench")
    proto.ir_version = ir_version
    onnx.checker.check_model(proto)
    return proto


def decision_graph(calibrators: CalibratorSet, classifier: bytes | Any, tau: float | None = None) -> Any:
    """The decision graph (module docstring) from ``calibrators`` and a classifier graph (its bytes or ModelProto:
    one input ``features`` or ``calibrated_features``, output ``p_correct``); with ``tau``, also the ``retrieve``
    output. The classifier's ``feature_names`` metadata, when present, must equal the calibrators' features
    (DataError otherwise). Metadata: ``kind`` (``decision:<classifier kind>``), ``feature_names``, ``contract``,
    ``calibrators`` (feature → kind), ``input`` (``raw``) and ``tau``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    proto = onnx.load_from_string(classifier) if isinstance(classifier, bytes) else classifier
    props = {p.key: p.value for p in proto.metadata_props}
    names = json.loads(props["feature_names"]) if "feature_names" in props else list(calibrators.features)
    if tuple(names) != tuple(calibrators.features):
        raise DataError(
            f"the classifier graph reads {names}, the calibrators give {list(calibrators.features)}", "decision graph"
        )
    inputs = [i.name for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}]
    if len(inputs) != 1 or inputs[0] not in CLASSIFIER_INPUTS:
        raise DataError(f"not a classifier graph: inputs {inputs}", "decision graph")
    opset = max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    front = calibration_graph(calibrators, PREFIX + "calibrated", proto.ir_version, opset)
    merged = onnx.compose.merge_models(front, proto, io_map=[(PREFIX + "calibrated", inputs[0])])
    if tau is not None:
        merged.graph.initializer.append(numpy_helper.from_array(np.array(float(tau)), PREFIX + "tau"))
        merged.graph.node.extend(
            [
                helper.make_node("Cast", [OUTPUT_NAME], [PREFIX + "p64"], to=TensorProto.DOUBLE),
                helper.make_node("Less", [PREFIX + "p64", PREFIX + "tau"], [RETRIEVE_OUTPUT]),
            ]
        )
        merged.graph.output.append(helper.make_tensor_value_info(RETRIEVE_OUTPUT, TensorProto.BOOL, ["batch"]))
    del merged.metadata_props[:]
    meta = {
        "kind": f"decision:{props.get('kind', 'classifier')}",
        "input": "raw",
        "feature_names": json.dumps(list(calibrators.features)),
        "calibrators": json.dumps({f: calibrators.calibrators[f].kind for f in calibrators.features}),
        "contract": decision_contract(len(calibrators.features), tau),
        **({"tau": repr(float(tau))} if tau is not None else {}),
    }
    onnx.helper.set_model_props(merged, meta)
    onnx.checker.check_model(merged)
    return merged


def export_decision_onnx(
    calibrators: Any, classifier: str | Path | bytes, path: str | Path, tau: float | None = None
) -> Path:
    """Write the decision graph — raw features → imputation → ``calibrators`` → the classifier graph ``classifier``
    (a path or bytes of an :func:`~workbench.classify.onnx_export.export_onnx` graph) → ``p_correct`` (and
    ``retrieve`` = p < ``tau`` with a τ) — to ``path`` atomically and return the path (:func:`decision_graph`)."""

    data = classifier if isinstance(classifier, bytes) else Path(classifier).read_bytes()
    proto = decision_graph(calibrators, data, tau)
    return atomic_write_bytes(path, proto.SerializeToString())
