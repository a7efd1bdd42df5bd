"""workbench: calibrate, tune, distil and ship uncertainty-aware adaptive-RAG decision logic.

The top-level package imports nothing heavy: torch, transformers, lightning and optuna are imported
lazily by the modules that need them, so ``workbench --help`` and the runtime start fast.
``from workbench import load_bundle`` loads the runtime on first use.
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "load_bundle"]


def __getattr__(name: str) -> Any:
    """``load_bundle`` on first use (PEP 562), so ``import workbench`` stays light."""
    if name == "load_bundle":
        from workbench.runtime import load_bundle

        return load_bundle
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")
