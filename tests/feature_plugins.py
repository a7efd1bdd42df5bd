"""Test helpers for feature plugins (docs/adding-a-feature.md): put a package outside ``workbench/`` on ``sys.path``
so that ``importlib.metadata`` finds its ``workbench.features`` entry points — no pip install — and forget every
plugin the test loaded afterwards, so the next test starts from the built-in features only."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TOY_FEATURE = Path(__file__).parent / "fixtures" / "plugins" / "toy_feature"
"""The toy feature package: ``toy_feature/`` and its ``toy_feature-0.1.dist-info`` (entry point
``toy_min_token_nll``)."""

TOY_NAME = "toy_min_token_nll"


@contextmanager
def installed(*roots: Path) -> Iterator[None]:
    """``roots`` on ``sys.path`` (each holding a package and its ``*.dist-info``) for the block; afterwards they are
    removed, their modules unloaded and the workbench's plugin registries emptied of what the block loaded."""
    from workbench.uncertainty.features import base, plugins
    from workbench.uncertainty.stats import DERIVED_STATS

    before = (dict(plugins._LOADED), dict(base.PLUGIN_PACKAGES), dict(DERIVED_STATS), set(sys.modules))
    sys.path[:0] = [str(root) for root in roots]
    importlib.invalidate_caches()
    try:
        yield
    finally:
        for root in roots:
            sys.path.remove(str(root))
        for name in set(sys.modules) - before[3]:
            module = sys.modules.get(name)
            if any(str(getattr(module, "__file__", "") or "").startswith(str(root)) for root in roots):
                del sys.modules[name]
        for registry, saved in zip((plugins._LOADED, base.PLUGIN_PACKAGES, DERIVED_STATS), before[:3], strict=True):
            registry.clear()
            registry.update(saved)
        importlib.invalidate_caches()


def write_plugin(root: Path, entry_points: str, module: str, package: str = "bad-plugin") -> Path:
    """A one-module plugin package under ``root``: ``bad_plugin.py`` holding ``module`` and a dist-info declaring
    ``entry_points`` (the lines under ``[workbench.features]``). Returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "bad_plugin.py").write_text(module)
    info = root / f"{package.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[workbench.features]\n{entry_points}\n")
    return root
