"""Each stage's settings: one module per stage that owns a section of the recipe, plus the shared sections.

A module here holds its stage's section dataclass (keys, types, defaults and one-line meanings, by
:func:`workbench.core.config.doc`) and ``check(config)``, the stage's own load check; the stage table names both
(:attr:`workbench.stages.registry.StageSpec.settings`, ``.check``), and :mod:`workbench.recipe` composes the recipe
schema from the table. They sit beside the stage modules rather than inside them so that loading, validating or
printing a recipe imports only these small modules (core and at most the feature names), never the stages' code
and its numpy, method and server imports. A check imports what it needs (its stage's module included) inside the
function, so only for a stage the recipe runs; no stage module imports its settings module or the recipe, so no
import runs in a circle. Settings two stages must keep in agreement are declared in
:data:`workbench.stages.agreements.AGREEMENTS`, not checked here.
"""
