"""What each stage needs of the ``train`` extra, so a recipe is refused before its first stage, not minutes in.

The light install (``pip install workbench``: the runtime, ``infer`` and ``serve``) lacks the training libraries
(pyproject.toml's ``train`` extra). They are imported lazily, inside the functions that use them, so without this
check a recipe would run its first stages — building data, answering, collecting for minutes — and only then fail
on the first import. :func:`check_stage_needs` looks each stage's needs up (``importlib.util.find_spec``: nothing is
imported) before anything runs and refuses in one line naming the stage and the missing package.

:data:`STAGE_NEEDS` is declared per stage (a test holds that every registered stage has an entry). It names what a
stage's default path imports; the two supported installs are all of the ``train`` extra or none of it, so an entry
errs on the side of naming a library the stage may not reach under every setting.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence

from workbench.core.errors import WorkbenchError

TRAINING_MODULES = {
    "lightning": "lightning",
    "pytorch_lightning": "lightning",
    "lightning_fabric": "lightning",
    "sklearn": "scikit-learn",
    "optuna": "optuna",
    "deepspeed": "deepspeed",
    "wandb": "wandb",
    "onnxscript": "onnxscript",
    "sentence_transformers": "sentence-transformers",
    "matplotlib": "matplotlib",
}
"""Top-level modules of the ``train`` extra (pyproject.toml) → their distribution."""

_PLOTS = ("matplotlib",)
_REPORT = ("matplotlib", "sklearn")  # report sections plot, and rank features by AUROC (scikit-learn)

STAGE_NEEDS: dict[str, tuple[str, ...]] = {
    "build_data": (),
    "answer": (),
    "collect": ("sklearn",),  # each feature's AUROC in its summary
    "calibrate": ("sklearn",),  # isotonic regression, AUROC
    "classify": ("sklearn", "lightning", "optuna"),  # calibrated inputs, the MLP classifier, the router study
    "fit_utility": ("sklearn",),  # the utility classifier (logistic regression)
    "evaluate": (),  # the methods' own code, which the runtime runs too
    "seper_eval": (),
    "study": ("optuna",),
    "distill_data": (),
    "distill": ("lightning",),
    "tune_reader": ("lightning",),
    "export": _PLOTS,  # the bundle's plots
    "transfer": ("sklearn", "lightning"),  # AUROC; the in-task routers (the MLP kind among them)
    "report": _REPORT,
    "train_nli": (),
    "eval_nli": (),
    "report_nli": _REPORT,
    "bench_backends": (),
    "report_bench": _PLOTS,
    "bench_features": _PLOTS,
    "report_bench_features": _PLOTS,
    "bench_decoding": _PLOTS,
    "report_bench_decoding": _PLOTS,
    "bench_served": _REPORT,
    "report_bench_served": _REPORT,
    "bench_lifecycle": ("sklearn", "lightning"),  # recalibrate: the calibrate stage's fitting, a router refit
    "report_bench_lifecycle": ("matplotlib",),
    "bench_runtime": ("optuna", "matplotlib"),
    "report_bench_runtime": ("optuna", "matplotlib"),
    "bench_gpu": _PLOTS,
    "bench_retrievers": (),
    "report_bench_retrievers": _PLOTS,
    "report_bench_gpu": _PLOTS,
}
"""Per stage: the top-level modules of the ``train`` extra it imports (keys of :data:`TRAINING_MODULES`)."""


def installed(module: str) -> bool:
    """Whether ``module`` can be imported here, found without importing it (a finder that refuses it: not)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_needs(
    stages: Sequence[str], is_installed: Callable[[str], bool] = installed
) -> tuple[str, list[str]] | None:
    """``(stage, missing distributions)`` of the first of ``stages`` (in run order) that needs a training library
    ``is_installed`` says is absent; None when every stage has what it needs. A stage without an entry in
    :data:`STAGE_NEEDS` (a third party's) is not checked."""
    for stage in stages:
        missing = [TRAINING_MODULES[m] for m in STAGE_NEEDS.get(stage, ()) if not is_installed(m)]
        if missing:
            return stage, sorted(set(missing))
    return None


def check_stage_needs(stages: Sequence[str], is_installed: Callable[[str], bool] = installed) -> None:
    """Refuse, before any stage runs, a recipe one of whose ``stages`` needs a training library that is not
    installed: a one-line :class:`WorkbenchError` naming the first such stage and its missing package(s)."""
    found = missing_needs(stages, is_installed)
    if found is None:
        return
    stage, missing = found
    raise WorkbenchError(
        f"needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not installed (the training "
        "dependencies): pip install 'workbench[train]'; no stage was run",
        f"stage {stage}",
    )
