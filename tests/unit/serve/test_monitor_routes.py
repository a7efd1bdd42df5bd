"""Drift monitoring in serve: ``GET /metrics`` scraped by the real Prometheus parser, ``GET /drift``, the answer log,
and ``workbench monitor`` over that log — on a live uvicorn server with the fake runtime, whose bundle files hold a
reference read through the same verified-file reader a real bundle's goes through."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.core.test_storage_refusals import cli
from tests.unit.monitoring.bundles import FIXTURE, bundle_with_reference, synthetic_reference
from tests.unit.serve.fake_runtime import FakeRuntime, serving
from workbench.bundle.files import BundleFiles
from workbench.bundle.integrity import file_table
from workbench.core.errors import DataError
from workbench.monitoring.reference import REFERENCE_FILE
from workbench.serve import ServeLimits, create_app

LIMITS = ServeLimits(max_batch=32, max_body_bytes=65536, max_question_chars=400, max_question_tokens=400)
SECRET = "ZEBRA-QUARTZ-4471"


class MonitoredRuntime(FakeRuntime):
    """The fake runtime with a bundle's verified files holding a drift reference."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        root.joinpath("monitoring").mkdir(parents=True)
        (root / REFERENCE_FILE).write_text(json.dumps(synthetic_reference().to_dict()))
        self.root = root
        self.manifest = {"monitoring": {"file": REFERENCE_FILE}, "files": file_table(root, [REFERENCE_FILE])}
        self.files = BundleFiles(root, self.manifest)


@pytest.fixture(scope="module")
def monitored(tmp_path_factory):
    """A live server over :class:`MonitoredRuntime` writing an answer log; its URL, client and log path."""
    tmp = tmp_path_factory.mktemp("monitored")
    log = tmp / "answers.jsonl"
    app = create_app(MonitoredRuntime(tmp / "bundle"), LIMITS, answer_log=log)
    with serving(app) as url, httpx.Client(base_url=url, timeout=120) as client:
        yield client, log


def _families(text: str) -> dict:
    return {family.name: family for family in text_string_to_metric_families(text)}


def _value(families: dict, name: str, **labels: str) -> float:
    samples = [s for f in families.values() for s in f.samples if s.name == name and labels.items() <= s.labels.items()]
    assert samples, f"no sample {name} {labels}"
    return sum(s.value for s in samples)


def test_metrics_are_prometheus_text_with_requests_latency_rates_and_drift(monitored):
    client, _ = monitored
    short = [f"what is {SECRET} {i:02d}?" for i in range(10)]  # 30 characters: as the reference
    long = [f"{SECRET} " + "and a much longer question " * 3 + f"{i:03d}" for i in range(30)]  # about 110
    for batch in (short, long, ["ood question one", "ood question two"]):
        response = client.post("/answer", json={"questions": batch, "method": "d2rag"})
        assert response.status_code == 200
    assert client.post("/answer", json={"questions": ["plain"], "method": "dtr"}).status_code == 200
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"] == CONTENT_TYPE_LATEST
    text = response.text
    assert SECRET not in text and "ood question" not in text  # no question text, ever
    families = _families(text)
    assert _value(families, "workbench_requests_total", route="/answer", method="POST", status="200") == 4
    assert _value(families, "workbench_request_seconds_count", route="/answer") == 4
    assert _value(families, "workbench_answers_total") == 43
    assert (
        _value(families, "workbench_ood_flagged_total") == 2 and _value(families, "workbench_ood_checked_total") == 43
    )
    assert _value(families, "workbench_p_correct_mean") == pytest.approx(0.75)  # deciding answers only (d2rag)
    assert _value(families, "workbench_retrieval_rate") == 0.0  # 0.75 >= τ 0.4: never retrieves
    assert _value(families, "workbench_ood_rate") == pytest.approx(2 / 43)
    assert _value(families, "workbench_drift_reference") == 1.0
    assert _value(families, "workbench_window_answers", series="feature:length") == 42
    assert _value(families, "workbench_drift_alarm", series="feature:length") == 1.0  # questions got longer
    assert _value(families, "workbench_drift_psi", series="feature:length") > 0.2
    assert _value(families, "workbench_drift_psi_threshold", series="feature:length") >= 0.2
    assert _value(families, "workbench_window_answers", series="feature:entropy") == 0  # NaN: missing, not drift


def test_drift_summarises_each_series_without_question_text(monitored):
    client, _ = monitored
    client.post("/answer", json={"questions": [f"{SECRET} drift?"] * 3, "method": "d2rag"})
    response = client.get("/drift")
    assert response.status_code == 200 and SECRET not in response.text
    body = response.json()
    assert body["reference"] is True and body["window"] == 50 and body["settings"]["min_count"] == 20
    length = body["series"]["feature:length"]
    assert {"statistic", "psi", "threshold", "alarm", "count", "ks", "ks_pvalue", "status"} <= set(length)
    assert length["statistic"] == "psi" and length["alarm"] is True and body["alarm"] is True
    assert body["series"]["feature:entropy"]["status"] == "too_few" and body["series"]["feature:entropy"]["missing"]


def test_unknown_paths_and_methods_become_other_labels(monitored):
    client, _ = monitored
    assert client.get(f"/{SECRET}").status_code == 404
    assert client.request("BREW", "/metrics").status_code in (400, 405)
    text = client.get("/metrics").text
    assert SECRET not in text and "BREW" not in text
    assert _value(_families(text), "workbench_requests_total", route="other", status="404") >= 1


def test_the_answer_log_holds_numbers_only_and_monitor_reads_it(monitored, tmp_path, monkeypatch, capsys):
    client, log = monitored
    client.post("/answer", json={"question": f"{SECRET} logged?", "method": "d2rag"})
    text = log.read_text()
    assert SECRET not in text and "ood question" not in text
    records = [json.loads(line) for line in text.splitlines()]
    deciding = [r for r in records if r["method"] == "d2rag"]
    assert deciding and all(r["p_correct"] == 0.75 and r["tau"] == 0.4 for r in deciding)
    assert all(r["features"]["entropy"] is None and r["features"]["length"] > 0 for r in deciding)
    assert {r["ood"] for r in records} == {True, False}
    # the same log, read by `workbench monitor` against a real bundle carrying a reference of those features
    bundle = bundle_with_reference(tmp_path / "bundle", ("entropy", "length"))
    out = tmp_path / "report"
    code, lines = _cli(monkeypatch, capsys, "--bundle", str(bundle), "--input", str(log), "--out", str(out))
    assert code == 0, lines
    report = json.loads((out / "drift.json").read_text())
    assert report["records"] == len(records) and report["window"] == 50 and report["alarm"] is True
    assert report["summary"]["feature:length"]["alarm_windows"] >= 1
    assert SECRET not in (out / "drift.json").read_text()


def _cli(monkeypatch, capsys, *args: str) -> tuple[int, list[str]]:
    """``workbench monitor ARGS`` through the console entry point: its exit status and stderr lines."""
    return cli(monkeypatch, capsys, "monitor", *args)


def _log(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


GOOD = {"time": 1.0, "method": "d2rag", "p_correct": 0.7, "tau": 0.4, "features": {"entropy": -1.0, "length": 30.0}}


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({**GOOD, "p_correct": "high"}, "'p_correct' must be a number or null"),
        ({**GOOD, "p_correct": 1.5}, "'p_correct' must be in [0, 1]"),
        ({**GOOD, "features": {"entropy": -1.0}}, "'features.length' is missing"),
        ({**GOOD, "features": {"entropy": -1.0, "length": "long"}}, "'features.length' must be a number or null"),
        ({k: v for k, v in GOOD.items() if k != "time"}, "'time' must be a number"),
        ({**GOOD, "ood": "yes"}, "'ood' must be true, false or null"),
    ],
)
def test_monitor_refuses_a_bad_log_in_one_line_naming_file_row_and_field(tmp_path, monkeypatch, capsys, bad, field):
    bundle = bundle_with_reference(tmp_path / "bundle", ("entropy", "length"))
    log = _log(tmp_path / "answers.jsonl", [GOOD, GOOD, bad, GOOD])
    out = tmp_path / "report"
    code, lines = _cli(monkeypatch, capsys, "--bundle", str(bundle), "--input", str(log), "--out", str(out))
    assert code == 2 and len(lines) == 1, lines
    assert str(log) in lines[0] and "row 3" in lines[0] and field in lines[0]
    assert not out.exists()  # nothing written


def test_a_bundle_without_a_reference_says_so(tmp_path, monkeypatch, capsys):
    log = _log(tmp_path / "answers.jsonl", [GOOD])
    code, lines = _cli(monkeypatch, capsys, "--bundle", str(FIXTURE), "--input", str(log), "--out", str(tmp_path / "r"))
    assert code == 2 and len(lines) == 1 and "no reference" in lines[0]
    assert not (tmp_path / "r").exists()
    app = create_app(FakeRuntime(), LIMITS)  # a runtime without a reference: /drift says so, /metrics still counts
    with serving(app) as url, httpx.Client(base_url=url, timeout=120) as client:
        client.post("/answer", json={"question": "how long?", "method": "d2rag"})
        body = client.get("/drift").json()
        families = _families(client.get("/metrics").text)
    assert body["reference"] is False and "no reference" in body["note"] and body["series"] == {}
    assert _value(families, "workbench_drift_reference") == 0.0 and _value(families, "workbench_answers_total") == 1


def test_a_tampered_reference_is_refused_before_serving(tmp_path):
    runtime = MonitoredRuntime(tmp_path / "bundle")
    data = json.loads((runtime.root / REFERENCE_FILE).read_text())
    data["series"]["feature:length"]["proportions"][0] += 0.5
    (runtime.root / REFERENCE_FILE).write_text(json.dumps(data))
    with pytest.raises(DataError, match="sha256"):
        create_app(runtime, LIMITS)
    runtime.manifest["files"][REFERENCE_FILE] = {
        "sha256": hashlib.sha256((runtime.root / REFERENCE_FILE).read_bytes()).hexdigest(),
        "size": (runtime.root / REFERENCE_FILE).stat().st_size,
    }  # re-listed: the reader's own checks refuse shares that are not a distribution
    with pytest.raises(DataError, match="proportions"):
        create_app(runtime, LIMITS)
