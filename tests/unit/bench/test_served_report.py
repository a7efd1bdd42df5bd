"""bench-served's report states served collection against in-process in issue 46's exact form."""

from __future__ import annotations

from workbench.bench.served.report import collection_lines, report_lines


def _bench(rates: dict[str, float]) -> dict:
    row = {
        "rates": {c: {"questions_per_s": r} for c, r in rates.items()},
        "vs_in_process": rates["16"] / 2.0,
        "vs_own_lowest": rates["16"] / rates["1"],
        "capabilities": {"n": True},
        "skipped": {},
        "agreement": {"greedy_identical": 1.0},
    }
    return {
        "settings": {"concurrency": [1, 16]},
        "in_process": {"questions_per_s": 2.0, "batch_size": 8},
        "questions": 4,
        "features": [],
        "accuracy": 0.5,
        "engines": {"serve_model": row},
    }


def test_the_line_names_the_highest_concurrency_and_its_ratio_to_in_process():
    bench = _bench({"1": 0.5, "16": 1.7})
    assert [line for line in collection_lines(bench) if line] == [
        "`serve_model`: served collection at concurrency 16: 0.85x in-process"
    ]
    assert "`serve_model`: served collection at concurrency 16: 0.85x in-process" in report_lines(bench)


def test_each_serve_model_engine_states_its_goals_and_llama_cpp_its_quantised_weights():
    bench = _bench({"1": 0.5, "16": 1.7})
    base = bench["engines"]["serve_model"]
    single = {"one_prompt_per_request": {"1": {"questions_per_s": 0.4}, "16": {"questions_per_s": 1.2}}}
    streamed = {"streamed": {"1": _stream(errors=0, reconnects=3)}}
    bench["engines"] = {
        "serve_model_continuous": {**base, **single},
        "serve_model": base,
        "llama_server": {**base, **streamed},
    }
    lines = report_lines(bench)
    assert (
        "`serve_model_continuous`: single-prompt requests at concurrency 16: 0.60x the in-process batched rate "
        "(goal ≥ 0.8x: **missed**)."
    ) in lines
    goals = [line for line in lines if line.startswith("Goals for")]
    assert [g.split("`")[1] for g in goals] == ["serve_model_continuous", "serve_model"]  # not llama.cpp's
    assert "**0.85x, met**" in goals[0] and "**3.40x, met**" in goals[0]
    assert any(line.startswith("llama.cpp computes with the GGUF file's quantised") for line in lines)
    assert any(line.startswith("| llama_server | 1 |") and line.endswith("| 0 (3 resent) |") for line in lines)
    assert any(line.startswith("serve-model runs the same float32 model with the same seeds") for line in lines)
    del bench["engines"]["llama_server"]
    assert not any(line.startswith("llama.cpp computes") for line in report_lines(bench))
    bench["engines"] = {"llama_server": {**base, **streamed}}  # no serve-model engine: no word on its rounding
    assert not any(line.startswith("serve-model runs") for line in report_lines(bench))


def _stream(**counts: int) -> dict:
    times = {k: 0.1 for k in ("ttft_p50_s", "ttft_p95_s", "p50_s", "p95_s")}
    return {"concurrency": 1, "requests": 8, "tokens_per_s": 50.0, "seconds": 1.0, **times, **counts}
