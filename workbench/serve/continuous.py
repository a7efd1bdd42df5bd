"""Continuous batching for ``workbench serve-model`` (its default; ``--no-continuous`` turns it off): requests enter a
running decoding batch between its steps, and each leaves it — its answer sent — as soon as its own sequences end.

:func:`decode_joining` is :meth:`~workbench.serve.openai_engine.ModelEngine.answer_joining`'s loop. It runs the
generator's own pieces — :meth:`Generator.prefill`, :meth:`Generator.step`, the token choice and the finishing rule
— over ONE decoding state: before every step it takes the requests queued for the same decoding parameters that fit
(:meth:`~workbench.serve.scheduler.RunningBatch.more`: the scheduler's fair order and bounds), encodes their prompts
in one prefill and joins that state to the running one (:func:`~workbench.backends.decoding_state.join_states`:
rows left-padded, each keeps its own positions); rows that end (EOS, a stop string, ``max_tokens``) leave the state
at once, and a request whose rows all ended is answered there and then. The rows of a request nobody waits for any
more (its client left, its deadline passed) leave at the next step; the scheduler interrupts the batch once every
request of it is abandoned. **Streaming**: after every step, each streamed request still decoding is handed its
answer so far (:meth:`~workbench.serve.openai_engine.ModelEngine.progress`, through
:meth:`~workbench.serve.scheduler.RunningBatch.report`), and each of its works once it is answered, so its stream
sends every token's piece as soon as it is settled.

**Same answers as alone.** Each sampled row draws from its own random generator seeded from ``(seed, prompt,
sample index)`` (:mod:`workbench.backends.generator.next_token`), so its samples do not depend on the rows beside
it; greedy rows take the arg-max. A row's logits are those of its own prompt and tokens (padding is masked), equal
to an unbatched run's up to float rounding. A request without ``seed`` gets a fresh seed of its own.

Joining needs a cache :func:`~workbench.backends.decoding_state.joinable` (plain full-attention layers); with any
other cache, or with a generation cache (whose hits skip decoding), requests are answered whole, one batch at a time
(:meth:`ModelEngine.answer`'s path).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from workbench.backends.decoding_state import DecodingRow, join_states, joinable, select_rows
from workbench.backends.generation_lookup import decoding_params
from workbench.serve.openai_schema import ApiError, Sampling


@dataclass
class Entry:
    """One request of the running batch: its scheduler ``job``, its works' results (an ``Answered`` or an
    :class:`ApiError` each, None while decoding) and the rows still decoding per work."""

    job: Any
    results: list[Any]
    open_rows: dict[int, int] = field(default_factory=dict)


@dataclass
class Decoding:
    """One work's decoding: its ``prepared`` work, its generator job, its rows (one per sample; one for greedy)."""

    entry: Entry
    index: int
    prepared: Any
    job: Any
    rows: list[DecodingRow] = field(default_factory=list)
    row_ids: list[int] = field(default_factory=list)  # the rows' indices in the batch's row list


def decode_joining(engine: Any, batch: Any, admit: Callable[[list[Any]], list[Any]]) -> None:
    """Answer ``batch`` (a :class:`~workbench.serve.scheduler.RunningBatch` of jobs whose questions are works of one
    :class:`Sampling`) with ``engine``'s generator, taking more jobs between steps (see the module docstring).
    ``admit(works)`` returns per work a prepared work or its :class:`ApiError` (the engine's checks and echo reads)."""
    import torch

    gen = engine.generator
    sampling: Sampling = batch.jobs[0].questions[0].sampling
    params = decoding_params(
        max_new_tokens=max(sampling.max_tokens, 1),
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        stop=sampling.stop,
        seed=0,
        n=sampling.n,
        top_logprobs=engine.max_top_logprobs,
    )
    rows: list[DecodingRow] = []
    owners: list[Decoding] = []  # per row: its work's decoding
    active: list[int] = []  # rows of the state, in its order
    state: dict[str, Any] | None = None
    jobs = list(batch.jobs)
    with torch.inference_mode():
        while True:
            fresh = _start(engine, batch, jobs, admit, params, sampling, rows, owners)
            jobs = []
            if fresh:
                ids = [d.job.ids for d in fresh]
                new = gen.prefill(ids, params)
                row_to_job = torch.tensor([k for k, d in enumerate(fresh) for _ in d.rows], dtype=torch.long)
                if len(row_to_job) > len(fresh):
                    new = select_rows(new, row_to_job)
                gen.counter.lm_calls += len(fresh)
                gen.counter.lm_batches += 1
                state = new if state is None else join_states(state, new)
                active += [i for d in fresh for i in d.row_ids]
            if state is None:
                return
            tokens = gen._choose_tokens(rows, active, state["logits"], params)
            gen.counter.decoded_tokens += len(active)
            keep = []
            for k, r in enumerate(active):
                row = rows[r]
                if owners[r].entry.job.abandoned:
                    continue  # nobody waits for it (client gone, deadline passed): its rows leave unanswered
                if gen.finish_row(row, tokens[k], len(row.tokens) - 1, params):
                    _row_done(engine, batch, owners[r], params)
                else:
                    keep.append(k)
            _report(engine, batch, [owners[r] for r in active], params)
            if not keep:
                state, active = None, []
            elif len(keep) < len(active):
                state = select_rows(state, torch.tensor(keep, dtype=torch.long))
                active = [active[k] for k in keep]
            if state is not None:
                state = gen.step(state, [tokens[k] for k in keep], params)
            if state is None or joinable(state):  # room for more: take what waits
                jobs = batch.more()
            if state is None and not jobs:
                return


def _start(
    engine: Any,
    batch: Any,
    jobs: list[Any],
    admit: Callable[[list[Any]], list[Any]],
    params: Any,
    sampling: Sampling,
    rows: list[DecodingRow],
    owners: list[Decoding],
) -> list[Decoding]:
    """Admit ``jobs``: check their works, answer those with nothing to decode, and make the rows of the others."""
    gen = engine.generator
    fresh: list[Decoding] = []
    for job in jobs:
        results = admit(list(job.questions))
        entry = Entry(job, [r if isinstance(r, ApiError) else None for r in results])
        for i, prepared in enumerate(results):
            if isinstance(prepared, ApiError):
                continue
            if sampling.max_tokens == 0 or prepared.gens:  # echo only, or answered by the echo pass
                entry.results[i] = engine.finished(prepared, prepared.gens)
                continue
            seed = engine.seed_for(sampling)
            key = gen._prompt_key(prepared.gen_prompt)
            (gen_job,) = gen._missing_jobs([key], 1 if params.greedy else sampling.n, params, {})
            decoding = Decoding(entry, i, prepared, gen_job)
            for j in gen_job.samples:
                rng = None if params.greedy else gen._rng(gen_job.prompt, j, seed)
                decoding.rows.append(DecodingRow(job=len(fresh), sample=j, generator=rng))
            decoding.row_ids = list(range(len(rows), len(rows) + len(decoding.rows)))
            rows.extend(decoding.rows)
            owners.extend([decoding] * len(decoding.rows))
            entry.open_rows[i] = len(decoding.rows)
            fresh.append(decoding)
        _deliver_if_done(batch, entry)
    return fresh


def _row_done(engine: Any, batch: Any, decoding: Decoding, params: Any) -> None:
    """A row of ``decoding`` ended: once all of its work's rows have, the work is answered; once all of its request's
    works are, the request is."""
    entry = decoding.entry
    entry.open_rows[decoding.index] -= 1
    if entry.open_rows[decoding.index]:
        return
    entry.results[decoding.index] = engine.finished(decoding.prepared, _generations(engine, decoding, params))
    if not any(isinstance(r, ApiError) for r in entry.results):
        batch.report(entry.job, decoding.index, entry.results[decoding.index])  # a stream sends it before the rest
    _deliver_if_done(batch, entry)


def _report(engine: Any, batch: Any, decodings: list[Decoding], params: Any) -> None:
    """Send each streamed work of this step that is still decoding its answer so far (its settled pieces:
    :meth:`~workbench.serve.openai_engine.ModelEngine.progress`), so its first tokens leave before its last is
    decoded."""
    seen: set[int] = set()
    for decoding in decodings:
        if id(decoding) in seen:  # each work once, in row order
            continue
        seen.add(id(decoding))
        entry = decoding.entry
        if not decoding.prepared.work.stream or not entry.open_rows[decoding.index] or entry.job.abandoned:
            continue
        if entry.job.progress is None or any(isinstance(r, ApiError) for r in entry.results):
            continue  # nobody reads it, or the request is refused whole (a JSON error, not a stream)
        gens = _generations(engine, decoding, params)
        still = [row.finish is None for row in decoding.rows]
        if len(still) < len(gens):  # greedy copies
            still = still * len(gens)
        batch.report(entry.job, decoding.index, engine.progress(decoding.prepared, gens, still))


def _generations(engine: Any, decoding: Decoding, params: Any) -> list[Any]:
    """A work's ``n`` generations from its rows as they stand (greedy: copies of the one row)."""
    gen = engine.generator
    gens = [gen._finalise(row, decoding.job, params) for row in decoding.rows]
    n = decoding.prepared.work.sampling.n
    if params.greedy and n > 1:  # greedy samples are copies of the one decoded
        gens = [gens[0] if j == 0 else gen_copy(gens[0], j) for j in range(n)]
    return gens


def gen_copy(generation: Any, index: int) -> Any:
    """A greedy generation as sample ``index`` (greedy samples are identical copies)."""
    return replace(generation, sample_index=index)


def _deliver_if_done(batch: Any, entry: Entry) -> None:
    if all(result is not None for result in entry.results):
        batch.deliver(entry.job, entry.results)
