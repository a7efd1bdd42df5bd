"""workbench: calibrate, tune, distil and ship uncertainty-aware adaptive-RAG decision logic.

The top-level package imports nothing heavy: torch, transformers, lightning and optuna are imported
lazily by the modules that need them, so ``workbench --help`` and the runtime start fast.
"""

__version__ = "0.1.0"
