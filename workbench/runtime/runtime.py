"""The light runtime: load a bundle, answer questions with any of its methods, return answers with their traces.

``rt = load_bundle(path)`` verifies the bundle and parses its learned parts (no model is loaded yet: that is the cold
start). The first answer builds the tools the manifest names — generator, embedder, NLI judge, the corpus and its
retriever — with the same factory the stages use, and each method with the same ``build_method`` the evaluation stage
uses, so a bundle answers exactly as its run did. What may differ from the bundle (another generator, embedder or
corpus) is refused unless the caller asks for it, and then written into every trace.

A bundle on an external retriever (``external_retriever`` in its manifest) builds its tools at load instead: the
engine must answer and hold the bundle's index (its fingerprint) before ``load_bundle`` returns. When the engine
fails later, while answering, the bundle's ``on_failure`` says what happens: ``error`` raises the one-line
:class:`~workbench.backends.retrieval_engines.EngineError` (``workbench serve``: HTTP 503), ``closed_book`` answers
the questions without retrieval (the ``no_rag`` method over the same models) with a note saying why.
:meth:`Runtime.retriever_status` is what ``/health`` reports of the engine.

The runtime imports no training dependency (lightning, optuna, deepspeed, wandb, scikit-learn): a test checks it in a
fresh interpreter. Questions are plain strings — no gold field can reach a method.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workbench.backends.cost import CostCounter
from workbench.bundle.archive import ArchiveLimits
from workbench.core.errors import ConfigError, DataError
from workbench.runtime.options import RuntimeOptions, runtime_options
from workbench.runtime.questions import question_problem

log = logging.getLogger(__name__)


@dataclass
class RuntimeAnswer:
    """One answer and how it was reached.

    ``retrieved``: whether retrieved text reached the final prompt; ``passages``: those passages (id and title);
    ``p_correct`` / ``tau`` / ``features`` (raw) / ``calibrated``: D²-RAG's retrieval decision (None for other
    methods); ``utility_class``: D²-RAG's decoding class (``closed``, ``relevant``, ``neutral`` or ``noisy``);
    ``lm_calls`` … ``retrieval_calls``: the answer's own cost; ``lm_calls`` counts the prompts run through the model
    for it, not forward batches (a method that batches questions — No-RAG, Standard RAG, DTR, D²-RAG — splits a
    batched stage's cost evenly over the questions in it: token counts can be fractions); ``latency_s``: the answer's
    wall time (its steps'; a step shared by a batch counts its share); ``notes``: recovered failures and departures
    from the bundle; ``trace``: every step with its decisions and cost.

    ``ood``: the out-of-distribution check (docs/ood.md) — None when the bundle has no OOD profile, else ``{"flag",
    "checks", "action"}``: the failed checks (the question's embedding novelty, form and length, for every method)
    and what the flag did (None: no flag; ``reported`` or ``retrieved`` — D²-RAG retrieved because of it —, each with
    a note saying what the flag means first in ``notes``; or ``refused``: ``text`` is ``""`` and the first note says
    why).
    """

    question: str
    method: str
    text: str
    retrieved: bool
    decoding: str
    passages: list[dict[str, Any]] = field(default_factory=list)
    p_correct: float | None = None
    tau: float | None = None
    features: dict[str, float | None] | None = None
    calibrated: dict[str, float] | None = None
    utility_class: str | None = None
    ood: dict[str, Any] | None = None
    lm_calls: float = 0.0
    prompt_tokens: float = 0.0
    generated_tokens: float = 0.0
    tokens: float = 0.0
    nli_pairs: float = 0.0
    retrieval_calls: float = 0.0
    latency_s: float = 0.0
    fallbacks: int = 0
    notes: list[str] = field(default_factory=list)
    trace: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``infer`` writes and ``serve`` returns)."""
        return asdict(self)


UTILITY_CLASSES = ("closed", "relevant", "neutral", "noisy")
OOD_ACTIONS = ("flag", "retrieve", "refuse")
"""What an out-of-distribution flag can do (:class:`~workbench.runtime.options.RuntimeOptions` ``on_ood``)."""
WARM_UP_QUESTION = "Which river flows through Paris?"
"""The question :meth:`Runtime.warm` answers with each method when asked to warm up by answering."""


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


class Runtime:
    """A loaded bundle (see the module docstring). Thread-safe: one answer (or batch) runs at a time."""

    def __init__(self, root: Path, manifest: dict[str, Any], options: RuntimeOptions, notes: list[str]) -> None:
        from workbench.bundle.files import BundleFiles
        from workbench.runtime.opening import read_learned_parts

        self.root = root
        self.manifest = manifest
        self.options = options
        self.name = str(manifest.get("name"))
        self.version = str(manifest.get("version"))
        self.notes = list(notes)
        methods = manifest.get("methods")
        if not isinstance(methods, dict) or not methods:
            raise DataError("the manifest lists no methods", str(root / "manifest.json"))
        self.methods: tuple[str, ...] = tuple(methods)
        self.files = BundleFiles(root, manifest)
        self.method_options = self._method_options(methods)
        try:
            self.learned = read_learned_parts(root, manifest, options.classifier)
            self.policy = self.learned.policy() if self.learned is not None else None
            self.ood = self.learned.ood if self.learned is not None else None  # the OOD profile (docs/ood.md)
        except (KeyError, TypeError, ValueError) as exc:
            where = str(root / "manifest.json")
            raise DataError(f"malformed decision block ({type(exc).__name__}: {exc})", where) from None
        if self.ood is None and ((manifest.get("decision") or {}).get("files") or {}).get("ood"):
            self.notes.append("the bundle's OOD profile is uncalibrated (version 1) and unused: re-export the run")
        self._ood_embed_checked = False
        self._check_prompts()
        self.counter = CostCounter()
        self._tools: Any = None
        self._built: dict[str, Any] = {}
        self._titles: dict[str, str] | None = None
        self._engine_error: str | None = None  # the external retriever's last failure while answering
        self._lock = threading.RLock()
        self.extract_lease: Any = None  # load_bundle's lease on an archive's unpacked copy: never pruned while held

    # ------------------------------------------------------------------ checks at load
    def _method_options(self, methods: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Each method's options (the bundle's, with the caller's overrides laid over), configured once: the typed
        configs are kept for building (:attr:`method_configs`). A method no installed package provides is refused
        in one line naming it and the package the bundle says to install."""
        from workbench.methods.registry import METHOD_TABLE, check_options, missing_method

        for name, record in methods.items():
            if name not in METHOD_TABLE:
                package = (record or {}).get("package") if isinstance(record, dict) else None
                raise missing_method(name, package if isinstance(package, str) else None, "bundle")

        for name, given in self.options.methods.items():
            if not isinstance(given, dict):
                raise ConfigError(
                    f"expects a mapping of option: value, got {type(given).__name__}", f"overrides.methods.{name}"
                )
        out = {}
        for name, spec in methods.items():
            options = dict((spec or {}).get("options", {}) or {})
            options.update(self.options.methods.get(name, {}))
            out[name] = options
        strays = sorted(set(self.options.methods) - set(out))
        if strays:
            where = f"overrides.methods.{strays[0]}" if len(strays) == 1 else "overrides.methods"
            raise ConfigError(f"options for method(s) {strays} that are not in the bundle", where)
        try:
            self.method_configs = check_options(list(out), out)
        except ConfigError as exc:  # the bundle's own options were checked when it was opened: this is an override
            raise self._at_override(exc) from None
        changed = sorted(self.options.methods)
        if changed:
            self.notes.append(f"method options overridden for {', '.join(changed)} (not the bundle's settings)")
        return out

    def _at_override(self, exc: ConfigError) -> ConfigError:
        """``exc``, which the method registry places in a recipe (``evaluate.options.<method>[.<key>]``), placed at
        the caller's override instead (``overrides.methods.<method>[.<key>]``) when the caller overrode that method
        (and that key, when it names one); unchanged otherwise."""
        where = str(exc.where or "")
        if not where.startswith("evaluate.options."):
            return exc
        name, _, key = where.removeprefix("evaluate.options.").partition(".")
        given = self.options.methods.get(name)
        if given is None or (key and key.split(".")[0] not in given):
            return exc
        return ConfigError(exc.what, f"overrides.methods.{name}" + (f".{key}" if key else ""))

    def _check_prompts(self) -> None:
        """Refuse a bundle whose features were collected with other prompts than this workbench's: the prompt groups
        its features read (``stats.prompt_groups``, schema 1.1), or every prompt (``stats.prompts``, schema 1.0)."""
        from workbench.uncertainty.calculators import prompt_fingerprints, prompts_fingerprint

        stats = self.manifest.get("stats") or {}
        writer = (self.manifest.get("workbench") or {}).get("version", "unknown")
        where = str(self.root / "manifest.json")
        groups = stats.get("prompt_groups")
        if isinstance(groups, dict) and groups:
            current = prompt_fingerprints()
            changed = sorted(g for g, h in groups.items() if current.get(g) != h)
            if changed:
                raise DataError(
                    f"the bundle's features were collected with other {', '.join(changed)} prompts than this "
                    f"workbench's: load it with workbench {writer}, or re-export the run",
                    where,
                )
            return
        recorded = stats.get("prompts")
        if recorded and recorded != prompts_fingerprint():
            raise DataError(
                f"the bundle's features were collected with prompts {recorded}, this workbench's are "
                f"{prompts_fingerprint()}: load it with workbench {writer}, or re-export the run",
                where,
            )

    # ------------------------------------------------------------------ tools
    def tools(self) -> Any:
        """The generator, embedder, judge, corpus and retriever the manifest names (built on first use)."""
        with self._lock:
            if self._tools is None:
                from workbench.runtime.tools import build_runtime_tools

                self._tools = build_runtime_tools(self.manifest, self.options, self.counter, self.notes)
            return self._tools

    def method(self, name: str | None = None) -> Any:
        """The method ``name`` (default: the registry's :func:`~workbench.methods.registry.default_method` of the
        bundle's methods — D²-RAG when the bundle has it, else its first), built on first use."""
        if not name:
            from workbench.methods.registry import default_method

            name = default_method(self.methods)
        if name not in self.methods:
            raise ConfigError(f"method {name!r} is not in this bundle (has: {', '.join(self.methods)})", "method")
        with self._lock:
            if name not in self._built:
                from workbench.methods.registry import build_method, uses_decision_policy

                tools = self.tools()
                if getattr(tools.generator, "served", False):  # one line for what the server cannot serve
                    from workbench.methods.backend_needs import check_served_departures, check_served_methods

                    # a method that needs the fitted classifier decides with the bundle's policy and its features
                    uses_policy = uses_decision_policy(name) and self.policy is not None
                    features = list(self.policy.features) if uses_policy else []
                    generator = tools.generator
                    check_served_methods([name], features, generator.capabilities, generator.settings.base_url)
                    note = check_served_departures(
                        features,
                        generator.capabilities,
                        self.manifest["models"]["generator"],
                        generator.settings.base_url,
                    )
                    if note is not None and note not in self.notes:  # allowed by the recipe: every answer says so
                        self.notes.append(note)
                adapter = self.manifest.get("controller_adapter")  # a distilled InSemRAG controller, when exported
                try:
                    self._built[name] = build_method(
                        name,
                        tools,
                        self.method_configs[name],
                        self.learned,
                        utility_fallback="none",
                        # its bytes (and its tensor file's) re-checked against the manifest right before it is read
                        distilled_adapter=(
                            self.files.path(adapter["file"], "controller_adapter.file") if adapter else None
                        ),
                    )
                except ConfigError as exc:  # a setting checked only now (D²-RAG's features): where it was given
                    raise self._at_override(exc) from None
            return self._built[name]

    def warm(self, methods: Sequence[str] | None = None, *, answer: bool = False) -> Runtime:
        """Build the tools and the given methods (default: all) now instead of on the first question. With the
        default, a method the served generator cannot serve is skipped (asking for it later is the one-line refusal).

        ``answer``: also answer :data:`WARM_UP_QUESTION` once with each method built (its out-of-distribution flag
        only reported, so it always runs), so that what a method pays on its first answer alone — a judge or index
        built on first use, the first forward of each model — is paid here and not by the first caller."""
        built = []
        for name in methods or self.methods:
            try:
                self.method(name)
            except ConfigError:
                if methods or not getattr(self.tools().generator, "served", False):
                    raise
                log.warning("method %s is not served by %s", name, self.tools().generator.settings.base_url)
                continue
            built.append(name)
        if answer:
            for name in built:
                self.answer_many([WARM_UP_QUESTION], name, on_ood="flag")
        return self

    # ------------------------------------------------------------------ answering
    def decide(self, raw_features: Any) -> Any:
        """D²-RAG's decision path alone for one question's raw features (mapping or vector in feature order):
        :class:`~workbench.classify.policy.Decision` (p_correct, retrieve, calibrated u). No model is needed."""
        if self.policy is None:
            raise ConfigError(
                "this bundle has no retrieval-decision policy (no method that decides with one)", "decide"
            )
        return self.policy.decide(checked_features(raw_features, self.policy.features))

    def answer(self, question: str, method: str | None = None) -> RuntimeAnswer:
        """Answer one question with ``method`` (see :meth:`method` for the default)."""
        return self.answer_many([question], method)[0]

    def answer_many(
        self,
        questions: Sequence[str],
        method: str | None = None,
        batch_size: int | None = None,
        on_ood: str | None = None,
    ) -> list[RuntimeAnswer]:
        """Answer several questions, ``batch_size`` at a time (default: the generator's batch size); methods that
        batch (DTR, InSemRAG's rounds) share forward passes within a batch. ``on_ood`` (``flag``, ``retrieve`` or
        ``refuse``; None: the runtime's option) is what an out-of-distribution flag does (docs/ood.md): under
        ``refuse`` a flagged question is not run at all."""
        questions = _check_questions(questions)
        action = self.options.on_ood if on_ood is None else on_ood
        if action not in OOD_ACTIONS:
            raise ConfigError(f"on_ood must be one of {', '.join(OOD_ACTIONS)}, got {action!r}", "on_ood")
        runner = self.method(method)
        size = batch_size or self.options.batch_size or int(self.manifest["answering"].get("batch_size", 8))
        if size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {size}", "batch_size")
        out: list[RuntimeAnswer] = []
        with self._lock:
            if hasattr(runner, "ood_profile"):  # D²-RAG: a flag may force retrieval (refusing is done here)
                runner.on_ood = "retrieve" if action == "retrieve" else "flag"
            for start in range(0, len(questions), size):
                batch = questions[start : start + size]
                checks = self._ood_checks(batch)
                run = [i for i, failed in enumerate(checks) if not (action == "refuse" and failed)]
                examples = [{"id": f"q{start + i}", "question": batch[i]} for i in run]
                answers: dict[int, RuntimeAnswer] = {}
                if examples:
                    began = time.perf_counter()
                    done = self._answer_examples(runner, examples)
                    share = (time.perf_counter() - began) / len(examples)  # when a method records no step times
                    answers = {i: self._wrap(batch[i], runner.name, a, share) for i, a in zip(run, done, strict=True)}
                for i, question in enumerate(batch):
                    answer = answers.get(i) or self._refused(question, runner.name, checks[i])
                    out.append(self._flag(answer, checks[i]))
        return out

    def _answer_examples(self, runner: Any, examples: list[dict[str, Any]]) -> list[Any]:
        """``runner``'s answers to ``examples``; when the external retriever fails, the bundle's ``on_failure``:
        ``closed_book`` answers them with ``no_rag`` (each trace noting why), ``error`` re-raises the one line."""
        from workbench.backends.retrieval_engines import EngineError

        try:
            return runner.answer_many(examples)
        except EngineError as exc:
            self._engine_error = str(exc)
            engine = self.manifest.get("external_retriever") or {}
            if engine.get("on_failure") != "closed_book":
                raise
            log.warning("the retriever failed (%s): answering closed-book", exc)
            if "no_rag" not in self._built:
                from workbench.methods.registry import build_method

                self._built["no_rag"] = build_method("no_rag", self.tools(), {}, None, utility_fallback="none")
            answers = self._built["no_rag"].answer_many(examples)
            for answer in answers:
                answer.trace.fallback(f"the retriever failed ({exc}): answered closed-book (on_failure: closed_book)")
            return answers

    def retriever_status(self) -> dict[str, Any] | None:
        """What ``/health`` reports of a bundle's external retriever (None for an in-process one): ``backend``,
        ``uri`` (no credentials), ``index``, ``on_failure``, ``reachable`` (the engine answered a count just now, one
        try), ``error`` (why not), ``last_error`` (its last failure while answering, None when none) and
        ``fingerprint`` (the check at load: ``match``, or what differs when allowed; None before the tools are
        built)."""
        from workbench.backends.retrieval_engines import redact_uri

        engine = self.manifest.get("external_retriever")
        if engine is None:
            return None
        status: dict[str, Any] = {
            "backend": engine["backend"],
            "uri": redact_uri(self.options.retriever_uri or engine["connection"]["uri"]),
            "index": engine["connection"]["index"],
            "on_failure": engine.get("on_failure", "error"),
            "reachable": None,
            "error": None,
            "last_error": self._engine_error,
            "fingerprint": None,
        }
        tools = self._tools
        if tools is not None:
            error = tools.retriever.ping()
            status.update(reachable=error is None, error=error, fingerprint=tools.shared("retriever_check", str))
        return status

    def _ood_checks(self, questions: list[str]) -> list[list[str]]:
        """Each question's failed OOD checks ([] each without a profile). The embedding check runs with the tools'
        embedder when it is the profile's; another one (an ``embedder`` override) turns it off, with a note."""
        if self.ood is None:
            return [[] for _ in questions]
        embed = None
        if self.ood.embedding is not None:
            embed = self.ood.embedder_for(self.tools().embedder)
            if embed is None and not self._ood_embed_checked:
                self.notes.append("the OOD flag's embedding check is off: the embedder is not the one it was fitted on")
            self._ood_embed_checked = True
        return [result.checks for result in self.ood.check_questions(questions, embed)]

    def _flag(self, answer: RuntimeAnswer, checks: list[str]) -> RuntimeAnswer:
        """``answer`` with its ``ood`` (None without a profile); a flagged answer that was given gets the profile's
        note first in its notes (a refused one has its refusal note)."""
        if self.ood is None:
            return answer
        decided = next((s for s in answer.trace.get("steps", []) if s["name"] == "decide"), None)
        taken = None
        if checks:
            taken = "reported"
            if decided is not None and decided["detail"].get("forced_by_ood"):
                taken = "retrieved"
            if "refused" in answer.trace:
                taken = "refused"
            else:
                answer.notes = [self.ood.note(checks), *answer.notes]
        answer.ood = {"flag": bool(checks), "checks": list(checks), "action": taken}
        return answer

    def _refused(self, question: str, method: str, checks: list[str]) -> RuntimeAnswer:
        """The answer to a question refused before any model ran (it is out of distribution, on_ood=refuse)."""
        from workbench.methods.base import Trace

        why = f"refused: out of distribution for this bundle ({', '.join(checks)}); on_ood=refuse"
        trace = Trace(method).to_dict()
        trace.update({"runtime_notes": list(self.notes), "refused": why})
        return RuntimeAnswer(
            question=question,
            method=method,
            text="",
            retrieved=False,
            decoding="none",
            notes=[why, *self.notes],
            trace=trace,
        )

    def _wrap(self, question: str, method: str, answer: Any, latency: float) -> RuntimeAnswer:
        trace = answer.trace.to_dict()
        trace["runtime_notes"] = list(self.notes)  # departures from the bundle, in the trace itself too
        totals = trace["totals"]
        result = RuntimeAnswer(
            question=question,
            method=method,
            text=answer.text,
            retrieved=bool(trace["retrieved"]),
            decoding=str(trace["decoding"]),
            passages=[self._passage(pid) for pid in trace.get("passages", [])],
            lm_calls=float(totals["lm_calls"]),
            prompt_tokens=float(totals["prefill_tokens"]),
            generated_tokens=float(totals["decoded_tokens"]),
            tokens=float(totals["prefill_tokens"] + totals["decoded_tokens"] + totals["scored_tokens"]),
            nli_pairs=float(totals["nli_pairs"]),
            retrieval_calls=float(totals["retrieval_calls"]),
            latency_s=float(totals["seconds"]) or latency,
            fallbacks=int(trace["fallbacks"]),
            notes=[*trace["notes"], *self.notes],
            trace=trace,
        )
        for step in trace["steps"]:
            detail = step["detail"]
            if step["name"] == "decide":
                result.p_correct, result.tau = _finite(detail.get("p_correct")), _finite(detail.get("tau"))
            elif step["name"] == "features" and "calibrated" in detail:
                result.features, result.calibrated = detail.get("raw"), detail.get("calibrated")
            elif step["name"] in ("utility", "generate") and detail.get("class") in UTILITY_CLASSES:
                result.utility_class = detail["class"]  # the generate step's, when there is one, is final
        return result

    def _passage(self, chunk_id: str) -> dict[str, Any]:
        tools = self.tools()
        ids, titles = tools.column("chunk_id"), tools.column("title")
        if self._titles is None:
            self._titles = {}
        for row in range(len(self._titles), len(ids)):  # rows added since (an external engine's passages) too
            self._titles[ids[row]] = titles[row]
        doc = chunk_id.split("#", 1)[0]
        title = self._titles.get(chunk_id) or self._titles.get(f"{doc}#0")
        return {"id": chunk_id, "title": title}

    # ------------------------------------------------------------------ description
    def info(self) -> dict[str, Any]:
        """Name, version, methods with their settings, models, the decision rule and notes (for /health, listings)."""
        from workbench.bundle.shipped import decision_view

        return {
            "name": self.name,
            "version": self.version,
            "schema_version": self.manifest.get("schema_version"),
            "created": self.manifest.get("created"),
            "methods": {m: self.method_options[m] for m in self.methods},
            "generator": self.manifest["models"]["generator"]["ref"],
            "decision": decision_view(self.manifest),  # the manifest's record, as the card and `bundles` show it
            "classifier_backend": self.options.classifier,
            "ood": None if self.ood is None else {"profile": self.ood.describe(), "on_ood": self.options.on_ood},
            "notes": list(self.notes),
        }

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Each text's length in the generator's tokens, special tokens excluded: what a question costs the model
        (``workbench serve`` limits questions by it — characters alone let 2,000 emoji through as 6,000 tokens).

        Builds the tools on first use, as an answer would. Once they exist it takes no lock, so it answers while a
        batch is being answered (the tokenizer is only read: no padding or truncation state is changed).
        """
        texts = list(texts)
        if not texts:
            return []
        # Read without the lock when built: the lock is held for the whole of a running answer_many.
        tools = self._tools if self._tools is not None else self.tools()
        encoded = tools.generator.tokenizer(texts, add_special_tokens=False)["input_ids"]
        return [len(ids) for ids in encoded]


def checked_features(raw: Any, features: Sequence[str]) -> Any:
    """``raw`` if it is a mapping of the decision's feature names (a subset: the missing ones are imputed, and
    :class:`~workbench.classify.policy.Decision` ``.imputed`` names them) to numbers or None, or a sequence of one
    number (or None) per feature; DataError naming the first problem otherwise (an unknown name is a typo or a
    feature of another bundle, never silently imputed)."""
    if isinstance(raw, Mapping):
        unknown = sorted(str(k) for k in raw if k not in features)
        if unknown:
            raise DataError(
                f"unknown feature(s) {unknown[:5]} (this bundle decides on: {', '.join(features)})", "decide"
            )
        values = list(raw.items())
    elif isinstance(raw, Sequence) and not isinstance(raw, str | bytes):
        if len(raw) != len(features):
            raise DataError(
                f"expected {len(features)} feature values ({', '.join(features)}), got {len(raw)}", "decide"
            )
        values = list(zip(features, raw, strict=True))
    else:
        raise DataError(f"features must be a mapping or a sequence of numbers, got {type(raw).__name__}", "decide")
    for name, value in values:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise DataError(f"feature {name!r} must be a number or null, got {type(value).__name__}", "decide")
    return raw


def _check_questions(questions: Sequence[str]) -> list[str]:
    """``questions`` as a list, each one checked by :func:`~workbench.runtime.questions.question_problem` (a
    string with a visible character and no lone surrogate); DataError naming the first that is not."""
    if isinstance(questions, str):
        raise DataError("answer_many takes a list of questions, not one string", "questions")
    out = list(questions)
    for i, q in enumerate(out):
        problem = question_problem(q)
        if problem is not None:
            raise DataError(f"question {i} {problem}", "questions")
    return out


def load_bundle(path: str | Path, overrides: dict[str, Any] | RuntimeOptions | None = None) -> Runtime:
    """Open, verify and load the bundle at ``path`` (a bundle directory or its ``.tar.gz``); see the module docstring.

    ``overrides`` (:class:`~workbench.runtime.options.RuntimeOptions` keys) change deployment settings or, on
    purpose, depart from the bundle. DataError / ConfigError / AssetError (one line, nothing loaded) when the bundle is
    refused: a tampered, missing or extra file, an unsafe archive, a gold-using feature or method, a newer schema
    major, or prompts that differ from the features' collection; an EngineError when the bundle's external retriever
    cannot be reached or holds another index (its tools are built here, see the module docstring).
    """
    from workbench.runtime.opening import open_bundle

    options = runtime_options(overrides)
    limits = ArchiveLimits(options.max_archive_bytes, options.max_unpacked_bytes, options.max_compression_ratio)
    root, manifest, notes, lease = open_bundle(path, limits=limits, extract_dir=options.extract_dir)
    runtime = Runtime(root, manifest, options, notes)
    runtime.extract_lease = lease  # an archive's unpacked copy is never pruned while this runtime lives
    if manifest.get("external_retriever") is not None:
        runtime.tools()  # the engine is reached and its index checked now: a wrong one is refused at load
    return runtime
