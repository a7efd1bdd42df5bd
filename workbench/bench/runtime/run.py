"""Stage ``bench_runtime``: what a deployed bundle costs and whether it decides as its run did.

Reads a finished run (``bench_runtime.run``, e.g. the quickstart's) and its bundle (``bench_runtime.bundle``; null:
exported from the run now, which reuses the identical version when nothing changed). Measures, each in the same run:

1. **Cold start** — ``from workbench import load_bundle; load_bundle(path)`` in a fresh interpreter (imports,
   verification of every file's sha256, parsing the learned parts; models load on the first answer, so no LM weights
   are read), the median of ``cold_starts`` processes, from the directory and from the archive. Also, once, the time
   to the first answer (models, corpus, retriever built) for the record. Goal ≤ 2 s.
2. **Import boundary** — which training libraries (lightning, optuna, deepspeed, wandb, scikit-learn,
   sentence-transformers) that fresh interpreter imported after loading and answering: goal none.
3. **Decision path** — features → calibrators → classifier → τ for one question
   (:meth:`~workbench.runtime.runtime.Runtime.decide`), numpy and ONNX Runtime, median and p95 per call over the
   evaluation split's collected features, after a warm-up. Goal ≤ 1 ms.
4. **Parity** — the runtime's P(correct) and decisions on every collected question of the run's evaluation split
   against the classify stage's (identical decisions, |ΔP| ≤ 1e-6), both backends; and end to end, the runtime's
   answers against the evaluate stage's traces for ``end_to_end_methods`` (text, retrieval, P(correct)), and the
   bundle's settings against the ones evaluate ran with (each method's options after the study and
   ``evaluate.params``; D²-RAG's τ).
5. **Serve under load** — ``workbench serve`` in its own process (its default limits and batching), ``serve_requests``
   requests at each concurrency of ``serve_concurrency`` (``serve_method`` over ``serve_questions`` test questions):
   errors and status counts, p50 / p95 latency, throughput, and how much batching across requests multiplies the
   single-answer rate; once with every request generating, once with the generation cache warm (what the server and
   the runtime cost besides the model). Then ``serve_abandoned`` clients ask at once and give up after
   ``serve_give_up_s`` seconds, and one more client asks: its latency, and how many abandoned requests the server
   dropped unanswered. Then the engine alone, in this process: ``serve_method`` over the same questions one at a
   time and 8 at a time — what batching can give on this machine, and the share of it the server passes on.
6. **Fuzzing** — the property suite ``tests/fuzz`` (a source checkout) with the Hypothesis profile ``fuzz`` in its
   own pytest process: the cases tried per property and how many were refused in one line or accepted.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from workbench.bench.harness import measure, timed
from workbench.bench.report import write_bench_report
from workbench.bench.runtime.report import BANNED, write_runtime_report
from workbench.bundle.export import export_run
from workbench.core.atomic import atomic_write_json
from workbench.core.errors import ConfigError, DataError
from workbench.core.paths import PROJECT_ROOT
from workbench.methods.registry import decision_method
from workbench.routing.cost import CostModel, RetrievalCost
from workbench.routing.search import decision_cost
from workbench.runtime import load_bundle
from workbench.stages.context import StageContext
from workbench.uncertainty.stat_costs import load_stat_costs

# Batching across requests: in-process, the engine answers this many questions in one batch against one at a
# time (the report's goal: :data:`workbench.bench.runtime.report.SERVER_SHARE_GOAL`).
ENGINE_BATCH = 8


def _python(code: str, threads: int) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; it prints one JSON line last, which is returned."""

    env = dict(os.environ)
    if threads > 0:
        env["OMP_NUM_THREADS"] = str(threads)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode != 0:
        raise DataError(f"benchmark subprocess failed: {out.stderr.strip().splitlines()[-1:]}", "bench_runtime")
    return json.loads(out.stdout.strip().splitlines()[-1])


COLD = """
import json, sys, time
began = time.perf_counter()
from workbench import load_bundle
imported = time.perf_counter()
rt = load_bundle({path!r}, {{"extract_dir": {extract!r}}})
loaded = time.perf_counter()
print(json.dumps({{"import_s": imported - began, "load_s": loaded - imported, "total_s": loaded - began,
                  "modules": sorted(m for m in {banned!r} if m in sys.modules)}}))
"""

FIRST = """
import json, sys, time
import torch
torch.set_num_threads({threads})
began = time.perf_counter()
from workbench import load_bundle
rt = load_bundle({path!r})
loaded = time.perf_counter()
rt.warm([{method!r}])
warm = time.perf_counter()
answer = rt.answer({question!r}, {method!r})
done = time.perf_counter()
for name in rt.methods:
    rt.answer({question!r}, name)
print(json.dumps({{"load_s": loaded - began, "build_s": warm - loaded, "answer_s": done - warm,
                  "all_methods": list(rt.methods),
                  "modules": sorted(m for m in {banned!r} if m in sys.modules)}}))
"""


def _cold_start(bundle: Path, archive: Path | None, section: Any, threads: int, scratch: Path) -> dict[str, Any]:
    """``section.cold_starts`` fresh processes loading the bundle from each source, in rotated order (never warmed:
    the start is what is measured; each process times itself, :data:`COLD`)."""
    out: dict[str, Any] = {}
    sources = {"directory": bundle, **({"archive": archive} if archive is not None else {})}

    def start(label: str, path: Path) -> Callable[[], dict[str, Any]]:
        count = itertools.count()

        def way() -> dict[str, Any]:
            extract = str(scratch / f"unpack-{label}-{next(count)}") if label == "archive" else None
            return _python(COLD.format(path=str(path), extract=extract, banned=BANNED), threads)

        return way

    measured = measure({label: start(label, path) for label, path in sources.items()}, section.cold_starts, warm=False)
    for label in sources:
        runs = measured.values(label)
        out[label] = {
            "runs": len(runs),
            "median_s": statistics.median(r["total_s"] for r in runs),
            "max_s": max(r["total_s"] for r in runs),
            "median_import_s": statistics.median(r["import_s"] for r in runs),
            "median_load_s": statistics.median(r["load_s"] for r in runs),
            "modules": sorted({m for r in runs for m in r["modules"]}),
        }
    return out


def _decision_path(rt_numpy: Any, rt_onnx: Any, rows: list[dict[str, float]], repeats: int) -> dict[str, Any]:
    """Per-call latency of ``decide`` (numpy and ONNX Runtime), median and p95 in milliseconds."""
    out = {}
    for label, rt in (("numpy", rt_numpy), ("onnx", rt_onnx)):
        for row in rows[:50]:  # warm-up on many rows: imports, ONNX session, caches
            rt.decide(row)
        cycle = itertools.cycle(rows)
        measured = measure({"decide": lambda rt=rt, cycle=cycle: rt.decide(next(cycle))}, repeats, warm=False)
        ms = np.asarray(measured.seconds("decide")) * 1000.0
        out[label] = {"calls": repeats, "median_ms": float(np.median(ms)), "p95_ms": float(np.percentile(ms, 95))}
    return out


def _parity(run_dir: Path, rt_numpy: Any, rt_onnx: Any) -> tuple[dict[str, Any], list[dict[str, float]]]:
    """Runtime vs classify stage on the run's evaluation split; returns the figures and the raw feature rows."""
    selection = json.loads((run_dir / "stages/classify/selection.json").read_text())
    predictions = json.loads((run_dir / "stages/classify/predictions.json").read_text())
    calibrated = json.loads((run_dir / "stages/calibrate/calibrated.json").read_text())
    split = selection["eval_split"]
    features = rt_numpy.policy.features
    raw = calibrated[split]["raw"]
    rows = [dict(zip(features, values, strict=True)) for values in zip(*(raw[f] for f in features), strict=True)]
    shipped = "Router" if selection.get("router") else ("LR" if selection["chosen"] == "logistic" else "MLP")
    expected = np.asarray(predictions[shipped], dtype=float)
    tau = rt_numpy.policy.tau
    out: dict[str, Any] = {"split": split, "questions": len(rows), "tau": tau}
    for label, rt in (("numpy", rt_numpy), ("onnx", rt_onnx)):
        p = np.asarray([rt.decide(r).p_correct for r in rows], dtype=float)
        out[label] = {
            "max_abs_diff": float(np.max(np.abs(p - expected))) if len(rows) else 0.0,
            "same_decisions": int(np.sum((p < tau) == (expected < tau))),
        }
    return out, rows


def deciding_method(methods: list[str]) -> str:
    """The method of a bundle's ``methods`` whose answers this benchmark times on the decision path: the registry's
    :func:`~workbench.methods.registry.decision_method` (the default among those that decide with the fitted
    decision policy). A ConfigError at ``bench_runtime.bundle`` when none does."""
    method = decision_method(methods)
    if method is None:
        raise ConfigError(
            f"the bundle's methods ({', '.join(methods)}) hold none that decides with the fitted decision policy",
            "bench_runtime.bundle",
        )
    return method


def measure_decision_cost(run_dir: Path, runtime: Any, questions: list[str]) -> dict[str, Any] | None:
    """What deciding costs per question with the shipped router: measured — the ``features`` step of the trace of
    the bundle's deciding method (:func:`deciding_method`) over ``questions`` (cold-cache counts: what the generation
    cache served is counted as work) — and priced from the run's per-stat costs for the shipped router's features
    against every collected feature. None when the run has no per-stat costs (collected before they existed)."""

    costs = load_stat_costs(run_dir / "stages/collect")
    if costs is None:
        return None
    selection = json.loads((run_dir / "stages/classify/selection.json").read_text())
    split = selection["eval_split"]
    collected = list(json.loads((run_dir / "stages/collect/summary.json").read_text())["features"])
    model = CostModel(costs["splits"][split]["per_question"], RetrievalCost(0.0, 0.0, 0.0, 0.0))
    shipped = list(runtime.policy.features)
    tau = float(runtime.policy.tau)
    # τ > 1 retrieves for every question: D²-RAG computes no feature (decision_cost)
    priced = {"shipped": decision_cost(model.features_cost(shipped), tau), "all": model.features_cost(collected)}
    priced["shipped"] = {key: float(priced["shipped"].get(key, 0.0)) for key in priced["all"]}
    method = deciding_method(list(runtime.methods))
    measured: dict[str, float] = {}
    for question in questions:
        steps = runtime.answer(question, method=method).trace.get("steps", [])
        cost = next((step.get("cost", {}) for step in steps if step["name"] == "features"), {})
        for key in ("lm_calls", "prefill_tokens", "decoded_tokens", "scored_tokens", "nli_pairs"):
            value = float(cost.get(key, 0.0)) + float(cost.get(f"cached_{key}", 0.0))
            measured[key] = measured.get(key, 0.0) + value / max(len(questions), 1)
    return {
        "method": method,
        "split": split,
        "tau": tau,
        "shipped_features": shipped,
        "collected_features": collected,
        "priced": priced,
        "measured_questions": len(questions),
        "measured": measured,
    }


def _end_to_end(run_dir: Path, bundle: Path, methods: list[str], threads: int) -> dict[str, Any]:
    """The runtime's answers against the evaluate stage's traces, per method (generation cache off, as there), and
    the settings it runs with against the ones evaluate ran with (its ``summary.json``: each method's options after
    the study and ``evaluate.params``, D²-RAG's τ): ``same_options`` (None when evaluate did not record them) and,
    for D²-RAG, ``same_tau`` (the τ of every traced decision is the bundle's)."""
    import datasets

    traces_dir = run_dir / "stages/evaluate/traces"
    if not traces_dir.is_dir():
        return {}
    traces = datasets.load_from_disk(str(traces_dir)).to_list()
    summary_path = run_dir / "stages/evaluate/summary.json"
    ran = (json.loads(summary_path.read_text()).get("options") or {}) if summary_path.is_file() else {}

    rt = load_bundle(bundle)
    out = {}
    for method in methods:
        rows = [r for r in traces if r["method"] == method]
        if not rows or method not in rt.methods:
            continue
        answers = rt.answer_many([r["question"] for r in rows], method)
        p_expected, taus = [], set()
        for r in rows:
            decide = [s for s in json.loads(r["trace"])["steps"] if s["name"] == "decide"]
            p_expected.append(decide[0]["detail"]["p_correct"] if decide else None)
            taus.update(float(s["detail"]["tau"]) for s in decide)
        out[method] = {
            "questions": len(rows),
            "same_text": sum(a.text == r["prediction"] for a, r in zip(answers, rows, strict=True)),
            "same_retrieval": sum(a.retrieved == r["retrieved"] for a, r in zip(answers, rows, strict=True)),
            "same_p_correct": sum(a.p_correct == p for a, p in zip(answers, p_expected, strict=True)),
            "same_options": None if method not in ran else ran[method] == rt.method_options[method],
        }
        if taus and rt.policy is not None:
            out[method]["same_tau"] = taus == {float(rt.policy.tau)}
    return out


def _serve(bundle: Path, questions: list[str], section: Any) -> dict[str, Any]:
    """The serve measurements: ``{"loads": [one row per mode and concurrency], "abandoned": run_abandoned(...)}``."""
    from workbench.serve import run_abandoned, run_load, serve_process

    bodies = [{"question": q, "method": section.serve_method} for q in questions]
    loads = []
    with serve_process(bundle) as url:
        run_load(url, bodies[:1], total=1, concurrency=1)  # warm-up: the first forward pass is not a load's cost
        for concurrency in section.serve_concurrency:
            row = run_load(url, bodies, total=section.serve_requests, concurrency=concurrency, timeout=600.0)
            loads.append({"mode": "every request generates", **row})
        # the busy request is a full batch (the runtime's default batch size), so the abandoned requests queue behind
        # a batch that outlasts their patience, as on a loaded server
        patient = {"questions": questions[:8], "method": section.serve_method}
        abandoned = run_abandoned(
            url, bodies, abandoned=section.serve_abandoned, give_up_s=section.serve_give_up_s, patient_body=patient
        )
    warm = ["--set", "generation_cache=true"]
    with serve_process(bundle, args=warm) as url:
        run_load(url, bodies, total=len(bodies), concurrency=1)  # fill the cache: one generation per question
        for concurrency in section.serve_concurrency:
            row = run_load(url, bodies, total=section.serve_requests, concurrency=concurrency, timeout=600.0)
            loads.append({"mode": "generation cache warm", **row})
    return {"loads": loads, "abandoned": abandoned}


def _engine_batching(runtime: Any, questions: list[str], method: str, batch: int = ENGINE_BATCH) -> dict[str, Any]:
    """What batching is worth to the engine itself, in this process: the same questions answered by ``method`` one at
    a time and ``batch`` at a time (generation cache off, after a warm-up answer); questions per second each way."""
    runtime.answer_many(questions[:1], method, batch_size=1)  # models built, first forward done
    sizes = {size: lambda size=size: runtime.answer_many(questions, method, batch_size=size) for size in (1, batch)}
    measured = measure({str(size): way for size, way in sizes.items()}, 1, warm=False)
    rates = {size: len(questions) / measured.median(str(size)) for size in sizes}
    return {
        "method": method,
        "questions": len(questions),
        "batch": batch,
        "one_at_a_time_qps": rates[1],
        "batched_qps": rates[batch],
        "gain": rates[batch] / rates[1],
    }


def _serve_errors(serve: dict[str, Any]) -> int:
    """Failed requests over every load, plus 1 when the request after the abandoned ones was not answered."""
    errors = sum(row["errors"] for row in serve["loads"])
    return errors + (serve["abandoned"]["next_status"] != "200")


def run(ctx: StageContext) -> dict[str, Any]:
    """Measure the bundle (see the module docstring); write ``bench.json``."""

    section = ctx.config.bench_runtime
    run_dir = Path(section.run)
    if not (run_dir / "stages/classify/selection.json").is_file():
        raise ConfigError(
            f"{run_dir} is not a finished run with a classify stage: run `workbench run quickstart` first",
            "bench_runtime.run",
        )
    if section.bundle:
        bundle, archive = Path(section.bundle), None
        if bundle.is_file():
            bundle, archive = None, bundle
    else:
        exported = export_run(run_dir, root=ctx.config.export.dir)
        bundle, archive = exported.path, exported.archive
    target = bundle if bundle is not None else archive
    threads = ctx.config.threads
    scratch = ctx.scratch_dir
    ctx.log.info("cold start: %d fresh interpreters per source", section.cold_starts)
    cold = _cold_start(bundle or archive, archive if bundle is not None else None, section, threads, scratch)
    rt_numpy = load_bundle(target, {"extract_dir": str(scratch / "unpacked")})
    rt_onnx = load_bundle(target, {"extract_dir": str(scratch / "unpacked"), "classifier": "onnx"})
    parity, rows = _parity(run_dir, rt_numpy, rt_onnx)
    decision = _decision_path(rt_numpy, rt_onnx, rows, section.decision_repeats)
    ctx.log.info("decision cost: the shipped router's features against every collected feature")
    decision_cost = measure_decision_cost(run_dir, rt_numpy, _questions(run_dir, 4))
    ctx.log.info("end to end: %s against the evaluate traces", ", ".join(section.end_to_end_methods))
    end_to_end = _end_to_end(run_dir, rt_numpy.root, list(section.end_to_end_methods), threads)
    question = _questions(run_dir, 1)[0]
    ctx.log.info("first answer in a fresh interpreter (models, corpus, retriever built)")
    method = deciding_method(list(rt_numpy.methods))
    first = _python(
        FIRST.format(path=str(rt_numpy.root), method=method, question=question, banned=BANNED, threads=threads or 1),
        threads,
    )
    first["method"] = method
    ctx.log.info(
        "serve: %d requests at concurrency %s, then %d abandoned",
        section.serve_requests,
        " / ".join(map(str, section.serve_concurrency)),
        section.serve_abandoned,
    )
    serve = _serve(rt_numpy.root, _questions(run_dir, section.serve_questions), section)
    ctx.log.info("engine: %s one at a time and %d at a time, in-process", section.serve_method, ENGINE_BATCH)
    serve["engine"] = _engine_batching(rt_numpy, _questions(run_dir, section.serve_questions), section.serve_method)
    ctx.log.info("fuzz: profile %s", section.fuzz)
    fuzz = _fuzz(section.fuzz, scratch)
    bench = {
        "bundle": {"name": rt_numpy.name, "version": rt_numpy.version, "path": str(rt_numpy.root)},
        "run": str(run_dir),
        "threads": threads,
        "cold_start": cold,
        "first_answer": first,
        "decision_path": decision,
        "decision_cost": decision_cost,
        "parity": parity,
        "end_to_end": end_to_end,
        "serve": serve,
        "fuzz": fuzz,
        "settings": {
            "cold_starts": section.cold_starts,
            "decision_repeats": section.decision_repeats,
            "serve_method": section.serve_method,
            "serve_questions": section.serve_questions,
            "serve_requests": section.serve_requests,
            "serve_concurrency": list(section.serve_concurrency),
        },
    }
    atomic_write_json(ctx.out_dir / "bench.json", bench)
    return {
        "cold_start_s": round(cold["directory"]["median_s"] if "directory" in cold else cold["archive"]["median_s"], 3),
        "decision_numpy_ms": round(decision["numpy"]["median_ms"], 4),
        "parity_max_abs_diff": max(parity["numpy"]["max_abs_diff"], parity["onnx"]["max_abs_diff"]),
        "serve_errors": _serve_errors(serve),
    }


def _fuzz(profile: str, scratch: Path) -> dict[str, Any] | None:
    """Run the fuzz suite (``tests/fuzz`` of a source checkout) with a Hypothesis ``profile`` in a fresh pytest
    process; its case counts per property, the seconds it took and whether every property held. None when off or
    when the package is not a source checkout (the suite is not installed with it)."""

    suite = PROJECT_ROOT / "tests" / "fuzz"
    if profile == "none" or not suite.is_dir():
        return None
    report = scratch / "fuzz.json"
    report.unlink(missing_ok=True)
    env = {**os.environ, "WORKBENCH_FUZZ_PROFILE": profile, "WORKBENCH_FUZZ_REPORT": str(report)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)]
    options: dict[str, Any] = {"cwd": PROJECT_ROOT, "capture_output": True, "text": True, "env": env, "timeout": 3600}
    ran = timed(lambda: subprocess.run(command, **options))
    out, seconds = ran.value, ran.seconds
    tail = (out.stdout.strip().splitlines() or [""])[-1]
    counts = json.loads(report.read_text()) if report.is_file() else {}
    return {
        "profile": profile,
        "passed": out.returncode == 0,
        "summary": tail,
        "seconds": seconds,
        "properties": counts,
    }


def _questions(run_dir: Path, n: int) -> list[str]:
    """The first ``n`` questions of the run's test split (from its build_data output)."""
    from workbench.data.dataset_store import load_saved_dataset_dict

    qa = load_saved_dataset_dict(run_dir / "stages/build_data/qa")
    split = qa["test"]
    return [str(q) for q in split.select(range(min(n, len(split))))["question"]]


def report(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` to the report directory (:func:`workbench.bench.runtime.report.write_runtime_report`)."""
    return write_bench_report(
        ctx, "bench_runtime", lambda bench, tmp: write_runtime_report(bench, tmp, name=ctx.config.name)
    )[0]
