"""Adaptive-RAG methods behind one interface (``method.answer(example) -> Answer(text, trace)``): the baselines,
DTR, DENSE-RAG, D²-RAG and InSemRAG. See :mod:`workbench.methods.base`."""
