"""Retrieval routers chosen on a cost–quality front.

* :mod:`~workbench.routing.cost` — what a router costs per question: the stats its features need (each shared
  piece of work counted once) plus the retrieval it triggers (the recipe's retrieval cost model);
* :mod:`~workbench.routing.candidates` — a router specification (feature subset, classifier kind, inputs,
  calibrator), its out-of-fold P(correct) on the fit split, and the fitted router that is shipped;
* :mod:`~workbench.routing.front` — points on the (quality, cost) plane, the Pareto front and the bootstrap
  comparison with Always-RAG on the evaluation split;
* :mod:`~workbench.routing.pick` — the user's pick rule (cheapest within ε, best quality, best quality within a
  budget), guarded by paired intervals;
* :mod:`~workbench.routing.sweep` — a router's routed score and retrieval rate at every τ, with intervals;
* :mod:`~workbench.routing.cascade` — a two-step router: cheap features decide outside a band of P(correct);
* :mod:`~workbench.routing.search` — greedy forward selection by gain per cost, and the Optuna multi-objective study.

Everything here replays collected features: nothing is generated again.
"""
