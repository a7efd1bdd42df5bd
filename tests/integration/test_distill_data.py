"""The distill_data stage end to end on the tiny models: build_data → distill_data over a small QA file and corpus
(the embedded Wikipedia summaries), the trace dataset's contract, unusable teacher replies skipped and counted, the
report section, and the bad-input errors."""

from __future__ import annotations

import json

import pytest

from tests.recipe_overrides import run_overrides
from workbench.core.errors import AssetError, ConfigError, DataError
from workbench.recipe import load_recipe
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration

OPTIONS = (
    "distill_data.insemrag={k1: 4, candidates_per_channel: 4, k: 2, max_rounds: 2, chunk_tokens: 32, "
    "enrich_tokens: 4, elements_tokens: 4, follow_up_tokens: 4}"
)


def write_data(tmp_path, *, gold: bool = True):
    """A 12-question QA file (train 6 / val 5 / test 1) whose gold passages are embedded summaries, and a 40-document
    corpus holding them; ``gold=False``: no gold passages and answers no passage contains."""
    from workbench.data.wikiqa import load_articles

    articles = load_articles()[:40]
    rows = []
    for i, article in enumerate(articles[:12]):
        first = article.extract.split(". ")[0].replace(article.title, "___")
        rows.append(
            {
                "id": f"q{i}",
                "question": f"Which article begins: {first}?",
                "answers": [article.title] if gold else ["zzqx-never-there"],
                "gold_passages": (
                    [{"doc_id": article.doc_id, "title": article.title, "text": article.extract}] if gold else []
                ),
            }
        )
    qa, corpus = tmp_path / ("qa.jsonl" if gold else "qa-nogold.jsonl"), tmp_path / "corpus.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows))
    corpus.write_text(
        "".join(json.dumps({"doc_id": a.doc_id, "title": a.title, "text": a.extract}) + "\n" for a in articles)
    )
    return qa, corpus


def data_overrides(tmp_path, lm, encoder, *extra, gold: bool = True, threads: int = 0):
    """:func:`~tests.recipe_overrides.run_overrides` on the QA file and corpus of :func:`write_data` (written under
    ``tmp_path``), the encoder as the embedder, then ``extra``."""
    qa, corpus = write_data(tmp_path, gold=gold)
    return run_overrides(
        tmp_path,
        lm,
        f"embedder.model={encoder}",
        f"data.dataset={qa}",
        f"data.corpus={corpus}",
        "data.fractions=[0.5, 0.0, 0.4, 0.1]",
        *extra,
        threads=threads,
    )


def _overrides(tmp_path, lm, encoder, *extra, gold: bool = True):
    return data_overrides(
        tmp_path,
        lm,
        encoder,
        "stages=[build_data,distill_data]",
        "distill_data.limit=3",
        "distill_data.heldout_limit=2",
        OPTIONS,
        *extra,
        gold=gold,
    )


def test_distill_data_writes_the_trace_dataset_and_counts_unusable_replies(
    tmp_path, tiny_lm_long_dir, tiny_encoder_dir
):
    from workbench.distill.traces import DECISIONS, TRACE_COLUMNS, load_traces
    from workbench.methods.controller import CONTROLLER_SYSTEM
    from workbench.stages.distill_data.report import distill_data_lines

    run_recipe(load_recipe("evaluate", _overrides(tmp_path, tiny_lm_long_dir, tiny_encoder_dir)))
    stage = tmp_path / "run" / "stages" / "distill_data"
    traces = load_traces(stage / "traces")
    assert list(traces) == ["train", "heldout"]
    summary = json.loads((stage / "summary.json").read_text())
    for split, questions in (("train", 3), ("heldout", 2)):
        rows = traces[split]
        assert tuple(rows.column_names) == TRACE_COLUMNS and summary["splits"][split]["questions"] == questions
        assert set(rows["source"]) == {"teacher", "gold"} and set(rows["decision"]) <= set(DECISIONS)
        assert set(rows["question_id"]) <= {f"q{i}" for i in range(12)}
        assert all(
            p.startswith(f"<|system|>{CONTROLLER_SYSTEM}") and p.endswith("<|assistant|>") for p in rows["input"]
        )
        for row in rows:
            assert row["single_token"] == (row["decision"] in ("channel_weights", "refine", "completeness", "coverage"))
            if row["decision"] == "channel_weights":
                assert row["target"] in ("A", "B", "C")
            elif row["single_token"]:
                assert row["target"] in ("Yes", "No") and 0.0 <= row["score"] <= 1.0
                assert row["source"] == "teacher" or row["score"] in (0.0, 1.0)
            else:
                assert row["score"] != row["score"]  # NaN
        made, skipped = summary["splits"][split]["teacher_replies"], summary["splits"][split]["skipped"]
        for decision in DECISIONS:
            teacher_rows = sum(
                1 for d, s in zip(rows["decision"], rows["source"], strict=True) if d == decision and s == "teacher"
            )
            assert teacher_rows <= made[decision] - skipped[decision]
            assert summary["splits"][split]["by_decision"][decision]["teacher"] == teacher_rows
        # a random model writes no JSON: every enrichment and element list is unusable, skipped and counted
        assert skipped["enrich"] == made["enrich"] >= questions and skipped["elements"] == made["elements"] == questions
        assert "enrich" not in [d for d, s in zip(rows["decision"], rows["source"], strict=True) if s == "teacher"]
        assert made["refine"] > 0 and skipped["refine"] == 0  # log-prob verdicts are always readable
    assert summary["teacher"]["score_mode"] == "logprobs" and summary["teacher"]["is_answering_model"]
    assert summary["teacher"]["fingerprint"] and summary["teacher_cost"]["refine"]["prompt_tokens"] > 0
    assert summary["gold"]["questions"] == 5 and summary["gold"]["gold_in_view"] == 5
    lines = distill_data_lines(stage, tmp_path / "report")
    text = "\n".join(lines)
    assert "| refine |" in text and "unusable (skipped)" in text and "| enrich |" in text
    assert (tmp_path / "report" / "distill_data_rows.png").is_file()


def test_distill_data_refuses_bad_settings(tmp_path, tiny_lm_long_dir, tiny_encoder_dir):
    for override, match in (
        ("distill_data.sources=[]", "distill_data.sources"),
        ("distill_data.sources=[gold,gold]", "distill_data.sources"),
        ("distill_data.heldout_split=train", "distill_data.heldout_split"),
        ("distill_data.split=nope", "distill_data.split"),
        ("distill_data.insemrag={bogus: 1}", "distill_data.insemrag"),
        ("distill_data.insemrag={controller: heuristic}", "distill_data.insemrag.controller"),
        ("distill_data.insemrag={k: 9, k1: 4}", "distill_data.insemrag"),
    ):
        with pytest.raises(ConfigError, match=match):
            load_recipe("evaluate", _overrides(tmp_path, tiny_lm_long_dir, tiny_encoder_dir, override))


def test_distill_data_errors_leave_nothing_behind(tmp_path, tiny_lm_long_dir, tiny_encoder_dir):
    import subprocess
    import sys

    stage = tmp_path / "run" / "stages" / "distill_data"
    missing = f"distill_data.teacher={tmp_path}/no-such-model"
    with pytest.raises(AssetError, match=r"distill_data\.teacher"):
        run_recipe(load_recipe("evaluate", _overrides(tmp_path, tiny_lm_long_dir, tiny_encoder_dir, missing)))
    assert not stage.exists()
    args = ["run", "evaluate", *_overrides(tmp_path, tiny_lm_long_dir, tiny_encoder_dir, missing)]
    cli = subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 2 and len(cli.stderr.strip().splitlines()) == 1, cli.stderr
    assert cli.stderr.startswith("error: distill_data.teacher: cannot load the teacher")
    # gold labels only, from questions without gold passages whose answers no passage holds: no row at all
    overrides = _overrides(tmp_path, tiny_lm_long_dir, tiny_encoder_dir, "distill_data.sources=[gold]", gold=False)
    with pytest.raises(DataError, match="no trace rows"):
        run_recipe(load_recipe("evaluate", overrides))
    assert not stage.exists()
