"""The runtime benchmark report (``report_bench_runtime``): a deployed bundle's cold start, import boundary, decision
path, parity with its training run, ``workbench serve`` under load and the fuzzing record, each against its goal, as
``report.md`` (from the ``bench_runtime`` stage's ``bench.json``).

The goals are stated here; :data:`BANNED` is also the list the stage checks a runtime process against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.core.formatting import fmt

BANNED = ("lightning", "pytorch_lightning", "optuna", "deepspeed", "wandb", "sklearn", "sentence_transformers")
"""The training libraries a runtime process must not import (the import-boundary goal: none of them); the stage
checks its fresh interpreters against this list."""
COLD_START_GOAL_S = 2.0
DECISION_GOAL_MS = 1.0
PARITY_TOLERANCE = 1e-6
# Batching across requests: of the engine's own gain from answering 8 questions in one batch (in-process, against
# one at a time), the share the server passes on to 8 concurrent clients (its throughput against one client's).
SERVER_SHARE_GOAL = 0.8


def _ok(flag: bool) -> str:
    return "met" if flag else "**not met**"


def report_lines(bench: dict[str, Any], name: str) -> list[str]:
    """The Markdown report of ``bench`` (a ``bench_runtime`` ``bench.json``) for recipe ``name``: every
    measurement against its goal, then :func:`serve_lines` and :func:`fuzz_lines`."""
    b, cold, decision, parity = bench["bundle"], bench["cold_start"], bench["decision_path"], bench["parity"]
    first = bench["first_answer"]
    lines = [
        "# Runtime benchmark",
        "",
        f"Recipe `{name}` (regenerate with `workbench run {name}`). Bundle **{b['name']} {b['version']}** "
        f"(`{b['path']}`), exported from `{bench['run']}`. **{bench['threads']} torch thread(s)**; each cold start "
        "is a fresh Python interpreter. Shared, noisy machine: read the ratios and the goals, not the last digit.",
        "",
        "## Cold start of `load_bundle` (no LM weights read)",
        "",
        "| source | runs | median s | max s | of which import s | load s | goal ≤ 2 s |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for label, row in cold.items():
        lines.append(
            f"| {label} | {row['runs']} | {row['median_s']:.3f} | {row['max_s']:.3f} | {row['median_import_s']:.3f} "
            f"| {row['median_load_s']:.3f} | {_ok(row['median_s'] <= COLD_START_GOAL_S)} |"
        )
    lines += [
        "",
        f"The first answer in a fresh interpreter (for the record, not a goal): `load_bundle` {first['load_s']:.2f} s, "
        f"then building the models, corpus and retriever and D²-RAG {first['build_s']:.1f} s, then the first D²-RAG "
        f"answer {first['answer_s']:.2f} s. Every method of the bundle answered once there: "
        f"{', '.join(first['all_methods'])}.",
        "",
        "## Import boundary",
        "",
    ]
    seen = sorted({*first["modules"], *(m for row in cold.values() for m in row["modules"])})
    lines.append(
        f"Training libraries imported by a runtime process after loading and answering with every method: "
        f"{', '.join(seen) if seen else '**none**'} (checked: {', '.join(BANNED)}) — goal none: {_ok(not seen)}."
    )
    lines += [
        "",
        "## Decision path (features → calibrators → classifier → τ, one question)",
        "",
        "| classifier | calls | median ms | p95 ms | goal ≤ 1 ms |",
        "|---|---:|---:|---:|---|",
    ]
    for label, row in decision.items():
        lines.append(
            f"| {label} | {row['calls']} | {row['median_ms']:.4f} | {row['p95_ms']:.4f} "
            f"| {_ok(row['median_ms'] <= DECISION_GOAL_MS)} |"
        )
    lines += decision_cost_lines(bench.get("decision_cost"))
    lines += [
        "",
        f"## Parity with the training run ({parity['questions']} `{parity['split']}` questions, τ = "
        f"{parity['tau']:.6g})",
        "",
        "The runtime's P(correct) from the run's collected features against the `classify` stage's predictions.",
        "",
        "| classifier | identical decisions | max \\|ΔP(correct)\\| | goal: all identical, ≤ 1e-6 |",
        "|---|---:|---:|---|",
    ]
    for label in ("numpy", "onnx"):
        row = parity[label]
        ok = row["same_decisions"] == parity["questions"] and row["max_abs_diff"] <= PARITY_TOLERANCE
        lines.append(
            f"| {label} | {row['same_decisions']} / {parity['questions']} | {row['max_abs_diff']:.2e} | {_ok(ok)} |"
        )
    if bench["end_to_end"]:
        lines += [
            "",
            "End to end, the runtime's answers against the `evaluate` stage's traces (same questions; generation "
            "cache off in both):",
            "",
            "| method | questions | same answer text | same retrieval decision | same P(correct) | options as "
            "evaluated | τ as evaluated |",
            "|---|---:|---:|---:|---:|---|---|",
        ]
        from workbench.methods.registry import uses_decision_policy

        for method, row in bench["end_to_end"].items():
            p = f"{row['same_p_correct']}" if uses_decision_policy(method) else "–"
            same = row.get("same_options")
            options = "not recorded" if same is None else ("same" if same else "**differ**")
            tau = ("same" if row["same_tau"] else "**differs**") if "same_tau" in row else "–"
            lines.append(
                f"| {method} | {row['questions']} | {row['same_text']} | {row['same_retrieval']} | {p} | {options} "
                f"| {tau} |"
            )
    lines += serve_lines(bench["serve"], bench["settings"])
    lines += fuzz_lines(bench.get("fuzz"))
    return lines


def decision_cost_lines(cost: dict[str, Any] | None) -> list[str]:
    """The decision's LM cost per question: the shipped router against every collected feature."""
    if not cost:
        return []
    priced, measured = cost["priced"], cost["measured"]

    def tokens(c: dict[str, float]) -> float:
        return c.get("prefill_tokens", 0.0) + c.get("decoded_tokens", 0.0) + c.get("scored_tokens", 0.0)

    shipped, collected = cost["shipped_features"], cost["collected_features"]
    return [
        "",
        "## What deciding costs (per question)",
        "",
        f"The bundle's router reads {len(shipped)} feature(s) ({', '.join(shipped)})"
        + (" — at τ > 1 it retrieves for every question and computes none of them" if cost.get("tau", 0) > 1 else "")
        + f"; the run collected {len(collected)}. Priced from the run's per-stat costs on `{cost['split']}` (cold "
        f"cache), and measured: D²-RAG's `features` step over {cost['measured_questions']} questions through the "
        "runtime — which also makes the closed-book answer when D²-RAG's learned utility reads it, even when the "
        "decision computes no feature.",
        "",
        "| router | LM calls / q | LM tokens / q | NLI pairs / q | seconds / q |",
        "|---|---:|---:|---:|---:|",
        f"| shipped router, priced | {priced['shipped']['lm_calls']:.2f} | {tokens(priced['shipped']):.0f} "
        f"| {priced['shipped']['nli_pairs']:.1f} | {priced['shipped']['seconds']:.3f} |",
        f"| shipped router, measured | {measured.get('lm_calls', 0.0):.2f} | {tokens(measured):.0f} "
        f"| {measured.get('nli_pairs', 0.0):.1f} | – |",
        f"| all {len(collected)} collected features, priced | {priced['all']['lm_calls']:.2f} "
        f"| {tokens(priced['all']):.0f} | {priced['all']['nli_pairs']:.1f} | {priced['all']['seconds']:.3f} |",
    ]


def fuzz_lines(fuzz: dict[str, Any] | None) -> list[str]:
    """The report's fuzz section: cases tried per property, refused in one line or accepted consistently (the
    stage's ``fuzz`` record; none, no section: ``[]``)."""
    if not fuzz:
        return []
    properties = fuzz["properties"]
    total = sum(p["cases"] for p in properties.values())
    lines = [
        "",
        f"## Fuzzing (`tests/fuzz`, Hypothesis profile `{fuzz['profile']}`)",
        "",
        "Manifests, learned files, file bytes, archives, recipes, overrides and HTTP bodies mutated at random; each "
        "case must be refused with one error line or accepted consistently, never a traceback, never a file read "
        "outside the bundle's verified set or written outside the extract directory. "
        f"**{total} cases** in {fuzz['seconds']:.0f} s: {'every property held' if fuzz['passed'] else 'FAILED'} "
        f"(`{fuzz['summary']}`).",
        "",
        "| property | cases | refused (one line) | accepted |",
        "|---|---:|---:|---:|",
    ]
    for name, row in properties.items():
        lines.append(f"| {name} | {row['cases']} | {row.get('refused', 0)} | {row.get('accepted', 0)} |")
    return lines


def _engine_lines(engine: dict[str, Any] | None, gains: dict[int, float]) -> list[str]:
    """What the engine gains from batching, and the share of it the server passes on to concurrent clients."""
    if not engine:
        return []
    batch = engine["batch"]
    text = (
        f"The engine itself, in-process on the same {engine['questions']} questions: `{engine['method']}` in batches "
        f"of {batch} answers {fmt(engine['batched_qps'], 2)} questions/s against {fmt(engine['one_at_a_time_qps'], 2)} "
        f"one at a time, a {engine['gain']:.2f}× gain — what batching can give on this machine (on CPU cores the "
        "prompts' prefill is compute-bound and costs the same batched or not; on a GPU batching saves most of it)."
    )
    if batch in gains and engine["gain"] > 1.0:
        share = (gains[batch] - 1.0) / (engine["gain"] - 1.0)
        text += (
            f" At {batch} concurrent clients the server passes on {share:.0%} of that gain "
            f"({gains[batch]:.2f}× against {engine['gain']:.2f}×) — goal ≥ {SERVER_SHARE_GOAL:.0%}: "
            f"{_ok(share >= SERVER_SHARE_GOAL)}."
        )
    return ["", text]


def serve_lines(serve: dict[str, Any] | list[dict[str, Any]], settings: dict[str, Any]) -> list[str]:
    """The report's serve section: one table row per mode and concurrency, the batching gain, abandoned requests.

    ``serve`` is the stage's ``serve`` record (``loads``, ``abandoned``, ``engine``) or, from a ``bench.json`` written
    before the concurrency levels, its list of loads; ``settings`` gives ``serve_method`` and ``serve_questions``."""
    if isinstance(serve, list):  # a bench.json written before the concurrency levels: its loads alone
        serve = {"loads": serve, "abandoned": None}
    loads, abandoned = serve["loads"], serve.get("abandoned")
    lines = [
        "",
        f"## `workbench serve` under load (`{settings['serve_method']}` over {settings['serve_questions']} test "
        "questions)",
        "",
        "A separate `workbench serve` process on 127.0.0.1 with its default limits; the load generator keeps the "
        "stated number of requests in flight (closed loop). The server answers every request waiting for the same "
        "method in one batch (up to the runtime's batch size), so throughput grows with concurrency while latency "
        "includes the wait for the batch ahead.",
        "",
        "| mode | concurrency | requests | errors | statuses | p50 s | p95 s | max s | throughput req/s |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for row in loads:
        statuses = ", ".join(f"{k}: {v}" for k, v in row["status_counts"].items()) or "–"
        lines.append(
            f"| {row['mode']} | {row['concurrency']} | {row['requests']} | {row['errors']} | {statuses} "
            f"| {fmt(row['p50_s'])} | {fmt(row['p95_s'])} | {fmt(row['max_s'])} | {fmt(row['throughput_rps'], 2)} |"
        )
    generating = {row["concurrency"]: row for row in loads if row["mode"] == "every request generates"}
    single = generating.get(1)
    if single and single["throughput_rps"]:
        gains = {
            c: row["throughput_rps"] / single["throughput_rps"]
            for c, row in sorted(generating.items())
            if c > 1 and row["throughput_rps"]
        }
        if gains:
            said = ", ".join(f"{c} concurrent {gain:.1f}×" for c, gain in gains.items())
            lines += ["", f"Throughput against one request at a time (every request generating): {said}."]
            lines += _engine_lines(serve.get("engine"), gains)
    if abandoned:
        dropped = "not reported" if abandoned["dropped"] is None else f"{abandoned['dropped']}"
        alone = f" (one request alone: p50 {fmt(single['p50_s'])} s)" if single else ""
        asked = abandoned.get("patient_questions") or 1
        busy = (
            f" while the server was answering another request ({asked} question{'s' if asked > 1 else ''})"
            if abandoned.get("busy")
            else ""
        )
        lines += [
            "",
            "### Abandoned requests",
            "",
            f"{abandoned['abandoned']} clients asked at once{busy} and gave up after {abandoned['give_up_s']:g} s "
            f"({abandoned['gave_up']} disconnected unanswered); the server dropped {dropped} of them without "
            f"computing them. The next request was answered in {fmt(abandoned['next_latency_s'])} s (status "
            f"{abandoned['next_status']}){alone}: it waits at most for the batch already running when the others "
            "left.",
        ]
    return lines


def write_runtime_report(bench: dict[str, Any], out_dir: Path, *, name: str) -> Path:
    """Write ``report.md`` (:func:`report_lines`; ``name`` is the recipe that regenerates it) for the benchmark
    record ``bench`` into ``out_dir``. Returns its path."""
    (out_dir / "report.md").write_text("\n".join(report_lines(bench, name)) + "\n", encoding="utf-8")
    return out_dir / "report.md"
