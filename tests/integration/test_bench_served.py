"""bench-served on the tiny model (serve-model as its own process), and llama.cpp's servers where they are installed
(llama-cpp-python's; llama.cpp's own ``llama-server``, found on PATH or at ``$WORKBENCH_LLAMA_SERVER``)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil

import numpy as np
import pytest

from workbench.recipe import load_recipe
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration

HAS_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
LLAMA_SERVER = shutil.which(os.environ.get("WORKBENCH_LLAMA_SERVER", "llama-server"))


def _recipe(tmp_path, model, encoder, engines):
    path = tmp_path / "bench-served-test.yaml"
    path.write_text(
        f"""
name: bench-served-test
stages: [build_data, bench_served, report_bench_served]
run_dir: {tmp_path}/run
tracker: none
generator: {{model: {model}, batch_size: 4}}
embedder: {{model: {encoder}}}
data: {{max_per_template: 20}}
collect: {{samples: 2, max_new_tokens: 4}}
bench_served:
  questions: 3
  concurrency: [1, 2]
  top_logprobs: 20
  stream_requests: 3
  stream_max_tokens: 4
  features: [confidence, entropy, semantic_entropy, ptrue]
  engines: {engines}
report: {{dir: {tmp_path}/report}}
"""
    )
    return str(path)


def test_bench_served_compares_a_served_copy_with_the_in_process_model(tmp_path, tiny_lm_long_dir, tiny_encoder_dir):
    run_recipe(load_recipe(_recipe(tmp_path, tiny_lm_long_dir, tiny_encoder_dir, ["serve_model"])))
    bench = json.loads((tmp_path / "run" / "stages" / "bench_served" / "bench.json").read_text())
    served = bench["engines"]["serve_model"]
    assert served["capabilities"]["echo"] and served["capabilities"]["prompt_lists"]
    assert set(served["rates"]) == {"1", "2"} and bench["in_process"]["questions_per_s"] > 0
    assert set(served["one_prompt_per_request"]) == {"1", "2"}  # prompt lists: also timed one prompt per request
    assert set(served["streamed"]) == {"1", "2"} and all(
        load["errors"] == 0 and load["ttft_p50_s"] > 0 for load in served["streamed"].values()
    )
    agreement = served["agreement"]
    assert agreement["greedy_identical"] == 1.0
    for feature in ("confidence", "entropy", "semantic_entropy", "ptrue"):  # P(True): exact reads, not floored
        assert agreement[feature]["max_abs_diff"] < 1e-3, feature
    assert served["option_reads"]["absent"] == 0 and served["option_reads"]["teacher_forced"] > 0
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Agreement with the in-process values" in report and "Goals for `serve_model` at concurrency 2" in report
    assert (
        "single-prompt requests at concurrency 2: " in report and "time to first token at concurrency 1 / 2" in report
    )


@pytest.mark.skipif(not HAS_LLAMA_CPP, reason="llama-cpp-python is not installed (pip install 'workbench[llamacpp]')")
def test_llama_cpp_serves_the_embedded_gguf_and_its_probe_reports_what_it_lacks():
    from workbench.backends.factory import build_served_generator
    from workbench.bench.served.run import (
        LLAMA_CPP_NAME,
        _embedded_gguf,
        _llama_cpp_command,
        free_port,
        server_process,
    )

    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    gguf = _embedded_gguf("smollm2")
    assert gguf is not None
    with server_process(_llama_cpp_command(port, gguf, 2), f"{url}/models", what="llama.cpp"):
        generator = build_served_generator(base_url=url, model=LLAMA_CPP_NAME, tokenizer="smollm2", cache=False)
        try:
            caps = generator.capabilities
            assert caps.logprobs and caps.top_logprobs >= 20
            assert not caps.token_prompts and not caps.n and not caps.echo  # echo is off by one: refused
            answer = generator.generate(["The capital of France is"], max_new_tokens=4, stop=())[0]
            assert answer.text and len(answer.logprobs) >= 1
        finally:
            generator.close()


@pytest.mark.skipif(LLAMA_SERVER is None, reason="no llama-server binary (docs/served-models.md says how to build one)")
def test_llama_server_with_parallel_slots_collects_features_from_prompt_lists(tmp_path):
    """llama.cpp's own server with 8 slots: its probe finds log-probs (answered in the per-token form), token prompts
    and prompt lists (answered as one completion per prompt), no echo; the features collect, and concurrent
    streamed chat requests all answer."""
    from workbench.backends.factory import build_served_generator
    from workbench.bench.served.run import LLAMA_CPP_NAME, _embedded_gguf, free_port, llama_server_command
    from workbench.bench.served.streamed import stream_load
    from workbench.serve.load import server_process
    from workbench.uncertainty.calculators import compute_stats

    port, gguf = free_port(), _embedded_gguf("smollm2")
    assert gguf is not None and LLAMA_SERVER is not None
    url = f"http://127.0.0.1:{port}"
    command = llama_server_command(LLAMA_SERVER, port, gguf, threads=2, slots=8)  # newer builds: n ≤ slots
    with server_process(command, f"{url}/health", what="llama-server", log_path=tmp_path / "server.log"):
        generator = build_served_generator(
            base_url=f"{url}/v1", model=LLAMA_CPP_NAME, tokenizer="smollm2", cache=False, max_concurrency=4
        )
        try:
            caps = generator.capabilities
            assert caps.logprobs and caps.top_logprobs >= 20 and caps.token_prompts and caps.prompt_lists
            assert not caps.echo  # (n: refused by older builds, honoured by newer ones)
            rows = [{"question": q} for q in ("What is the capital of France?", "Who wrote Hamlet?", "What is 2+2?")]
            stats = compute_stats(rows, {"greedy_text", "greedy_logprobs", "sample_texts"}, generator=generator)
            for st in stats:
                assert st["greedy_text"] and np.isfinite(st["greedy_logprobs"]).all() and len(st["sample_texts"]) == 5
        finally:
            generator.close()
        load = stream_load(f"{url}/v1", LLAMA_CPP_NAME, ["Name a colour."], concurrency=4, requests=8, max_tokens=4)
        assert load["errors"] == 0 and load["ttft_p50_s"] > 0
