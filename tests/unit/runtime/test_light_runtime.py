"""The light runtime (issue 29 items 5-6): on a cold cache, loading a bundle whose generator is an adapter (merged
with ``save_pretrained`` into an empty cache) and answering imports no training library, and everything the
runtime, ``serve`` and the CLI import for ``infer`` / ``serve`` belongs to the package's core dependencies (their
installed requirement closure) — so ``pip install workbench`` without the ``train`` extra runs them.

Checked in one subprocess (a fresh interpreter: nothing imported by other tests)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "bundles" / "tiny" / "1.0.0"
TRAINING = ("lightning", "pytorch_lightning", "deepspeed", "optuna", "wandb", "sklearn")
OPTIONAL_IMPORTS = {
    "pillow",
    "attrs",
    "cloudpickle",
    "orjson",
    "email-validator",
    "python-multipart",
    "sentencepiece",
    "cython",
}
"""Imported by transformers / torch / datasets only when installed (sentencepiece by transformers' tokenizer module,
Cython by pydantic.v1), by FastAPI / Starlette likewise (orjson by the responses module, email-validator by the
OpenAPI models, python-multipart by the form parser) — the dev venv has them through the train and engines extras
(pyserini pulls several): the light venv of ``make check-light`` lacks them and answers all the same."""
SETTINGS = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}

PROBE = r"""
import importlib.metadata, json, sys
from pathlib import Path
from typer.testing import CliRunner
from workbench.cli import app
from workbench.runtime import load_bundle
import workbench.serve.app

help_ok = CliRunner().invoke(app, ["--help"]).exit_code == 0
bundle, adapter, corpus, cache = sys.argv[1:5]
rt = load_bundle(bundle, {"generator": adapter, "embedder": sys.argv[5], "corpus": corpus,
                          "allow_model_mismatch": True})
answers = [rt.answer("Which river flows through Paris?", m).text for m in ("d2rag", "no_rag", "standard_rag")]
workbench.serve.app.create_app(rt, workbench.serve.app.ServeLimits()).openapi()
merged = [p.name for p in (Path(cache) / "adapters").glob("merged-*")]
dists = importlib.metadata.packages_distributions()
tops = sorted({m.split(".")[0] for m in list(sys.modules)} - set(sys.stdlib_module_names) - {"__main__", "workbench"})
print(json.dumps({"help_ok": help_ok, "answers": answers, "merged": merged, "modules": tops,
                  "dists": {m: dists.get(m, []) for m in tops}}))
"""


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string (``Foo_Bar[x]>=1; ...`` → ``foo-bar``)."""
    import re

    return re.split(r"[\s\[<>=!~;(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def core_closure() -> set[str]:
    """The core dependencies declared in pyproject.toml and, transitively, what the installed ones require (without
    extras' requirements)."""
    import importlib.metadata
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [_name(r) for r in project["dependencies"]]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r.replace('"', " ").replace("'", " ")]
    return seen


@pytest.fixture(scope="module")
def probe(tmp_path_factory, tiny_lm_long_dir, tiny_encoder_dir):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from tests.bundle_run import write_corpus
    from workbench.assets import resolve_generator
    from workbench.backends.lora import save_lora_adapter

    work = tmp_path_factory.mktemp("light")
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_lm_long_dir)
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    save_lora_adapter(
        peft_model,
        work / "adapter",
        base_model=str(tiny_lm_long_dir),
        base_fingerprint=resolve_generator(str(tiny_lm_long_dir)).fingerprint,
        settings=SETTINGS,
        decisions=["refine"],
    )
    bundle = shutil.copytree(FIXTURE, work / "tiny" / "1.0.0")
    cache = work / "cache"
    cache.mkdir()  # empty: the adapter is merged (save_pretrained) on this load
    env = {**os.environ, "WORKBENCH_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
    args = [str(bundle), str(work / "adapter"), str(write_corpus(work / "corpus.jsonl", n=40)), str(cache)]
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *args, str(tiny_encoder_dir)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_cold_cache_load_and_answer_imports_no_training_library(probe):
    assert probe["merged"], "the adapter was not merged into the empty cache: the cold path was not exercised"
    assert len(probe["answers"]) == 3 and probe["help_ok"]
    assert [m for m in TRAINING if m in probe["modules"]] == []


def test_the_runtime_serve_and_cli_import_only_core_dependencies(probe):
    closure = core_closure()
    assert not {_name(n) for n in ("lightning", "deepspeed", "optuna", "wandb", "scikit-learn")} & {
        _name(r) for r in closure if r in ("lightning", "deepspeed", "optuna", "wandb", "scikit-learn")
    }, "a training library is a core dependency"
    outside = {
        module: dists
        for module, dists in probe["dists"].items()
        if dists and not any(_name(d) in closure | OPTIONAL_IMPORTS for d in dists)
    }
    assert outside == {}, f"imported, but not in the core dependencies' closure: {outside}"
