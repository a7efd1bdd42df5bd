"""InSemRAG's controller: every intermediate decision of the method (spec ``seed-004-insemrag.md`` §9.1, S1–S8).

The paper runs a prompted small LM (Llama-3.2-1B-Instruct) as a "semantic controller"; a later stage distils one
into a small student. Both plug in here, behind :class:`Controller`, one method per decision:

=====  ======================  ====================================================================================
 spec  method                  returns
=====  ======================  ====================================================================================
 S1    :meth:`enrich`          :class:`Enrichment` — a dense paraphrase of the query and sparse keywords
 S2    :meth:`channel_weights` :class:`ChannelWeights` — a weight per retrieval channel, summing to 1
 S3    :meth:`refine`          one :class:`Relevance` per candidate — a relevance score and keep / drop
 S4    :meth:`completeness`    one :class:`Completeness` per chunk — semantic completeness in [0, 1] (damage if < τ)
 S5    :meth:`compress`        :class:`Compression` — a repaired chunk: previous + chunk + next, compressed
 S6    :meth:`elements`        :class:`Elements` — the key information elements of the question
 S7    :meth:`coverage`        :class:`Coverage` — per element, how well the evidence covers it (uncovered if < γ)
 S8    :meth:`follow_up`       :class:`FollowUp` — a new search query for one uncovered element
=====  ======================  ====================================================================================

Every returned dataclass is a :class:`Decision`: besides its values it carries ``raw`` (the controller's raw reply:
text, a list of texts, or next-token log-probs), ``fallback`` (True when the reply could not be used and the
documented fallback value was returned instead), ``note`` (why) and ``detail`` (anything else worth logging). The
method writes ``to_dict()`` of every decision into its trace and counts each fallback.

Two implementations:

* :class:`PromptedLMController` — the paper's controller: a generator (any object with ``render_chat`` and
  ``generate``; ``next_token_logprobs`` for the log-prob scoring mode) prompted with this module's own prompts.
  Scores (S3, S4, S7) are p(Yes) / (p(Yes) + p(No)) of the next token (``score_mode="logprobs"``, the spec's
  recommendation for a 1B model) or parsed from a short generated verdict (``"generate"``: yes / no or a number in
  [0, 1]). Channel weights follow the spec's Option B: an intent distribution over entity / explanatory / multi-hop
  mixes per-intent weight templates.
* :class:`HeuristicController` — a deterministic, model-free substitute (not in the paper): keywords by stop-word
  filtering, weights from query length and specificity, completeness from sentence boundaries and balanced
  brackets, relevance and coverage from token overlap, extractive compression. Useful for tests, as a baseline and
  as a floor a distilled controller must beat.

The distilled controller is no third class: it is :class:`PromptedLMController` (``name="distilled"``, log-prob
scoring) over the distilled student, so the student is read exactly as its teacher was prompted. The controller's
model may differ from the answering model (InSemRAG's ``controller_model`` option).

Fallbacks (spec §9.1): S1 → dense = the query, keywords = its content words; S2 → uniform weights; S3 → keep with
score 0.5 (the method breaks ties by the fused retrieval rank; when a filter drops every candidate, the method
keeps the top k2 by score); S4 → intact (score 1); S5 → the extractive stitch
of previous + chunk + next cut to the budget; S6 → the question itself as the only element; S7 → covered (score 1,
which stops the loop); S8 → the element text as the query.

The package, one module per job (each module's ``__all__`` is re-exported here, so every public name of the
package imports from ``workbench.methods.controller``):

* :mod:`~workbench.methods.controller.decisions` — the decision dataclasses;
* :mod:`~workbench.methods.controller.base` — :class:`Controller`, :data:`CHANNELS`, channel-weight helpers;
* :mod:`~workbench.methods.controller.text` — words, content words, sentence stitching, completeness checks;
* :mod:`~workbench.methods.controller.heuristic` — :class:`HeuristicController`;
* :mod:`~workbench.methods.controller.prompts` — the prompts, intents and verdict tokens;
* :mod:`~workbench.methods.controller.replies` — reading a reply (verdicts, JSON, intents, keywords);
* :mod:`~workbench.methods.controller.prompted` — :class:`PromptedLMController`.
"""

from __future__ import annotations

# the facade: the star imports bring each module's __all__, and this package's __all__ is their union
from workbench.methods.controller import base, decisions, heuristic, prompted, prompts, replies, text
from workbench.methods.controller.base import *  # noqa: F403
from workbench.methods.controller.decisions import *  # noqa: F403
from workbench.methods.controller.heuristic import *  # noqa: F403
from workbench.methods.controller.prompted import *  # noqa: F403
from workbench.methods.controller.prompts import *  # noqa: F403
from workbench.methods.controller.replies import *  # noqa: F403
from workbench.methods.controller.text import *  # noqa: F403

__all__ = [
    *decisions.__all__,
    *base.__all__,
    *text.__all__,
    *prompts.__all__,
    *replies.__all__,
    *heuristic.__all__,
    *prompted.__all__,
]
