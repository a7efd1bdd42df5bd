"""The one interface every adaptive-RAG method implements: ``method.answer(example) -> Answer(text, trace)``.

A method gets its heavy machinery as a :class:`Tools` bundle (generator, retriever over a corpus, NLI judge,
embedder, one shared :class:`~workbench.backends.cost.CostCounter`) and its learned parts (calibrators, classifier,
thresholds, α, controller) as plain objects in its constructor, so the evaluation stage and the runtime call the
same code. Every decision and its cost goes into the :class:`Trace`:

```python
trace = Trace("dtr")
with trace.step("closed_book", tools.counter) as step:
    answer = ...
    step["nll"] = 0.83  # anything JSON-able: features, probabilities, queries, passage ids and scores
trace.retrieved = True
return Answer(answer.text, trace)
```

:meth:`Trace.step` measures the step's wall time and the counter's change (LM calls, prefill / decoded / scored
tokens, NLI pairs, retrieval calls, and the LM calls and tokens the generation cache saved). :func:`shared_step` does
the same for a stage batched over several questions, charging each question its own cost when the stage can tell
(``split: "own"``) and an even share otherwise (``split: "even"``). ``trace.fallbacks``
counts recovered failures (an unparseable controller reply, empty retrieval results, a context cut to fit the model
window) with a note each in ``trace.notes``.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from workbench.backends.passage_table import PassageTable, passages_of
from workbench.backends.prompts import passage_line
from workbench.core.errors import ConfigError

COST_FIELDS = (
    "lm_calls",
    "prefill_tokens",
    "decoded_tokens",
    "scored_tokens",
    "nli_pairs",
    "retrieval_calls",
    "cached_lm_calls",
    "cached_prefill_tokens",
    "cached_decoded_tokens",
)
"""The counter fields a step records (see :class:`~workbench.backends.cost.CostCounter`); the ``cached_*`` ones are
what the generation cache saved, never counted in the others."""


SPLITS = ("own", "even")
"""How a step's cost was attributed to its question: ``own`` — what the question itself cost (a step of one
question, or a batched step whose stage charged each question its own prompts); ``even`` — a batched step's cost
divided evenly over its questions (:func:`shared_step`)."""


@dataclass
class Step:
    """One step of a method: its name, wall time, cost, whatever it decided or produced (``detail``) and how its cost
    was attributed (``split``, one of :data:`SPLITS`; wall time is always the question's even share of a batched
    step)."""

    name: str
    seconds: float = 0.0
    cost: dict[str, float] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)
    split: str = "own"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "name": self.name,
            "seconds": self.seconds,
            "cost": dict(self.cost),
            "detail": dict(self.detail),
            "split": self.split,
        }


@dataclass
class Trace:
    """Everything a method did for one question.

    ``retrieved``: whether any retrieved text reached the final prompt; ``passages``: the ids of the passages (or
    chunks) in that prompt, in prompt order; ``decoding``: how the final answer was decoded (``greedy`` or
    ``contrastive``); ``fallbacks`` / ``notes``: recovered failures and what they were.
    """

    method: str
    steps: list[Step] = field(default_factory=list)
    retrieved: bool = False
    passages: list[str] = field(default_factory=list)
    decoding: str = "greedy"
    fallbacks: int = 0
    notes: list[str] = field(default_factory=list)

    @contextmanager
    def step(self, name: str, counter: Any) -> Iterator[dict[str, Any]]:
        """Record a step: yields its ``detail`` dict to fill; wall time and ``counter``'s change are added on exit."""
        before = counter.snapshot()
        began = time.perf_counter()
        detail: dict[str, Any] = {}
        try:
            yield detail
        finally:
            spent = counter.since(before)
            cost = {name_: float(getattr(spent, name_)) for name_ in COST_FIELDS}
            self.steps.append(Step(name, time.perf_counter() - began, cost, detail))

    def fallback(self, note: str) -> None:
        """Count a recovered failure and keep a one-line note of it."""
        self.fallbacks += 1
        self.notes.append(note)

    def find(self, name: str) -> Step | None:
        """The first step called ``name`` (None if there is none)."""
        return next((s for s in self.steps if s.name == name), None)

    def totals(self) -> dict[str, float]:
        """Summed cost fields and ``seconds`` over all steps."""
        out = {name: 0.0 for name in (*COST_FIELDS, "seconds")}
        for s in self.steps:
            out["seconds"] += s.seconds
            for name in COST_FIELDS:
                out[name] += s.cost.get(name, 0.0)
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (steps in order, totals, flags)."""
        return {
            "method": self.method,
            "retrieved": self.retrieved,
            "passages": list(self.passages),
            "decoding": self.decoding,
            "fallbacks": self.fallbacks,
            "notes": list(self.notes),
            "totals": self.totals(),
            "steps": [s.to_dict() for s in self.steps],
        }


@contextmanager
def shared_step(
    traces: Sequence[Trace], name: str, counter: Any, own: list[dict[str, float] | None] | None = None
) -> Iterator[list[dict[str, Any]]]:
    """:meth:`Trace.step` for a stage run once for several questions (one batched call): yields one detail dict per
    trace. The stage's wall time is split evenly over ``traces`` (a batch's time has no per-question share).

    Its cost is each question's own (``split`` ``"own"``) when the stage says what each one cost — ``own``, a list
    the stage fills inside the block with one dict of :data:`COST_FIELDS` per trace (fields left out: 0; e.g.
    :func:`~workbench.backends.cost.generation_cost` of each question's generation) — and those dicts add up, field
    by field, to what the counter measured; or when the stage ran for one question or cost nothing. Otherwise (no
    ``own``, an entry left None, or sums that differ: a prompt two questions shared, a backend that does not say)
    the cost is split evenly (``split`` ``"even"``: LM calls stay whole per question only when each question sent
    its own prompts; token counts can be fractions). Own costs make a question's recorded cost independent of the
    batch it ran in."""
    before = counter.snapshot()
    began = time.perf_counter()
    details: list[dict[str, Any]] = [{} for _ in traces]
    try:
        yield details
    finally:
        if traces:
            spent = counter.since(before)
            seconds = (time.perf_counter() - began) / len(traces)
            total = {name_: float(getattr(spent, name_)) for name_ in COST_FIELDS}
            costs = _own_costs(total, own, len(traces))
            split = "own" if costs is not None else "even"
            if costs is None:
                costs = [{k: v / len(traces) for k, v in total.items()} for _ in traces]
            for trace, detail, cost in zip(traces, details, costs, strict=True):
                trace.steps.append(Step(name, seconds, cost, detail, split))


def _own_costs(
    total: dict[str, float], own: list[dict[str, float] | None] | None, n: int
) -> list[dict[str, float]] | None:
    """Each question's own cost for :func:`shared_step`, or None when it cannot be told (see there)."""
    if n == 1:
        return [dict(total)]  # one question: the whole cost is its own
    if not any(total.values()):
        return [dict.fromkeys(COST_FIELDS, 0.0) for _ in range(n)]
    if own is None or len(own) != n or any(entry is None for entry in own):
        return None
    costs = [{k: float(entry.get(k, 0.0)) for k in COST_FIELDS} for entry in own if entry is not None]
    if any(abs(sum(c[k] for c in costs) - total[k]) > 1e-9 for k in COST_FIELDS):
        return None
    return costs


@dataclass
class Answer:
    """A method's final answer text and the trace of how it got there."""

    text: str
    trace: Trace


@dataclass
class Passage:
    """A retrieved passage: corpus row ``index``, ``chunk_id``, ``doc_id``, ``title``, ``text`` and its ``score``."""

    index: int
    chunk_id: str
    doc_id: str
    title: str
    text: str
    score: float = 0.0

    def prompt_text(self, max_chars: int | None = None) -> str:
        """``"title: text"``, the text cut to ``max_chars`` at a word boundary (:func:`~workbench.backends.prompts.
        passage_line`, the format every stage and the runtime share)."""

        return passage_line(self.title, self.text, max_chars)


class Tools:
    """The machinery a method uses: ``generator``, ``retriever`` over ``corpus``, ``judge``, ``embedder``, ``counter``.

    ``corpus`` is a Dataset (or any mapping of columns) with ``chunk_id``, ``doc_id``, ``title``, ``text`` and, when
    chunked, ``index`` (the chunk's position in its document). ``passage_chars`` caps each passage in prompts.
    ``judge`` and ``embedder`` may be None for methods that do not need them.

    Heavy things derived from them — a method's chunked view of the corpus (:meth:`with_corpus`), a dense or BM25
    index over the corpus (:meth:`dense_retriever`, :meth:`bm25_retriever`) — are built once per Tools and shared by
    every method built on it (:meth:`shared`), so DTR and InSemRAG search one dense index, and the evaluation stage
    and the runtime build the same ones. When ``retriever`` is the user's engine (an
    :class:`~workbench.backends.retrieval_engines.ExternalRetriever`), those two search the engine's dense and
    lexical channels instead (:meth:`engine_channel`): nothing is indexed in this process.
    """

    def __init__(
        self,
        *,
        generator: Any,
        retriever: Any,
        corpus: Any,
        counter: Any,
        judge: Any = None,
        embedder: Any = None,
        passage_chars: int = 400,
        max_new_tokens: int = 16,
    ) -> None:

        self.generator = generator
        self.retriever = retriever
        # an external retriever's passage table: the corpus plus the passages the engine returned that it lacks
        self.corpus = passages_of(retriever, corpus)
        self.counter = counter
        self.judge = judge
        self.embedder = embedder
        self.passage_chars = passage_chars
        self.max_new_tokens = max_new_tokens
        self._columns: dict[str, list] = {}
        self._shared: dict[str, Any] = {}

    def shared(self, key: str, build: Any) -> Any:
        """The object stored under ``key``, built by ``build()`` the first time (one per Tools and its copies)."""
        if key not in self._shared:
            self._shared[key] = build()
        return self._shared[key]

    def with_corpus(self, corpus: Any, retriever: Any = None) -> Tools:
        """The same machinery (generator, judge, embedder, counter, limits) over another ``corpus`` — a method's own
        view of it — with ``retriever`` (None: none; the method builds what it searches) and fresh column and index
        caches."""
        view = Tools(
            generator=self.generator,
            retriever=retriever,
            corpus=corpus,
            counter=self.counter,
            judge=self.judge,
            embedder=self.embedder,
            passage_chars=self.passage_chars,
            max_new_tokens=self.max_new_tokens,
        )
        return view

    def bm25_retriever(self) -> Any:
        """A BM25 retriever over ``corpus``: the tools' own when it is one over the same passages, else one built
        (its index cached on disk) and shared; over the user's engine, its lexical channel (:meth:`engine_channel`)."""
        from workbench.backends.retrievers import BM25Retriever, as_corpus

        engine = self.engine_channel("lexical")
        if engine is not None:
            return engine
        own = self.retriever
        if isinstance(own, BM25Retriever) and own.corpus.fingerprint == self._fingerprint():
            return own
        return self.shared("bm25", lambda: BM25Retriever(as_corpus(self.corpus), counter=self.counter))

    def dense_retriever(self, index: str = "full", pool: int = 50) -> Any:
        """A dense retriever over ``corpus`` with ``embedder`` (cosine of L2-normalised vectors).

        ``index="full"``: exact inner-product search over every passage (a faiss flat index, cached on disk by corpus
        and embedder; the tools' own retriever when it is such an index over the same passages). ``"pooled"``: the
        top ``pool`` BM25 passages of each query ranked by embedding similarity
        (:class:`~workbench.backends.retrievers.PooledDenseRetriever`; recall bounded by BM25's recall@pool).
        Over the user's engine (:meth:`engine_channel`): ``full`` searches its dense channel, ``pooled`` re-ranks the
        pool of its lexical channel.
        """
        from workbench.backends.retrievers import DenseRetriever, PooledDenseRetriever, as_corpus

        if self.embedder is None:
            raise ConfigError("a dense retriever needs an embedder (tools.embedder is None)", "tools")
        if index == "pooled":
            return self.shared(
                f"dense:pooled:{pool}",
                lambda: PooledDenseRetriever(self.bm25_retriever(), self.embedder, pool=pool, counter=self.counter),
            )
        if index != "full":
            raise ConfigError(f"dense index must be full or pooled, got {index!r}", "tools")
        engine = self.engine_channel("dense")
        if engine is not None:
            return engine
        own = self.retriever
        if (
            isinstance(own, DenseRetriever)
            and own.index_kind == "flat"
            and own.corpus.fingerprint == self._fingerprint()
            and getattr(own.embedder, "fingerprint", None) == getattr(self.embedder, "fingerprint", None)
        ):
            return own
        return self.shared(
            "dense:full", lambda: DenseRetriever(as_corpus(self.corpus), self.embedder, counter=self.counter)
        )

    @property
    def on_engine(self) -> bool:
        """Whether ``retriever`` searches the user's engine (an external backend) rather than this process."""
        from workbench.backends.retrieval_engines import ExternalRetriever

        return isinstance(self.retriever, ExternalRetriever)

    def engine_channel(self, channel: str) -> Any:
        """The ``channel`` (``dense`` or ``lexical``) of the user's engine when ``retriever`` is an external one
        (None when it is not): the retriever itself when it searches that channel, else a second retriever on the
        same connection and corpus searching the other one (built once, shared). An engine without that channel is
        a one-line :class:`~workbench.core.errors.ConfigError` naming ``retrieval.backend``."""
        from workbench.backends.retrieval_engines import ENGINES

        own = self.retriever
        if not self.on_engine:
            return None
        if own.connection.channel == channel:
            return own
        backend = getattr(own, "backend", type(own).__name__)
        spec = ENGINES.get(backend)
        if spec is not None and channel not in spec.channels:
            raise ConfigError(
                f"backend {backend} has no {channel} channel, which this method searches (it offers"
                f" {', '.join(sorted(spec.channels))})",
                "retrieval.backend",
            )
        if channel == "dense" and self.embedder is None:
            raise ConfigError("the engine's dense channel needs an embedder (tools.embedder is None)", "tools")

        def build() -> Any:
            connection = replace(own.connection, channel=channel)
            embedder = self.embedder if channel == "dense" else None
            # the same passage table: a passage either channel adds from the engine has one row for both
            return type(own)(own.passages, connection, embedder=embedder, counter=self.counter)

        return self.shared(f"engine:{channel}", build)

    def _fingerprint(self) -> str:
        from workbench.backends.retrievers import as_corpus

        return self.shared("corpus_fingerprint", lambda: as_corpus(self.corpus).fingerprint)

    def column(self, name: str) -> list:
        """A corpus column as a list (read once; a growing passage table's own live column)."""

        if isinstance(self.corpus, PassageTable):
            return self.corpus[name]
        if name not in self._columns:
            self._columns[name] = list(self.corpus[name])
        return self._columns[name]

    def passage(self, index: int, score: float = 0.0) -> Passage:
        """The corpus row ``index`` as a :class:`Passage`."""
        return Passage(
            index=int(index),
            chunk_id=str(self.column("chunk_id")[index]),
            doc_id=str(self.column("doc_id")[index]),
            title=str(self.column("title")[index]),
            text=str(self.column("text")[index]),
            score=float(score),
        )

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-``k`` passages per query (one batched retrieval call); an empty list where nothing matched."""
        results = self.retriever.search(list(queries), k=k)
        return [[self.passage(int(i), float(s)) for i, s in zip(r.indices, r.scores, strict=True)] for r in results]


class Method(ABC):
    """An adaptive-RAG method. Subclasses set ``name`` and implement :meth:`answer`."""

    name: str = "method"

    def __init__(self, tools: Tools) -> None:
        self.tools = tools

    @abstractmethod
    def answer(self, example: dict[str, Any]) -> Answer:
        """Answer ``example`` (a dict with at least ``"question"``; gold fields are never read at inference)."""

    def answer_many(self, examples: Sequence[dict[str, Any]]) -> list[Answer]:
        """Answer several examples (one by one by default; methods may batch)."""
        return [self.answer(ex) for ex in examples]
