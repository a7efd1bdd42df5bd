"""Stage ``build_data``: the QA splits and the passage corpus, saved as HF datasets on disk with fingerprints.

Outputs: ``qa/`` (a DatasetDict: train / calib / val / test, plus ood for wiki-qa) and ``corpus/`` (a Dataset
with chunk_id, doc_id, title, text, index, topic). Wikipedia-derived data is built at run time, never committed.
"""

from __future__ import annotations

from typing import Any

from workbench.core.errors import ConfigError
from workbench.stages.context import StageContext
from workbench.stages.settings.shared import DataSection

SPLITS = ("train", "calib", "val", "test")


def make_chunker(section: DataSection):
    """The corpus chunker the data section asks for (None: one passage per document); a size the chunker refuses is
    a one-line ConfigError naming the data section."""
    from workbench.data.corpus import make_chunker as chunker_for

    try:
        return chunker_for(section.chunking, section.chunk_size, section.chunk_overlap)
    except ValueError as exc:
        raise ConfigError(f"{section.chunking} chunking: {exc}".splitlines()[0], "data") from None


def _split_by_fractions(dataset, fractions: list[float], seed: int):
    """Shuffle a single-split dataset by seed and cut it into train / calib / val / test, each ``round(fraction *
    rows)`` rows in turn; the rounding remainder goes to the last split with a non-zero fraction (test, unless its
    fraction is 0). A zero fraction gives an empty split."""
    import datasets

    if len(fractions) != 4 or abs(sum(fractions) - 1.0) > 1e-6 or min(fractions) < 0:
        raise ConfigError("data.fractions must be four non-negative numbers summing to 1", "data.fractions")
    shuffled = dataset.shuffle(seed=seed)
    n = len(shuffled)
    bounds = [0]
    for fraction in fractions:
        bounds.append(min(n, bounds[-1] + round(fraction * n)))
    last = max(i for i, fraction in enumerate(fractions) if fraction > 0)
    bounds[last + 1 :] = [n] * (len(bounds) - last - 1)
    # datasets refuses select(range(n, n)), an empty range starting past the last row: select([]) instead
    return datasets.DatasetDict(
        {
            name: shuffled.select(range(bounds[i], bounds[i + 1]) if bounds[i] < bounds[i + 1] else [])
            for i, name in enumerate(SPLITS)
        }
    )


def _load_corpus(section: DataSection, articles):
    from workbench.data.corpus import build_corpus, corpus_documents

    return build_corpus(corpus_documents(section.corpus, articles), chunker=make_chunker(section))


def run(ctx: StageContext) -> dict[str, Any]:
    """Build and save ``qa/`` and ``corpus/`` into the stage directory; return split sizes."""
    from workbench.data.dataset_store import save_dataset_dict
    from workbench.data.wikiqa import build_wikiqa, load_articles

    section = ctx.config.data
    articles = load_articles() if section.dataset == "wiki-qa" or section.corpus == "wiki" else None
    if section.dataset == "wiki-qa":
        try:
            qa = build_wikiqa(
                articles,
                seed=ctx.config.seed,
                templates=tuple(section.templates),
                max_per_template=section.max_per_template,
                fractions=tuple(section.fractions),
                ood_topics=list(section.ood_topics),
            )
        except ValueError as exc:  # the builder's own checks (templates, sizes, fractions) name the setting
            raise ConfigError(str(exc).splitlines()[0], "data") from None
    else:
        from workbench.data.loaders import load_qa_dataset

        qa = _split_by_fractions(load_qa_dataset(section.dataset), section.fractions, ctx.config.seed)
    qa_fingerprint = save_dataset_dict(qa, ctx.out_dir / "qa")
    corpus = _load_corpus(section, articles)
    corpus.save_to_disk(str(ctx.out_dir / "corpus"))
    summary: dict[str, Any] = {f"n_{name}": len(split) for name, split in qa.items()}
    summary["n_passages"] = len(corpus)
    summary["qa_fingerprint"] = qa_fingerprint
    ctx.log.info("built %s: %s", section.dataset, ", ".join(f"{k}={v}" for k, v in summary.items()))
    return summary
