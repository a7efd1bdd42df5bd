"""In the light install a training recipe is refused before its first stage (issue 42): every stage declares the
training libraries it needs (workbench/stages/needs.py), and ``workbench run`` looks them up before anything runs —
one line naming the stage and the missing package, exit status 2, nothing written. The light install is simulated
in a fresh interpreter by a meta-path finder that refuses the ``train`` extra's modules."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from workbench.stages.needs import STAGE_NEEDS, TRAINING_MODULES, missing_needs
from workbench.stages.registry import STAGES

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ["build_data", "answer", "collect", "calibrate", "classify", "fit_utility", "study", "export", "report"]

REFUSING = r"""
import importlib.abc, sys
REFUSED = set(sys.argv[1].split(","))

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Refuse())
sys.argv = ["workbench", *sys.argv[2:]]
from workbench.cli import main
main()
"""


def test_every_stage_declares_its_needs_from_the_train_extra():
    assert set(STAGE_NEEDS) == set(STAGES), "a stage without an entry in workbench/stages/needs.py (or a stale one)"
    assert all(module in TRAINING_MODULES for needs in STAGE_NEEDS.values() for module in needs)
    train = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["train"]
    extra = {re.split(r"[\s\[<>=!~;(]", r, maxsplit=1)[0].lower() for r in train}
    assert set(TRAINING_MODULES.values()) <= extra


def test_the_first_stage_that_lacks_a_library_is_named():
    without = {"sklearn", "optuna"}
    assert missing_needs(QUICKSTART, lambda m: m not in without) == ("collect", ["scikit-learn"])
    assert missing_needs(QUICKSTART, lambda m: m != "optuna") == ("classify", ["optuna"])
    assert missing_needs(["build_data", "answer", "evaluate"], lambda m: False) is None  # run in the light install
    assert missing_needs(QUICKSTART, lambda m: True) is None


@pytest.mark.parametrize(
    ("refused", "expected"),
    [
        (
            sorted(TRAINING_MODULES),  # the light install: none of the train extra
            "error: stage collect: needs scikit-learn, which is not installed (the training dependencies): "
            "pip install 'workbench[train]'; no stage was run",
        ),
        (
            ["optuna"],
            "error: stage classify: needs optuna, which is not installed (the training dependencies): "
            "pip install 'workbench[train]'; no stage was run",
        ),
    ],
)
def test_run_refuses_before_the_first_stage_in_one_line(refused, expected, tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WORKBENCH_CACHE_DIR": str(tmp_path / "cache")}
    began = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", REFUSING, ",".join(refused), "run", "quickstart", f"run_dir={run_dir}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == [expected]
    assert not run_dir.exists()  # no stage ran: build_data would have written the run directory
    assert time.monotonic() - began < 60
