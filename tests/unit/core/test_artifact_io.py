"""The learned-artifact protocol: one JSON document (+ safetensors for tensors), a fixed kind table, no code."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.calibration import make_calibrator
from workbench.calibration.calibrator_set import CalibratorSet
from workbench.classify.logistic import LogisticModel
from workbench.core.artifact_io import read_artifact, write_artifact
from workbench.core.errors import DataError
from workbench.methods.learned import learned_from_dict, load_learned, save_learned
from workbench.methods.learned_kinds import LEARNED_KINDS
from workbench.methods.seper.utility import UtilityPredictor


def _calibrator_set() -> CalibratorSet:
    rng = np.random.default_rng(0)
    scores = rng.normal(size=60)
    labels = (scores + rng.normal(scale=0.5, size=60) > 0).astype(float)
    cal = make_calibrator("isotonic").fit(scores, labels)
    return CalibratorSet(("confidence",), {"confidence": cal}, {"confidence": 0.25})


def test_every_artifact_round_trips_byte_identically(tmp_path):
    rng = np.random.default_rng(1)
    artifacts = [
        _calibrator_set(),
        LogisticModel(np.zeros(2), np.ones(2), np.array([0.5, -1.0]), 0.1, ("a", "b")),
        UtilityPredictor(1.0, ("x", "y")).fit(rng.normal(size=(10, 2)), rng.normal(size=10) / 10),
    ]
    for i, obj in enumerate(artifacts):
        first = save_learned(obj, tmp_path / f"a{i}.json")
        again = save_learned(load_learned(first[-1]), tmp_path / f"b{i}.json")
        assert first[-1].read_bytes() == again[-1].read_bytes()
        assert json.loads(first[-1].read_text())["kind"] in LEARNED_KINDS


def test_unknown_or_unexpected_kinds_are_refused(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"kind": "os.system", "version": 1}))
    with pytest.raises(DataError, match=r"unknown learned-artifact kind 'os\.system'"):
        load_learned(tmp_path / "x.json")
    save_learned(_calibrator_set(), tmp_path / "cal.json")
    with pytest.raises(DataError, match="expected a logistic"):
        load_learned(tmp_path / "cal.json", expect={"logistic"})
    with pytest.raises(DataError, match="version"):
        learned_from_dict({"kind": "calibrator_set", "version": "1"})


def test_a_malformed_artifact_names_its_file(tmp_path):
    save_learned(_calibrator_set(), tmp_path / "cal.json")
    data = json.loads((tmp_path / "cal.json").read_text())
    data["medians"] = {"confidence": "NaN"}
    (tmp_path / "cal.json").write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"cal\.json.*median"):
        load_learned(tmp_path / "cal.json")
    (tmp_path / "cal.json").write_text("{not json")
    with pytest.raises(DataError, match=r"cal\.json: not valid JSON"):
        load_learned(tmp_path / "cal.json")


def test_tensors_go_to_safetensors_and_are_hash_checked(tmp_path):
    weights = {"lora_A": np.arange(6, dtype=np.float32).reshape(2, 3)}
    written = write_artifact(tmp_path / "adapter.json", {"kind": "lora_adapter", "version": 1, "r": 2}, weights)
    assert [p.name for p in written] == ["adapter.safetensors", "adapter.json"]
    payload, tensors = read_artifact(tmp_path / "adapter.json")
    assert payload == {"kind": "lora_adapter", "version": 1, "r": 2}
    np.testing.assert_array_equal(tensors["lora_A"], weights["lora_A"])
    blob = bytearray((tmp_path / "adapter.safetensors").read_bytes())
    blob[-1] ^= 0xFF
    (tmp_path / "adapter.safetensors").write_bytes(bytes(blob))
    with pytest.raises(DataError, match="sha256"):
        read_artifact(tmp_path / "adapter.json")
    doc = json.loads((tmp_path / "adapter.json").read_text())
    doc["tensors"]["file"] = "../elsewhere.safetensors"
    (tmp_path / "adapter.json").write_text(json.dumps(doc))
    with pytest.raises(DataError, match="next to the JSON"):
        read_artifact(tmp_path / "adapter.json")


def test_envelope_is_required(tmp_path):
    with pytest.raises(DataError, match="kind"):
        write_artifact(tmp_path / "x.json", {"version": 1})
    (tmp_path / "y.json").write_text(json.dumps([1, 2]))
    with pytest.raises(DataError, match="JSON object"):
        read_artifact(tmp_path / "y.json")
