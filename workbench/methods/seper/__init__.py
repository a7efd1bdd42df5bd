"""SePer as a label and an evaluator, not an answering method (spec ``seed-001-seper.md``): ΔSePer needs the gold
answer, so it labels retrieval utility (``collect``, ``fit_utility``), is D²-RAG's oracle utility (its ``_oracle``
variant) and ranks retrievers (``seper-eval``); it never reaches a bundle. One job per module:

* :mod:`~workbench.methods.seper.utility` — the utility interface, the oracle ΔSePer utility, the ridge predictor and
  the gold-free utility features;
* :mod:`~workbench.methods.seper.utility_classifier` — the gold-free utility classifier ``fit_utility`` trains
  (D²-RAG's runtime substitute for ΔSePer) and the one cut of a utility δ into the three classes.

It exports no :class:`~workbench.methods.spec.MethodSpec`: nothing answers with it.
"""
