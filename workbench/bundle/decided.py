"""An operating point chosen after the run (``workbench decide``), as the export ships it in place of classify's.

``workbench decide`` (:mod:`workbench.stages.decide`) re-decides D²-RAG's retrieval decision from a finished run's
stored scores — a τ given by hand, the τ of a retrieval rate on the fit split, or another pick rule over the routers
classify found — and hands the export a :class:`DecidedPoint`: the router (classify's, or the same search's pick
refitted on the fit split), its τ, what τ (and a refitted router) was chosen on, its P(correct) on the evaluation
split and its held-out figures there. The export then ships that decision, records ``set_by: decide`` with the
questions behind it (never the held-out ones: the export checks), adds the decision's row to the routing table, and
leaves out D²-RAG's end-to-end ``evaluate`` figures, which were measured at the τ evaluate ran, not this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.bundle.provenance import Questions
from workbench.methods.learned import CLASSIFIER_KINDS, load_learned


@dataclass(frozen=True)
class DecidedPoint:
    """A re-decided operating point: ``tau`` and ``rule`` (the manifest's ``decision.tau`` / ``decision.rule``);
    ``router`` — ``selection.json``'s router block (``spec``, ``label``, ``files``) whose files lie in
    ``router_dir``; ``p_eval`` — its P(correct) on the evaluation split; ``tau_questions`` — what τ was chosen on
    (split None: given by hand); ``refit`` — what a refitted router was fitted on (None: classify's router);
    ``record`` — the manifest's ``metrics.decide`` (the request, classify's τ, the held-out comparison); ``note``
    — the manifest note saying what changed."""

    tau: float
    rule: str
    router: dict[str, Any]
    router_dir: Path
    p_eval: tuple[float, ...]
    tau_questions: Questions
    refit: Questions | None
    record: dict[str, Any]
    note: str

    @property
    def label(self) -> str:
        """The routing row's name: the router at its τ, set by decide."""
        return f"{self.router['label']} at τ = {self.tau:.3f} (decide)"

    def apply(self, learned: Any) -> Any:
        """``learned`` (:class:`~workbench.methods.learned.LearnedParts` as evaluate ran them) with this router and
        τ; the utility, the LARS scorer, the stats settings and the OOD profile stay the run's."""

        files = self.router["files"]
        calibrators = load_learned(self.router_dir / files["calibrators"], expect={"calibrator_set"})
        classifier = load_learned(self.router_dir / files["classifier"], expect=CLASSIFIER_KINDS)
        return type(learned).assemble(
            calibrators,
            classifier,
            self.tau,
            utility=learned.utility,
            lars_scorer=learned.lars_scorer,
            stats=learned.stats,
            tau_rule=self.rule,
            ood=learned.ood,
        )

    def fitted(self) -> dict[str, Questions]:
        """The manifest's ``provenance.fitted`` entries this decision replaces: ``decision.tau`` always; the
        router's calibrators and classifier when it was refitted (on the questions ``refit`` names)."""
        out = {"decision.tau": self.tau_questions}
        if self.refit is not None:
            out["decision.calibrators"] = self.refit
            out["decision.classifier"] = self.refit
        return out
