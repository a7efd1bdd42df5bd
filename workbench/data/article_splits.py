"""Which wiki-qa split each article goes to, and the record an answer-reader adapter keeps of the articles it was
trained on. Light on purpose (the standard library and ``workbench.core`` only, no ``datasets``): a recipe check
computes a split in about 0.1 s.

**The split** (:func:`assign_splits`, the one the wiki-qa builder uses): articles, not questions, go to splits —
``ood`` for the OOD topics, else train / calib / val / test by a seeded shuffle of the sorted doc ids, cut at the
cumulative fractions. The seed, the fractions, the OOD topics and the summaries therefore fix every article's split;
another seed or other topics reshuffle them, a smaller train fraction moves the last train articles out.

**The training-data record** (:func:`training_data_record`; ``adapter.json``'s ``training_data``, written by the
``tune_reader`` stage and committed with the embedded ``smollm2-reader``)::

    {"dataset": "wiki-qa", "split": "train", "seed": 0, "fractions": [0.5, 0.2, 0.1, 0.2], "ood_topics": ["Arts"],
     "summaries_sha256": <sha256 of the summaries file>, "articles": <how many>,
     "articles_sha256": <sha256 of the split's sorted doc ids, one per line (:func:`ids_sha256`)>}

The articles are *every* article of the split the adapter drew its questions from (a superset of those its
questions came from), so the check below is conservative. For another dataset (rows, not articles, are split:
:func:`workbench.stages.build_data.run._split_by_fractions`) the record is ``{"dataset", "split", "seed",
"fractions"}``.

**The check** (:func:`training_data_leak`): does a data configuration keep all those articles in ``train``? It
rebuilds the recorded split from the installed summaries (its hash must match ``articles_sha256``, else the
summaries or the split code changed and the articles cannot be known) and the configuration's ``train`` split, and
names how many training articles land elsewhere. Another dataset never leaks; for a non-wiki-qa record the
configuration must use the same seed and a train fraction at least the recorded one (the shuffle is the same, the
train split then holds the recorded rows).
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from workbench.assets import wiki_summaries_path
from workbench.core.errors import DataError

WIKI_DATASET = "wiki-qa"
SPLITS: tuple[str, ...] = ("train", "calib", "val", "test")
OOD_SPLIT = "ood"
DEFAULT_FRACTIONS: tuple[float, float, float, float] = (0.5, 0.2, 0.1, 0.2)
DEFAULT_OOD_TOPICS: tuple[str, ...] = ("History",)
RECORD_KEY = "training_data"
"""The key of the training-data record in an adapter's JSON (:mod:`workbench.backends.lora`)."""


class HasTopic(Protocol):
    """What :func:`assign_splits` reads of an article (a :class:`~workbench.data.wikiqa.WikiArticle` or an
    :class:`ArticleTopic`)."""

    doc_id: str
    topic: str


@dataclass(frozen=True)
class ArticleTopic:
    """An article's doc id and topic: all the split needs."""

    doc_id: str
    topic: str


def check_fractions(fractions: Sequence[float]) -> tuple[float, ...]:
    """``fractions`` as floats; ValueError unless four non-negative numbers summing to 1."""
    values = tuple(float(f) for f in fractions)
    if len(values) != len(SPLITS) or any(f < 0 for f in values) or abs(sum(values) - 1.0) > 1e-6:
        raise ValueError(f"fractions must be {len(SPLITS)} non-negative numbers summing to 1 {SPLITS}, got {fractions}")
    return values


def assign_splits(
    articles: Sequence[HasTopic],
    *,
    seed: int = 0,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    ood_topics: Iterable[str] = DEFAULT_OOD_TOPICS,
) -> dict[str, str]:
    """Map each article's doc id to a split: ``ood`` for OOD topics, else train / calib / val / test by a seeded
    shuffle of the doc ids cut at the cumulative ``fractions`` (rounded; test takes the remainder)."""
    values = check_fractions(fractions)
    ood = set(ood_topics)
    assignment = {a.doc_id: OOD_SPLIT for a in articles if a.topic in ood}
    rest = sorted({a.doc_id for a in articles if a.topic not in ood})
    random.Random(seed).shuffle(rest)
    bounds, total = [], 0.0
    for fraction in values[:-1]:
        total += fraction
        bounds.append(round(total * len(rest)))
    bounds.append(len(rest))
    start = 0
    for split, end in zip(SPLITS, bounds, strict=True):
        for doc_id in rest[start:end]:
            assignment[doc_id] = split
        start = end
    return assignment


def ids_sha256(ids: Iterable[str]) -> str:
    """sha256 of the sorted ids, one per line (UTF-8, no trailing newline)."""
    return hashlib.sha256("\n".join(sorted(ids)).encode("utf-8")).hexdigest()


def _summaries_file(path: str | Path | None) -> Path:
    if path is None:
        return wiki_summaries_path()
    return Path(path)


@functools.lru_cache(maxsize=4)
def _read_summaries(path: str, size: int, mtime_ns: int) -> tuple[str, tuple[ArticleTopic, ...]]:
    where = path
    try:
        data = Path(path).read_bytes()
        raw = json.loads(data)
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read summaries: {exc}", where) from None
    if not isinstance(raw, dict):
        raise DataError("expected a JSON object mapping keys to {title, extract, description, topic}", where)
    # the articles load_articles keeps (a non-empty extract), in file order
    articles = tuple(
        ArticleTopic(str(key), str(entry.get("topic") or "Uncategorized"))
        for key, entry in raw.items()
        if isinstance(entry, dict) and str(entry.get("extract") or "").strip()
    )
    return hashlib.sha256(data).hexdigest(), articles


def summaries_articles(path: str | Path | None = None) -> tuple[str, tuple[ArticleTopic, ...]]:
    """``(sha256 of the file, its articles)`` of a summaries file (default: the embedded one): the doc id and topic
    of each article :func:`workbench.data.wikiqa.load_articles` keeps, in file order. Memoised by path, size and
    modification time. DataError when the file cannot be read."""
    file = _summaries_file(path)
    try:
        stat = file.stat()
    except OSError as exc:
        raise DataError(f"cannot read summaries: {exc.strerror}", str(file)) from None
    return _read_summaries(str(file.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _split_ids(
    split: str, seed: int, fractions: tuple[float, ...], ood_topics: tuple[str, ...], path: str | None
) -> frozenset[str]:
    _, articles = summaries_articles(path)
    assignment = assign_splits(articles, seed=seed, fractions=fractions, ood_topics=ood_topics)
    return frozenset(doc_id for doc_id, name in assignment.items() if name == split)


def split_articles(
    split: str,
    *,
    seed: int,
    fractions: Sequence[float],
    ood_topics: Iterable[str],
    path: str | Path | None = None,
) -> frozenset[str]:
    """The doc ids :func:`assign_splits` puts in ``split`` for this configuration, over the summaries at ``path``
    (default: the embedded ones). Memoised."""
    return _split_ids(
        split,
        int(seed),
        tuple(float(f) for f in fractions),
        tuple(sorted(str(t) for t in ood_topics)),
        None if path is None else str(path),
    )


def training_data_record(
    *,
    dataset: str,
    split: str,
    seed: int,
    fractions: Sequence[float],
    ood_topics: Iterable[str],
    path: str | Path | None = None,
) -> dict[str, Any]:
    """The training-data record (module doc) of an adapter trained on ``split`` of this data configuration."""
    record: dict[str, Any] = {
        "dataset": str(dataset),
        "split": str(split),
        "seed": int(seed),
        "fractions": [float(f) for f in fractions],
    }
    if dataset != WIKI_DATASET:
        return record
    topics = sorted(str(t) for t in ood_topics)
    digest, _ = summaries_articles(path)
    ids = split_articles(split, seed=seed, fractions=fractions, ood_topics=topics, path=path)
    return {
        **record,
        "ood_topics": topics,
        "summaries_sha256": digest,
        "articles": len(ids),
        "articles_sha256": ids_sha256(ids),
    }


def _record_field(record: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = record.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise DataError(f"its {RECORD_KEY}.{key} is missing or malformed ({value!r})", RECORD_KEY)
    return value


def training_data_leak(
    record: Mapping[str, Any],
    *,
    dataset: str,
    seed: int,
    fractions: Sequence[float],
    ood_topics: Iterable[str],
    path: str | Path | None = None,
) -> str | None:
    """None when this data configuration keeps every training article of ``record`` (module doc) in ``train``;
    else a short reason (lower case, no full stop): how many land in which split, or why they cannot be known.
    DataError when the record is malformed."""
    recorded_dataset = _record_field(record, "dataset", str)
    if recorded_dataset != dataset:
        return None  # another dataset: none of its questions were trained on
    split = _record_field(record, "split", str)
    recorded_seed = _record_field(record, "seed", int)
    recorded_fractions = [float(f) for f in _record_field(record, "fractions", list)]
    if dataset != WIKI_DATASET:  # rows, not articles: the same shuffle keeps the first rows in train
        if split != SPLITS[0]:
            return f"it was trained on split {split!r}, which this configuration does not keep in train"
        if int(seed) != recorded_seed or float(fractions[0]) < recorded_fractions[0]:
            return "another seed or a smaller train fraction moves its training questions to other splits"
        return None
    recorded_topics = [str(t) for t in _record_field(record, "ood_topics", list)]
    digest, articles = summaries_articles(path)
    trained = split_articles(
        split, seed=recorded_seed, fractions=recorded_fractions, ood_topics=recorded_topics, path=path
    )
    if ids_sha256(trained) != _record_field(record, "articles_sha256", str):
        changed = "summaries" if digest != record.get("summaries_sha256") else "split code"
        return (
            f"its training articles cannot be rebuilt (the installed {changed} differ from those it was trained"
            f" with: summaries sha256 {digest[:12]}, recorded {str(record.get('summaries_sha256'))[:12]})"
        )
    outside = trained - split_articles(SPLITS[0], seed=seed, fractions=fractions, ood_topics=ood_topics, path=path)
    if not outside:
        return None
    assignment = assign_splits(articles, seed=int(seed), fractions=fractions, ood_topics=ood_topics)
    moved: dict[str, int] = {}
    for doc_id in outside:
        name = assignment.get(doc_id, "no split")
        moved[name] = moved.get(name, 0) + 1
    where = ", ".join(f"{n:,} in {name}" for name, n in sorted(moved.items(), key=lambda kv: (-kv[1], kv[0])))
    return (
        f"this data configuration puts {len(outside):,} of its {len(trained):,} training articles outside train"
        f" ({where})"
    )
