"""bench-features' attention-memory part: the peak resident memory of a prefill under the attention recorder
(:mod:`workbench.backends.attention_diag`), before and after it read only the rows the feature reads.

Each measurement runs in a fresh process (``python -m workbench.bench.features.attention_memory SPEC``, one JSON line
out), so no way inherits another's heap: a random-weight Llama of the section's shape (float32, SDPA attention) is
built, a prefill of ``batch`` × ``context`` random tokens runs once (the KV cache kept and the logits of the last
position only, as the generator's prefill does), and the process's peak RSS over that forward
(:class:`~workbench.core.memory.PeakMemory`, its own peak where Linux allows) is compared with its RSS just before.
The ways (:data:`WAYS`):

* ``none`` — no recorder: what the forward itself takes;
* ``after`` — the recorder as the generator opens it while decoding (``queries=1``: a step feeds one token per row;
  the prefill's prompt rows are never read), scoring in blocks (:func:`~workbench.backends.attention_diag.
  own_key_logprobs`);
* ``before`` — the recorder computing what it computed before it read in blocks: every query's float32 scores
  against every key at once (:func:`full_matrix_logprobs`, kept here only as this reference). Its extra memory is
  about :func:`full_matrix_extra_bytes`; it runs only where that fits ``before_max_gb``, else the report gives the
  analytic figure, marked as such.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import nullcontext
from typing import Any

from workbench.core.memory import PeakMemory, current_rss_bytes, return_freed_memory

WAYS = ("none", "after", "before")

SCORE_COPIES = 2
"""Float32 ``(batch, heads, L, L)`` arrays the full-matrix computation holds at once: the scores and, in turn, their
scaled copy, their masked copy and logsumexp's shifted copy (each step out of place)."""


def full_matrix_extra_bytes(batch: int, heads: int, context: int) -> int:
    """The analytic extra memory of the ``before`` way's prefill: :data:`SCORE_COPIES` float32 ``(batch, heads,
    context, context)`` arrays (the key, mask and index arrays it also makes are O(L²) bytes without the batch ×
    heads factor, or O(L), and left out)."""
    return SCORE_COPIES * 4 * batch * heads * context * context


def full_matrix_logprobs(
    query: Any, key: Any, mask: Any, *, scaling: float, groups: int, softcap: float | None = None, queries: Any = None
) -> Any:
    """The recorder's computation before it read in blocks, for the ``before`` way only: the float32 scores of every
    query against every key at once, each step out of place; the same values as
    :func:`~workbench.backends.attention_diag.own_key_logprobs` (``queries`` is ignored: every query is scored)."""
    import torch

    from workbench.backends.attention_diag import LOG_FLOOR, own_key_index, visible_keys

    keys = key.float().repeat_interleave(groups, dim=1)
    scores = torch.matmul(query.float(), keys.transpose(-1, -2)) * scaling
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    n_q, n_k = scores.shape[-2], scores.shape[-1]
    visible = visible_keys(mask, 0, n_q, n_q, n_k, scores.device)
    scores = scores.masked_fill(~visible, float("-inf"))
    own = own_key_index(visible).expand(scores.shape[0], scores.shape[1], n_q)
    picked = torch.gather(scores, -1, own.unsqueeze(-1)).squeeze(-1)
    return (picked - torch.logsumexp(scores, dim=-1)).clamp_min(LOG_FLOOR)


def measure_prefill(spec: dict[str, Any]) -> dict[str, Any]:
    """One way's prefill in this process (see the module docstring): ``spec`` holds the section's shape, ``way``,
    ``context`` and ``threads``. Returns ``base_bytes`` (RSS before the forward), ``peak_bytes``, ``seconds``,
    ``per_span`` (whether the peak is the forward's own) and ``recorded`` (the shape of what the recorder kept)."""

    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from workbench.backends.attention_diag import last_layer_logdiag

    torch.set_num_threads(int(spec["threads"]))
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=spec["vocab_size"],
        hidden_size=spec["hidden_size"],
        intermediate_size=spec["intermediate_size"],
        num_hidden_layers=spec["layers"],
        num_attention_heads=spec["heads"],
        num_key_value_heads=spec["kv_heads"],
        head_dim=spec["head_dim"],
        max_position_embeddings=spec["context"],
        tie_word_embeddings=True,
    )
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    ids = torch.randint(spec["vocab_size"], (spec["batch"], spec["context"]))
    mask = torch.ones_like(ids)
    way = spec["way"]
    if way == "none":
        recording: Any = nullcontext(None)
    else:
        score = full_matrix_logprobs if way == "before" else None
        recording = last_layer_logdiag(model, queries=1 if way == "after" else None, score=score)
    return_freed_memory()
    base = current_rss_bytes() or 0
    meter = PeakMemory()
    meter.start()
    began = time.perf_counter()
    with torch.inference_mode(), recording as recorder:
        model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1)
    seconds = time.perf_counter() - began
    peak = meter.peak_bytes()
    kept = recorder.take() if recorder is not None else []
    return {
        "base_bytes": base,
        "peak_bytes": peak,
        "seconds": seconds,
        "per_span": meter.per_span,
        "recorded": [list(array.shape) for array in kept],
    }


def measure_in_subprocess(spec: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
    """:func:`measure_prefill` in a fresh Python process; ``{"error": reason}`` when it fails (killed for memory,
    timed out, an exception)."""
    command = [sys.executable, "-m", "workbench.bench.features.attention_memory", json.dumps(spec)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout_s:g} s"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return {"error": f"exit status {done.returncode}: {last[:200]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_attention_memory(section: Any, threads: int) -> dict[str, Any]:
    """Every way at every context of ``section`` (``bench_features.attention_memory``), each in a fresh process;
    ``before`` only where :func:`full_matrix_extra_bytes` fits ``before_max_gb``. Returns the settings and, per
    context, each way's result (or ``{"skipped": reason}``) and the analytic ``before`` extra memory."""
    shape = {
        key: getattr(section, key)
        for key in (
            "batch",
            "hidden_size",
            "heads",
            "kv_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
            "layers",
        )
    }
    rows = []
    for context in section.contexts:
        analytic = full_matrix_extra_bytes(section.batch, section.heads, context)
        row: dict[str, Any] = {"context": context, "before_analytic_bytes": analytic, "ways": {}}
        for way in WAYS:
            if way == "before" and analytic > section.before_max_gb * 1e9:
                row["ways"][way] = {"skipped": f"needs about {analytic / 1e9:.1f} GB > before_max_gb"}
                continue
            row["ways"][way] = measure_in_subprocess({**shape, "way": way, "context": context, "threads": threads})
        rows.append(row)
    return {"settings": {**shape, "before_max_gb": section.before_max_gb, "threads": threads}, "contexts": rows}


if __name__ == "__main__":  # one way's measurement, for measure_in_subprocess
    print(json.dumps(measure_prefill(json.loads(sys.argv[1]))))
