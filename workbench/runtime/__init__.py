"""The light runtime: ``load_bundle(path).answer(question, method=...)`` (see :mod:`workbench.runtime.runtime`).

Importing this package loads numpy and the bundle checks only; models load on the first answer. No training
dependency (lightning, optuna, deepspeed, wandb, scikit-learn) is ever imported by the runtime.
"""

from workbench.runtime.options import RuntimeOptions
from workbench.runtime.runtime import Runtime, RuntimeAnswer, load_bundle

__all__ = ["Runtime", "RuntimeAnswer", "RuntimeOptions", "load_bundle"]
