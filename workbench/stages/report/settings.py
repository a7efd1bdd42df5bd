"""The 'report' stage's load check (the stage reads the shared ``report`` section: it owns none)."""

from __future__ import annotations

from workbench.core.errors import ConfigError
from workbench.core.settings import RecipeView


def check(config: RecipeView) -> None:
    """report's load check: at least one stage whose output it shows runs before it."""
    from workbench.stages.registry import STAGES

    shown = STAGES["report"].optional_inputs
    if not any(stage in config.stages for stage in shown):
        raise ConfigError(f"the report stage needs one of {', '.join(shown)} before it", "stages")
