"""wiki-qa built from the real embedded Wikipedia summaries (10,033 articles): sizes, leakage, cloze masking."""

from __future__ import annotations

import json

import pytest

from workbench.metrics.qa import containment

pytestmark = pytest.mark.integration

SPLITS = ("train", "calib", "val", "test", "ood")


@pytest.fixture(scope="module")
def real():
    from workbench.data.wikiqa import TEMPLATES, build_wikiqa, load_articles

    articles = load_articles()
    return articles, build_wikiqa(articles, seed=0, templates=TEMPLATES)


def test_sizes_per_split_and_template(real) -> None:
    from workbench.data.wikiqa import template_counts

    articles, dd = real
    assert len(articles) == 10_033
    assert set(dd) == set(SPLITS)
    counts = {split: template_counts(dd[split]) for split in SPLITS}
    print(json.dumps(counts, indent=1))
    for split in SPLITS:
        assert {"cloze", "description", "two_hop", "choice_cloze"} <= set(counts[split]), split
        big = {t: n for t, n in counts[split].items() if t not in ("choice_nationality", "choice_country")}
        assert min(big.values()) >= 50, (split, counts[split])
    # People are never the OOD topic here (History is); few place descriptions name a country article
    for split in SPLITS[:-1]:
        assert counts[split]["choice_nationality"] >= 100 and counts[split]["choice_country"] >= 5, counts[split]
    assert sum(c.get("choice_country", 0) for c in counts.values()) >= 80
    # most summaries open with their own title; the split sizes follow the 0.5 / 0.2 / 0.1 / 0.2 fractions
    assert sum(c["cloze"] for c in counts.values()) > 8_000
    in_dist = {split: dd[split].num_rows for split in SPLITS[:-1]}
    total = sum(in_dist.values())
    assert 0.45 < in_dist["train"] / total < 0.55
    assert 0.07 < in_dist["val"] / total < 0.13


def test_cloze_questions_never_contain_their_answer(real) -> None:
    _, dd = real
    checked = 0
    for split in SPLITS:
        for row in dd[split]:
            template = json.loads(row["metadata"])["template"]
            if template == "cloze":
                assert "___" in row["question"]
                assert containment(row["question"], row["answers"]) == 0.0, row["question"]
                checked += 1
            elif template == "choice_cloze":  # the options name the answer; the quoted sentence must not
                question = row["question"]
                sentence = question[question.index('? "') + 3 : question.rindex('"')]
                assert "___" in sentence and containment(sentence, row["answers"]) == 0.0, row["question"]
                checked += 1
    assert checked > 16_000


def test_no_leakage_and_ood_isolated(real) -> None:
    _, dd = real
    owner: dict[str, str] = {}
    for split in SPLITS:
        for row in dd[split]:
            meta = json.loads(row["metadata"])
            if split == "ood":
                assert set(meta["topics"]) == {"History"}
            else:
                assert "History" not in meta["topics"]
            for doc_id in meta["doc_ids"]:
                assert owner.setdefault(doc_id, split) == split, doc_id


def test_gold_passages_are_corpus_documents(real) -> None:
    from workbench.data.corpus import build_corpus

    articles, dd = real
    corpus = build_corpus(articles)
    texts = dict(zip(corpus["doc_id"], corpus["text"], strict=True))
    for row in dd["test"]:
        for passage in row["gold_passages"]:
            assert texts[passage["doc_id"]] == passage["text"]


def test_wiki_qa_is_a_loader_source() -> None:
    from workbench.data.loaders import load_qa_dataset
    from workbench.data.schema import QA_FEATURES

    ds = load_qa_dataset("wiki-qa", "val", limit=5)
    assert ds.num_rows == 5 and ds.features == QA_FEATURES
    assert all(json.loads(m)["dataset"] == "wiki-qa" for m in ds["metadata"])
