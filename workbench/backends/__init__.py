"""Layer 3: the heavy machinery behind small interfaces (generator, embedder, NLI judges, retrievers).

Backends return plain dataclasses of numpy arrays, never HF objects, and count their own cost in a
:class:`workbench.backends.cost.CostCounter`. torch / transformers are imported inside the functions that need
them, so importing a backend module is cheap.
"""
