"""Stage ``build_data``: the QA splits and the passage corpus, saved as HF datasets on disk with fingerprints.

Outputs: ``qa/`` (a DatasetDict: train / calib / val / test, plus ood for wiki-qa) and ``corpus/`` (a Dataset
with chunk_id, doc_id, title, text, index, topic). Wikipedia-derived data is built at run time, never committed.

A user's own files (docs/data.md) are read through the field mappings (``data.fields``, ``data.corpus_fields``):
columns that are no QA field are kept in each question's metadata and columns that are no passage field are dropped,
each said in one log line. Questions take their split from ``data.split_column`` when it is set, else from the
fractions (:func:`~workbench.stages.settings.shared.data_fractions`: by default only the splits the recipe's stages
read get questions); a split a stage reads that gets none is refused before any later stage runs.
:func:`check_data_files` is the same reading, on the first rows, for ``workbench validate``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workbench.core.errors import ConfigError, DataError
from workbench.core.regular_files import check_regular
from workbench.data.article_splits import SPLITS
from workbench.data.field_mapping import is_user_file
from workbench.data.user_dataset import read_user_dataset, split_by_column
from workbench.stages.context import StageContext
from workbench.stages.settings.shared import DataSection, data_fractions, split_readers

VALIDATE_ROWS = 100
"""Rows of a dataset file ``workbench validate`` maps and checks (every row's split is read)."""


def make_chunker(section: DataSection):
    """The corpus chunker the data section asks for (None: one passage per document); a size the chunker refuses is
    a one-line ConfigError naming the data section."""
    from workbench.data.corpus import make_chunker as chunker_for

    try:
        return chunker_for(section.chunking, section.chunk_size, section.chunk_overlap)
    except ValueError as exc:
        raise ConfigError(f"{section.chunking} chunking: {exc}".splitlines()[0], "data") from None


def fraction_bounds(n: int, fractions: Sequence[float]) -> list[int]:
    """Where ``n`` shuffled rows are cut into train / calib / val / test: split ``i`` holds rows ``bounds[i]`` to
    ``bounds[i + 1]``, each ``round(fraction * n)`` rows in turn; the rounding remainder goes to the last split with a
    non-zero fraction (test, unless its fraction is 0). A zero fraction gives an empty split."""
    if len(fractions) != 4 or abs(sum(fractions) - 1.0) > 1e-6 or min(fractions) < 0:
        raise ConfigError("data.fractions must be four non-negative numbers summing to 1", "data.fractions")
    bounds = [0]
    for fraction in fractions:
        bounds.append(min(n, bounds[-1] + round(fraction * n)))
    last = max(i for i, fraction in enumerate(fractions) if fraction > 0)
    bounds[last + 1 :] = [n] * (len(bounds) - last - 1)
    return bounds


def _split_by_fractions(dataset, fractions: Sequence[float], seed: int):
    """Shuffle a single-split dataset by seed and cut it into train / calib / val / test (:func:`fraction_bounds`)."""
    import datasets

    bounds = fraction_bounds(len(dataset), fractions)
    shuffled = dataset.shuffle(seed=seed)
    # datasets refuses select(range(n, n)), an empty range starting past the last row: select([]) instead
    return datasets.DatasetDict(
        {
            name: shuffled.select(range(bounds[i], bounds[i + 1]) if bounds[i] < bounds[i + 1] else [])
            for i, name in enumerate(SPLITS)
        }
    )


def _documents(section: DataSection, articles) -> tuple[list, list[str]]:
    """The corpus documents — the embedded summaries, or the user's corpus file through ``data.corpus_fields`` — and
    the columns of that file that are no passage field (dropped)."""
    from workbench.data.corpus import corpus_documents, read_corpus_file

    if section.corpus == "wiki":
        return corpus_documents("wiki", articles), []
    read = read_corpus_file(section.corpus, section.corpus_fields)
    return read.documents, read.dropped


def _read_user_dataset(section: DataSection, documents: list, limit: int | None = None):
    """The user's dataset file read through ``data.fields`` and ``data.split_column`` (gold passages given by doc id
    resolved in ``documents``)."""

    return read_user_dataset(
        section.dataset,
        fields=section.fields,
        split_column=section.split_column,
        split_names=section.split_names,
        documents={d.doc_id: (d.title, d.extract) for d in documents},
        limit=limit,
    )


def _user_splits(config: Any, documents: list, log):
    """The user's dataset file as train / calib / val / test: by its split column, else by the fractions."""
    from workbench.data.schema import rows_to_dataset

    section = config.data
    user = _read_user_dataset(section, documents)
    if user.kept_in_metadata:
        kept = ", ".join(user.kept_in_metadata)
        log.info("dataset %s: column(s) %s are no QA field: kept in each question's metadata", section.dataset, kept)
    dataset = rows_to_dataset(user.rows, section.dataset)
    if user.splits is not None:
        return split_by_column(dataset, user.splits, SPLITS, config.seed)
    return _split_by_fractions(dataset, data_fractions(config), config.seed)


def check_read_splits(config: Any, sizes: dict[str, int]) -> None:
    """DataError naming the dataset when a split a stage of the recipe reads (:func:`split_readers`) got no questions
    (``sizes``: questions per split), saying what gave it none: the split column or the fractions."""
    for split, (stage, key) in split_readers(config).items():
        if sizes.get(split, 1) > 0:
            continue
        data = config.data
        if data.split_column:
            why = f"no row's {data.split_column!r} (data.split_column) names it"
        else:
            why = (
                f"data.fractions {[round(f, 3) for f in data_fractions(config)]} give it none of {sum(sizes.values())}"
            )
        raise DataError(f"split {split!r}, which {stage} reads ({key}), gets no questions: {why}", data.dataset)


def run(ctx: StageContext) -> dict[str, Any]:
    """Build and save ``qa/`` and ``corpus/`` into the stage directory; return split sizes."""
    from workbench.data.corpus import build_corpus
    from workbench.data.dataset_store import save_dataset_dict
    from workbench.data.wikiqa import build_wikiqa, load_articles

    config = ctx.config
    section = config.data
    articles = load_articles() if section.dataset == "wiki-qa" or section.corpus == "wiki" else None
    documents, dropped = _documents(section, articles)
    if dropped:
        fields = "doc_id, title, text, topic"
        ctx.log.info(
            "corpus %s: column(s) %s are no passage field (%s): dropped", section.corpus, ", ".join(dropped), fields
        )
    if section.dataset == "wiki-qa":
        try:
            qa = build_wikiqa(
                articles,
                seed=config.seed,
                templates=tuple(section.templates),
                max_per_template=section.max_per_template,
                fractions=tuple(data_fractions(config)),
                ood_topics=list(section.ood_topics),
            )
        except ValueError as exc:  # the builder's own checks (templates, sizes, fractions) name the setting
            raise ConfigError(str(exc).splitlines()[0], "data") from None
    else:
        if is_user_file(section.dataset):
            qa = _user_splits(config, documents, ctx.log)
        else:
            from workbench.data.loaders import load_qa_dataset

            qa = _split_by_fractions(load_qa_dataset(section.dataset), data_fractions(config), config.seed)
        check_read_splits(config, {name: len(split) for name, split in qa.items()})
    qa_fingerprint = save_dataset_dict(qa, ctx.out_dir / "qa")
    corpus = build_corpus(documents, chunker=make_chunker(section))
    corpus.save_to_disk(str(ctx.out_dir / "corpus"))
    summary: dict[str, Any] = {f"n_{name}": len(split) for name, split in qa.items()}
    summary["n_passages"] = len(corpus)
    summary["qa_fingerprint"] = qa_fingerprint
    ctx.log.info("built %s: %s", section.dataset, ", ".join(f"{k}={v}" for k, v in summary.items()))
    return summary


def check_data_files(config: Any) -> list[str]:
    """What ``workbench validate`` checks of the files the data section names, before any stage runs: the corpus file
    is read whole through ``data.corpus_fields`` (every document, as build_data reads it); the dataset file's first
    :data:`VALIDATE_ROWS` rows are mapped through ``data.fields`` and checked against the QA schema, every row's split
    is read from ``data.split_column``, and the splits the stages read must get questions. Returns one line per file
    saying what was checked; raises the one-line DataError build_data would (the file, and the row)."""
    from workbench.data.loaders import source_kind
    from workbench.data.wikiqa import load_articles

    section = config.data
    if section.dataset != "wiki-qa" and source_kind(section.dataset) == "file":  # named before the corpus is read
        check_regular(Path(section.dataset), "data")
    if section.corpus == "wiki" and not is_user_file(section.dataset):
        return []  # the embedded summaries, and a dataset that is not a user's file: nothing of the user's to open
    lines = []
    articles = load_articles() if section.corpus == "wiki" else None
    documents, dropped = _documents(section, articles)
    if section.corpus != "wiki":
        lines.append(
            f"corpus {section.corpus}: {len(documents)} documents"
            + (f"; dropped: {', '.join(dropped)}" if dropped else "")
        )
    if not is_user_file(section.dataset):
        return lines
    user = _read_user_dataset(section, documents, limit=VALIDATE_ROWS)
    if user.splits is not None:
        sizes = {split: 0 for split in SPLITS} | user.split_sizes()
    else:
        bounds = fraction_bounds(user.records, data_fractions(config))
        sizes = {split: bounds[i + 1] - bounds[i] for i, split in enumerate(SPLITS)}
    check_read_splits(config, sizes)
    checked = "every row" if len(user.rows) == user.records else f"the first {len(user.rows)} rows"
    line = f"dataset {section.dataset}: {user.records} questions ({checked} checked); "
    line += ", ".join(f"{split} {n}" for split, n in sizes.items() if n)
    if user.kept_in_metadata:
        line += f"; kept in metadata: {', '.join(user.kept_in_metadata)}"
    lines.append(line)
    return lines
