"""A small finished run to export bundles from, built by the real runner on the tiny random Llama.

A random model never answers correctly, so its collection would hold one class and nothing could be calibrated. The
run therefore swaps the ``collect`` stage for :func:`synthetic_collect`, which writes a collection in the real format
(through the collect stage's own writer) whose labels follow the features; every other stage — build_data,
calibrate, classify, fit_utility, evaluate (which answers with the tiny model through the same D²-RAG the runtime
uses) and export — is the real one.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

FEATURES = ["confidence", "entropy", "dtr_nll"]
"""Stage-1 features: confidence and DTR's NLL ride on the greedy answer, entropy needs the samples (cheap on the
tiny model)."""

STAT_COST = {  # a synthetic per-question cost of each stats component the features need (stat_costs.json)
    "greedy": {"lm_calls": 1.0, "prefill_tokens": 60.0, "decoded_tokens": 4.0, "seconds": 0.05},
    "samples": {"lm_calls": 1.0, "prefill_tokens": 60.0, "decoded_tokens": 20.0, "seconds": 0.2},
}


def synthetic_collect(ctx: Any) -> dict[str, Any]:
    """A ``collect`` output with rows for the calib and test splits: informative features, correlated labels."""
    from workbench.data.dataset_store import load_saved_dataset_dict
    from workbench.stages.collect.run import _write_outputs, stat_settings
    from workbench.uncertainty.calculators import prompt_group_fingerprints, prompts_fingerprint
    from workbench.uncertainty.features import required_stats

    section = ctx.config.collect
    qa = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")
    from workbench.uncertainty.stat_costs import CACHED_FIELDS, COST_FIELDS

    rng = np.random.default_rng(ctx.config.seed)
    zero = dict.fromkeys((*COST_FIELDS, *CACHED_FIELDS), 0.0)
    stat_cost = json.dumps({name: {**zero, **values} for name, values in STAT_COST.items()})
    by_split: dict[str, list[dict]] = {}
    for split in section.splits:
        rows = list(qa[split].select(range(min(section.limit or 60, len(qa[split])))))
        records = []
        for position, row in enumerate(rows):
            latent = rng.normal()
            correct = float(rng.random() < 1.0 / (1.0 + np.exp(-2.0 * latent)))
            rag = float(correct or rng.random() < 0.5)
            record = {
                "position": position,
                "id": str(row["id"]),
                "question": str(row["question"]),
                "answers": list(row["answers"]),
                "confidence": float(1.0 / (1.0 + np.exp(-latent + rng.normal(scale=0.7)))),
                "entropy": float(-abs(2.0 - latent + rng.normal(scale=0.7))),
                "dtr_nll": float(-abs(1.5 - latent + rng.normal())),
                "greedy_logprobs": [float(-abs(rng.normal())) for _ in range(3)],
            }
            for name in ("em", "f1", "contains"):
                record[f"correct_{name}"], record[f"rag_{name}"] = correct, rag
            record.update(
                closed_prompt_tokens=60.0,
                closed_new_tokens=4.0,
                rag_prompt_tokens=300.0,
                rag_new_tokens=4.0,
                lm_calls=1.0,
                prefill_tokens=60.0,
                decoded_tokens=4.0,
                scored_tokens=0.0,
                nli_pairs=0.0,
                seconds=0.1,
                rag_retriever_seconds=0.01,
                rag_answer_seconds=0.2,
                stat_cost=stat_cost,
            )
            records.append(record)
        by_split[split] = records
    meta = {
        "settings": stat_settings(section).to_dict(),
        "prompts": prompts_fingerprint(),
        "prompt_groups": prompt_group_fingerprints(required_stats(section.features)),
        "shard": "0/1",
        "seed": ctx.config.seed,
        "labels": ["rag"],
        "lars_fit_split": section.lars_fit_split,
        "lars_folds": section.lars_folds,
        "nli_judge": ctx.config.nli.kind,
        "generator": ctx.config.generator.model,
        "attention_logdiag_scope": "answer_positions",
        "synthetic": True,
    }
    _write_outputs(ctx.out_dir, by_split, list(section.features), meta)
    return {f"{split}_rows": len(rows) for split, rows in by_split.items()}


def write_corpus(path: Path, n: int = 300) -> Path:
    """The first ``n`` embedded Wikipedia summaries as a user corpus file (small, so every retriever is fast)."""
    import json

    from workbench.data.wikiqa import load_articles

    rows = [{"doc_id": a.doc_id, "title": a.title, "text": a.extract} for a in load_articles()[:n]]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


METHOD_OPTIONS = (
    "evaluate.options={dtr: {pseudo_max_tokens: 16, n_per_path: 2, k: 2}, "
    "dense_rag: {k: 2, candidates: 4, max_iterations: 1, rephrase_max_new_tokens: 16}, "
    "insemrag: {controller: heuristic, k1: 4, candidates_per_channel: 4, k: 2, compression_length: 32}}"
)


def run_overrides(tmp: Path, lm_dir: Path, encoder_dir: Path, *extra: str) -> list[str]:
    """Overrides of the built-in ``quickstart`` recipe for the tiny run (writes under ``tmp``)."""
    corpus = tmp / "corpus.jsonl"
    if not corpus.exists():
        write_corpus(corpus)
    return [
        f"data.corpus={corpus}",
        f"generator.model={lm_dir}",
        f"embedder.model={encoder_dir}",
        f"run_dir={tmp}/run",
        f"report.dir={tmp}/report",
        f"export.dir={tmp}/bundles",
        "export.name=tiny",
        "tracker=none",
        "threads=0",
        "data.max_per_template=20",
        "stages=[build_data,collect,calibrate,classify,fit_utility,evaluate,export]",
        "collect.limit=60",
        f"collect.features=[{','.join(FEATURES)}]",
        "collect.max_new_tokens=4",
        "classify.seeds=[0]",
        # LR only: the MLP (one Lightning fit per seed and per τ fold) ships in none of these runs (the router search
        # decides, over LR routers) and no test reads it; tests/unit/core/test_calibrate_classify.py trains both
        "classify.kinds=[logistic]",
        "classify.threshold_rule=target_rate",
        "classify.target_rate=0.5",
        # a router that decides: within 20 points of Always-RAG the cheapest router skips some retrievals (within one
        # point, "retrieve always" is the pick and D²-RAG would compute no feature); the quickstart's own rule (a
        # retrieval budget) is replaced, so the tiny runs keep the router they were written against
        "classify.pick=cheapest_within",
        "classify.pick_max_retrieval_rate=null",
        "classify.router_delta=0.2",
        "fit_utility.limit=6",
        "fit_utility.folds=2",
        "fit_utility.samples=2",
        "fit_utility.max_new_tokens=4",  # = evaluate.max_new_tokens
        "fit_utility.k=5",  # = D²-RAG's default k (METHOD_OPTIONS replaces the quickstart's evaluate.options)
        "retrieval.k=2",
        "evaluate.limit=3",
        "evaluate.max_new_tokens=4",
        "evaluate.methods=[no_rag,standard_rag,dtr,dense_rag,d2rag,d2rag_oracle,insemrag]",
        METHOD_OPTIONS,
        *extra,
    ]


def build_tiny_run(tmp: Path, lm_dir: Path, encoder_dir: Path, *extra: str) -> Any:
    """Run the tiny pipeline (see the module docstring) under ``tmp``; returns the runner's result."""
    return run_with_synthetic_collect("quickstart", run_overrides(tmp, lm_dir, encoder_dir, *extra))


def run_with_synthetic_collect(
    recipe: str, overrides: list[str], entry: str = "tests.bundle_run:synthetic_collect"
) -> Any:
    """Run a built-in recipe with its ``collect`` stage replaced by :func:`synthetic_collect` (or the function
    ``entry`` names)."""
    import pytest

    from workbench.recipe import load_recipe
    from workbench.stages import registry
    from workbench.stages.runner import run_recipe

    # the real collect entry (its settings, check and splits: the recipe's collect section) with a synthetic function
    spec = dataclasses.replace(
        registry.STAGES["collect"],
        summary="synthetic collection for tests",
        entry=entry,
        version=1000,
        sections=("collect", "generator"),
        inputs=("build_data",),
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(registry.STAGES, "collect", spec)
        return run_recipe(load_recipe(recipe, overrides))


FIXTURE = Path(__file__).parent / "fixtures" / "bundles" / "tiny" / "1.0.0"
"""The committed tiny bundle (:func:`regenerate_fixture` writes it)."""


def load_fixture_on_tiny_models(work: Path, lm_dir: Path, encoder_dir: Path, passages: int = 50) -> Any:
    """A copy of the committed fixture bundle under ``work``, loaded on the tiny models it was exported with (same
    weights, other paths: ``allow_model_mismatch``) and a corpus of the first ``passages`` summaries; nothing is built
    yet (a cold start)."""
    import shutil

    from workbench.runtime import load_bundle

    bundle = Path(shutil.copytree(FIXTURE, work / "tiny" / "1.0.0"))
    overrides = {
        "generator": str(lm_dir),
        "embedder": str(encoder_dir),
        "allow_model_mismatch": True,
        "corpus": str(write_corpus(work / "corpus.jsonl", n=passages)),
    }
    return load_bundle(bundle, overrides)


def regenerate_fixture(dest: Path, work: Path) -> Path:
    """Re-export the committed compatibility fixture (``tests/fixtures/bundles/tiny``) from a fresh tiny run under
    ``work``: needed when a change the runtime checks (the features' prompts fingerprint) makes the old one refuse to
    load. The fixture holds D²-RAG and the two baselines only. Returns the version directory written."""
    import shutil

    from tests.tiny_models import build_tiny_encoder, build_tiny_llama

    lm = build_tiny_llama(work / "lm", max_positions=4096)
    encoder = build_tiny_encoder(work / "encoder")
    (work / "run").mkdir(parents=True, exist_ok=True)
    build_tiny_run(work / "run", lm, encoder, "evaluate.methods=[no_rag,standard_rag,d2rag]")
    exported = work / "run" / "bundles" / "tiny"
    shutil.rmtree(dest / "1.0.0", ignore_errors=True)
    shutil.copytree(exported / "1.0.0", dest / "1.0.0")
    shutil.copy2(exported / "tiny-1.0.0.tar.gz", dest / "tiny-1.0.0.tar.gz")
    return dest / "1.0.0"


if __name__ == "__main__":  # python -m tests.bundle_run WORK_DIR: rewrite the committed fixture bundle
    import sys

    print(regenerate_fixture(Path(__file__).parent / "fixtures" / "bundles" / "tiny", Path(sys.argv[1])))
