"""The recipe's shared sections (generator, embedder, data, retrieval, NLI judge, report): :mod:`.shared`.

Each stage's own section lives in its package (``workbench/stages/<stage>/settings.py``: its dataclass and load
check), imported by the package's spec without the stage's run code, so loading, validating or printing a recipe
imports only small modules (core and at most the feature names), never the stages' numpy, method and server code.
Settings two stages must keep in agreement are declared in :data:`workbench.stages.agreements.AGREEMENTS`.
"""
