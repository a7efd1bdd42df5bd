"""Layer 6, beside the stages: the benchmarks. A benchmark is a recipe (``recipes/bench-*.yaml``), not a pipeline
step: each is one package (``bench/<name>/``: its spec in ``__init__``, ``settings``, ``run``, ``report``) listed in
:data:`workbench.bench.registry.BENCHMARKS`, whose stages the stage runner runs beside the pipeline's; all time their
work with one harness (:mod:`workbench.bench.harness`)."""
