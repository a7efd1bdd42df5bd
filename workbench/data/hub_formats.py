"""Per-dataset mappers from the raw Hugging Face hub formats of public QA datasets to the QA schema.

Each :class:`HubFormat` names the real hub repository and config, the default split, the raw fields a row must
have, and a mapper ``(rows, split, where) -> examples``. The mappers run on rows from ``datasets.load_dataset``
(users with hub access) and on local files in the same raw format (:func:`workbench.data.loaders.load_raw_local`,
which is how they are tested offline).

=============  ================================  ==============  ============================================
name           hub path (config)                 default split   mapping
=============  ================================  ==============  ============================================
``nq_open``    google-research-datasets/nq_open  validation      answers = ``answer`` list
               (nq_open)
``trivia_qa``  mandarjoshi/trivia_qa             validation      answers = ``answer.value`` + aliases
               (rc.nocontext)
``hotpot_qa``  hotpotqa/hotpot_qa (distractor)   validation      gold passages = the supporting paragraphs
``medmcqa``    openlifescienceai/medmcqa         validation      options opa..opd, answer_index = ``cop``
``pubmed_qa``  qiaojin/PubMedQA (pqa_labeled)    train           options yes / no / maybe, passage = abstract
``fever``      fever/fever (v1.0)                labelled_dev    claim as question, options SUPPORTS /
                                                                 REFUTES / NOT ENOUGH INFO; one row per claim
=============  ================================  ==============  ============================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from workbench.core.errors import DataError
from workbench.data.schema import Passage, QAExample

Row = Mapping[str, Any]
Mapper = Callable[[Iterable[Row], str, str], Iterator[QAExample]]

FEVER_LABELS: tuple[str, ...] = ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO")
PUBMED_LABELS: tuple[str, ...] = ("yes", "no", "maybe")


@dataclass(frozen=True)
class HubFormat:
    """How to fetch one public dataset from the hub and map its raw rows to the QA schema."""

    name: str
    path: str
    config: str | None
    default_split: str
    required: tuple[str, ...]
    mapper: Mapper

    def describe(self) -> str:
        """``path`` plus ``(config)`` when there is one, for messages."""
        return f"{self.path} ({self.config})" if self.config else self.path


def _require(row: Any, fields: Iterable[str], where: str, number: int) -> Row:
    """``row`` if it is an object holding every field, else a DataError naming the row number."""
    if not isinstance(row, Mapping):
        raise DataError(f"row {number}: expected an object, got {type(row).__name__}", where)
    missing = [f for f in fields if f not in row]
    if missing:
        raise DataError(f"row {number}: missing raw field(s) {', '.join(repr(f) for f in missing)}", where)
    return row


def _text(value: Any, field: str, where: str, number: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"row {number}: {field!r} must be a non-empty string", where)
    return value.strip()


def _unique(values: Iterable[str]) -> list[str]:
    """Non-empty stripped strings in first-seen order, without duplicates."""
    return list(dict.fromkeys(v.strip() for v in values if isinstance(v, str) and v.strip()))


def _meta(dataset: str, split: str, **extra: Any) -> dict[str, Any]:
    return {"dataset": dataset, "split": split, **extra}


# --------------------------------------------------------------------------------------------- nq_open


def map_nq_open(rows: Iterable[Row], split: str, where: str) -> Iterator[QAExample]:
    """NQ-open ``{question, answer: [str]}``; ids are ``nq_open-<split>-<row>`` (the data has none)."""
    for number, raw in enumerate(rows, start=1):
        row = _require(raw, FORMATS["nq_open"].required, where, number)
        answers = _unique(row["answer"] if isinstance(row["answer"], list) else [])
        if not answers:
            raise DataError(f"row {number}: 'answer' must be a non-empty list of strings", where)
        yield QAExample(
            id=f"nq_open-{split}-{number - 1}",
            question=_text(row["question"], "question", where, number),
            answers=answers,
            metadata=_meta("nq_open", split),
        )


# --------------------------------------------------------------------------------------------- trivia_qa


def map_trivia_qa(rows: Iterable[Row], split: str, where: str) -> Iterator[QAExample]:
    """TriviaQA rc.nocontext: answers = ``answer.value`` then ``answer.aliases`` (deduplicated)."""
    for number, raw in enumerate(rows, start=1):
        row = _require(raw, FORMATS["trivia_qa"].required, where, number)
        answer = row["answer"]
        if not isinstance(answer, Mapping) or not isinstance(answer.get("value"), str):
            raise DataError(f"row {number}: 'answer' must be an object with a string 'value'", where)
        answers = _unique([answer["value"], *(answer.get("aliases") or [])])
        yield QAExample(
            id=_text(row["question_id"], "question_id", where, number),
            question=_text(row["question"], "question", where, number),
            answers=answers,
            metadata=_meta(
                "trivia_qa",
                split,
                normalized_aliases=list(answer.get("normalized_aliases") or []),
                question_source=row.get("question_source", ""),
            ),
        )


# --------------------------------------------------------------------------------------------- hotpot_qa


def map_hotpot_qa(rows: Iterable[Row], split: str, where: str) -> Iterator[QAExample]:
    """HotpotQA distractor: gold passages = the context paragraphs named in ``supporting_facts`` (sentences
    concatenated as in the data), supporting facts = their titles; type, level and sentence ids in metadata."""
    for number, raw in enumerate(rows, start=1):
        row = _require(raw, FORMATS["hotpot_qa"].required, where, number)
        facts, context = row["supporting_facts"], row["context"]
        try:
            fact_titles = _unique(facts["title"])
            paragraphs = dict(zip(context["title"], context["sentences"], strict=True))
            sent_ids = [[t, int(i)] for t, i in zip(facts["title"], facts["sent_id"], strict=True)]
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"row {number}: malformed supporting_facts/context ({exc})", where) from exc
        missing = [t for t in fact_titles if t not in paragraphs]
        if missing:
            raise DataError(f"row {number}: supporting title(s) {missing} not in context", where)
        passages = [Passage(doc_id=t, title=t, text="".join(paragraphs[t]).strip()) for t in fact_titles]
        yield QAExample(
            id=_text(row["id"], "id", where, number),
            question=_text(row["question"], "question", where, number),
            answers=[_text(row["answer"], "answer", where, number)],
            gold_passages=passages,
            supporting_facts=fact_titles,
            metadata=_meta(
                "hotpot_qa",
                split,
                type=row["type"],
                level=row["level"],
                supporting_sentences=sent_ids,
                context_titles=list(context["title"]),
            ),
        )


# --------------------------------------------------------------------------------------------- medmcqa


def map_medmcqa(rows: Iterable[Row], split: str, where: str) -> Iterator[QAExample]:
    """MedMCQA: options ``opa..opd``, ``cop`` is the 0-based correct option; the explanation ``exp`` (when
    present) is the gold passage. Rows without a label (``cop`` of -1 or None, as in the test split) or whose
    correct option is empty are skipped."""
    for number, raw in enumerate(rows, start=1):
        row = _require(raw, FORMATS["medmcqa"].required, where, number)
        options = [str(row[k] if row[k] is not None else "").strip() for k in ("opa", "opb", "opc", "opd")]
        cop = row["cop"]
        if cop is None or cop == -1:
            continue
        if isinstance(cop, bool) or not isinstance(cop, int) or not 0 <= cop < 4:
            raise DataError(f"row {number}: 'cop' must be 0..3 (or -1 when unlabelled), got {cop!r}", where)
        if not options[cop]:
            continue  # the correct option's text is empty: nothing to score against
        explanation = (row.get("exp") or "").strip()
        subject = row.get("subject_name") or ""
        passages = [Passage(f"medmcqa-exp-{row['id']}", subject or "explanation", explanation)] if explanation else []
        yield QAExample(
            id=_text(row["id"], "id", where, number),
            question=_text(row["question"], "question", where, number),
            answers=[options[cop]],
            options=options,
            answer_index=cop,
            gold_passages=passages,
            metadata=_meta(
                "medmcqa",
                split,
                subject=subject,
                topic=row.get("topic_name") or "",
                choice_type=row.get("choice_type") or "",
            ),
        )


# --------------------------------------------------------------------------------------------- pubmed_qa


def map_pubmed_qa(rows: Iterable[Row], split: str, where: str) -> Iterator[QAExample]:
    """PubMedQA pqa_labeled: options yes / no / maybe, gold = ``final_decision``; the abstract's context
    paragraphs, joined, are the gold passage; the long answer goes to metadata."""
    for number, raw in enumerate(rows, start=1):
        row = _require(raw, FORMATS["pubmed_qa"].required, where, number)
        decision = str(row["final_decision"]).strip().lower()
        if decision not in PUBMED_LABELS:
            raise DataError(f"row {number}: 'final_decision' must be one of {PUBMED_LABELS}, got {decision!r}", where)
        context = row["context"]
        if not isinstance(context, Mapping) or not isinstance(context.get("contexts"), list):
            raise DataError(f"row {number}: 'context' must be an object with a 'contexts' list", where)
        pubid = str(row["pubid"])
        text = " ".join(c.strip() for c in context["contexts"] if isinstance(c, str))
        yield QAExample(
            id=f"pubmed_qa-{pubid}",
            question=_text(row["question"], "question", where, number),
            answers=[decision],
            options=list(PUBMED_LABELS),
            answer_index=PUBMED_LABELS.index(decision),
            gold_passages=[Passage(f"pubmed-{pubid}", f"PMID {pubid}", text)] if text else [],
            metadata=_meta(
                "pubmed_qa",
                split,
                pubid=pubid,
                long_answer=row.get("long_answer") or "",
                meshes=list(context.get("meshes") or []),
            ),
        )


# --------------------------------------------------------------------------------------------- fever


def map_fever(rows: Iterable[Row], split: str, where: str) -> Iterator[QAExample]:
    """FEVER v1.0 (one raw row per evidence sentence): rows are grouped by claim ``id``; the claim is the
    question, the options are SUPPORTS / REFUTES / NOT ENOUGH INFO, supporting facts = the evidence pages.

    The whole input is read before the first example is produced (a claim's rows need not be adjacent).
    """
    claims: dict[str, dict[str, Any]] = {}
    for number, raw in enumerate(rows, start=1):
        row = _require(raw, FORMATS["fever"].required, where, number)
        label = str(row["label"]).strip().upper()
        if label not in FEVER_LABELS:
            raise DataError(f"row {number}: 'label' must be one of {FEVER_LABELS}, got {row['label']!r}", where)
        key = str(row["id"])
        entry = claims.setdefault(key, {"claim": _text(row["claim"], "claim", where, number), "label": label})
        if entry["label"] != label:
            raise DataError(f"row {number}: claim id {key} has conflicting labels", where)
        page = row.get("evidence_wiki_url") or ""
        sentence = row.get("evidence_sentence_id")
        entry.setdefault("pages", []).append(page)
        if page and sentence is not None and sentence != -1:
            entry.setdefault("evidence", []).append([page, int(sentence)])
    for key, entry in claims.items():
        yield QAExample(
            id=f"fever-{key}",
            question=entry["claim"],
            answers=[entry["label"]],
            options=list(FEVER_LABELS),
            answer_index=FEVER_LABELS.index(entry["label"]),
            supporting_facts=_unique(p.replace("_", " ") for p in entry["pages"]),
            metadata=_meta("fever", split, claim_id=key, evidence=entry.get("evidence", [])),
        )


# --------------------------------------------------------------------------------------------- registry

FORMATS: dict[str, HubFormat] = {
    "nq_open": HubFormat(
        "nq_open", "google-research-datasets/nq_open", "nq_open", "validation", ("question", "answer"), map_nq_open
    ),
    "trivia_qa": HubFormat(
        "trivia_qa",
        "mandarjoshi/trivia_qa",
        "rc.nocontext",
        "validation",
        ("question", "question_id", "answer"),
        map_trivia_qa,
    ),
    "hotpot_qa": HubFormat(
        "hotpot_qa",
        "hotpotqa/hotpot_qa",
        "distractor",
        "validation",
        ("id", "question", "answer", "type", "level", "supporting_facts", "context"),
        map_hotpot_qa,
    ),
    "medmcqa": HubFormat(
        "medmcqa",
        "openlifescienceai/medmcqa",
        None,
        "validation",
        ("id", "question", "opa", "opb", "opc", "opd", "cop"),
        map_medmcqa,
    ),
    "pubmed_qa": HubFormat(
        "pubmed_qa",
        "qiaojin/PubMedQA",
        "pqa_labeled",
        "train",
        ("pubid", "question", "context", "final_decision"),
        map_pubmed_qa,
    ),
    "fever": HubFormat("fever", "fever/fever", "v1.0", "labelled_dev", ("id", "label", "claim"), map_fever),
}

# Hub paths (and the old canonical names) that mean the same datasets.
ALIASES: dict[str, str] = {
    **{fmt.path.lower(): name for name, fmt in FORMATS.items()},
    "nq-open": "nq_open",
    "triviaqa": "trivia_qa",
    "hotpotqa": "hotpot_qa",
    "pubmedqa": "pubmed_qa",
}


def known_names() -> list[str]:
    """The dataset names :func:`get_format` accepts (aliases and hub paths aside), sorted."""
    return sorted(FORMATS)


def get_format(name: str, where: str | None = None) -> HubFormat:
    """The :class:`HubFormat` for a known name, alias or hub path; DataError listing the known names otherwise."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in FORMATS:
        raise DataError(f"unknown dataset {name!r}; known: {', '.join(known_names())}", where or "dataset source")
    return FORMATS[key]
