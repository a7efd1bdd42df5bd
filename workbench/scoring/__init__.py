"""Scoring existing answers (``workbench score``): the stats graph of ``collect`` fed with given answers instead of
generated ones, resumable and shardable, with a bundle's P(correct) and decisions on top.

It sits beside the runtime (layer 5 of docs/architecture.md): it reads user records, runs the uncertainty layer's
stats graph and may load a bundle through :func:`workbench.runtime.load_bundle`; no pipeline stage imports it (the
``lifecycle`` benchmark does).

* :mod:`~workbench.scoring.records` — the record schema and its checks;
* :mod:`~workbench.scoring.given` — given answers teacher-forced into the graph's Generations;
* :mod:`~workbench.scoring.run` — chunks, checkpoints, shards, the output rows;
* :mod:`~workbench.scoring.decisions` — P(correct) and each method's decision from a loaded bundle;
* :mod:`~workbench.scoring.bundle` — the scorer of a loaded bundle (``score --bundle``, the lifecycle benchmark).
"""
