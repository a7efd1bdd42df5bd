"""Run inside a venv that holds only the core install (``make check-light``): a bundle loads and answers, ``serve``'s
app builds its OpenAPI schema, ``workbench --help`` runs, and none of the ``train`` extra's libraries is installed.

Usage: ``<venv>/bin/python tests/light_install_check.py`` from the repository root (prints one ``ok`` line)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAINING = ("lightning", "sklearn", "optuna", "deepspeed", "wandb", "sentence_transformers", "matplotlib")


def main() -> None:
    sys.path.append(str(ROOT))  # for tests.tiny_models; workbench itself comes from the light venv
    installed = [m for m in TRAINING if importlib.util.find_spec(m) is not None]
    assert installed == [], f"a light install holds training libraries: {installed}"
    from tests.tiny_models import build_tiny_encoder, build_tiny_llama
    from workbench.runtime import load_bundle
    from workbench.serve.app import ServeLimits, create_app

    work = Path(tempfile.mkdtemp(prefix="wb-light-"))
    try:
        bundle = shutil.copytree(ROOT / "tests/fixtures/bundles/tiny/1.0.0", work / "tiny" / "1.0.0")
        corpus = work / "corpus.jsonl"
        corpus.write_text('{"doc_id": "d1", "title": "Seine", "text": "The Seine flows through Paris."}\n')
        overrides = {
            "generator": str(build_tiny_llama(work / "lm", max_positions=4096)),
            "embedder": str(build_tiny_encoder(work / "enc")),
            "corpus": str(corpus),
            "allow_model_mismatch": True,
        }
        runtime = load_bundle(bundle, overrides)
        for method in runtime.methods:
            runtime.answer("Which river flows through Paris?", method)
        schema = create_app(runtime, ServeLimits()).openapi()
        assert "/answer" in schema["paths"]
        help_out = subprocess.run([sys.executable, "-m", "workbench", "--help"], capture_output=True, text=True)
        assert help_out.returncode == 0, help_out.stderr
        still = [m for m in TRAINING if m in sys.modules]
        assert still == [], still
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"ok: light install answered with {len(runtime.methods)} methods, serve schema built, --help ran")


if __name__ == "__main__":
    main()
