"""The manifest's schema: every block the runtime reads, typed and range-checked when the manifest is read.

One schema for both sides: :func:`check_manifest` runs on every load (inside
:func:`~workbench.bundle.integrity.read_manifest`) and on every export (the exporter verifies its staging directory
exactly as a loader would), so a bundle the workbench writes always passes it, and a hand-edited or crafted value
is refused before anything reads it — one :class:`~workbench.core.errors.DataError` naming the field, never a
traceback at the first answer.

The blocks are plain dataclasses validated by the recipe machinery (:func:`~workbench.core.config.build_dataclass`:
types, ``Literal`` choices, required keys), plus the ranges in their ``__post_init__``. Keys a block does not know
are not errors — a newer minor schema adds optional fields (docs/bundles.md, *Compatibility*) — they are returned
as notes. Free-form provenance (``recipe``, ``data``, ``metrics``, ``workbench``) is only checked to be a mapping.

:func:`content_digest` is the digest the exporter writes as ``content_sha256`` and the loader recomputes.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, get_args, get_origin

from workbench.bundle.schema import IDENTITY_MINOR, check_name, parse_semver, schema_minor
from workbench.core.bounds import CHARS, NEW_TOKENS, PASSAGES, SEED
from workbench.core.config import LocatedYAML, build_dataclass
from workbench.core.errors import ConfigError, DataError
from workbench.core.hashing import stable_hash

DIGEST_EXCLUDES = ("created", "workbench", "recipe", "name", "version", "content_sha256", "files")
"""Manifest fields outside the content digest: the provenance of the export (when, by which workbench, from which
resolved recipe — a run re-run with another report directory is the same content) and the file table's card entry.
Everything the runtime reads is inside it. ``name`` and ``version`` stay outside for readers of schema 1.2 and
before (a minor adds fields, it never changes the digest's rule); since 1.3 the ``identity`` block repeats them
inside the digest, and the loader refuses a manifest whose ``name`` or ``version`` is not its ``identity``'s."""

CARD = "README.md"
"""The model card: the one file outside the content digest (it quotes provenance)."""

SHA256 = re.compile(r"^[0-9a-f]{64}$")

LIMITS = {
    "seed": (0, SEED),
    "k": (1, PASSAGES),
    "passage_chars": (1, CHARS),
    "max_new_tokens": (1, NEW_TOKENS),
    "batch_size": (1, 4096),
    "max_context": (1, 10_000_000),
    "chunk_size": (1, 10_000_000),
    "chunk_overlap": (0, 10_000_000),
}
"""Inclusive integer bounds of the manifest's own numeric settings (:mod:`workbench.core.bounds` where a method or
the stats share the quantity; a bound far past any real bundle, so a crafted value cannot make the runtime generate
or batch without end). Method options and stats settings are bounded by their owners (the method's settings class,
:class:`~workbench.uncertainty.stat_settings.StatSettings`), which :func:`check_manifest` calls."""


def _in_range(name: str, value: int | None, where: str) -> None:
    low, high = LIMITS[name]
    if value is not None and not low <= value <= high:
        raise ValueError(f"'{where}' must be between {low} and {high}, got {value}")


def _sha256_or_none(value: str | None, where: str) -> None:
    if value is not None and not SHA256.match(value):
        raise ValueError(f"'{where}' must be 64 lowercase hex digits, got {value[:80]!r}")


@dataclass
class ModelRecord:
    """A model reference of ``models``: what it is (``ref``, ``source``), where it came from, and its weights digest."""

    ref: str
    source: str | None = None
    weights_sha256: str | None = None
    package: str | None = None
    package_version: str | None = None
    path: str | None = None
    hub_id: str | None = None
    revision: str | None = None

    block: ClassVar[str] = "models.embedder"

    def __post_init__(self) -> None:
        _sha256_or_none(self.weights_sha256, f"{self.block}.weights_sha256")


@dataclass
class ProbeBlock:
    """``models.generator.probe``: the model's greedy continuations of fixed probe prompts and their token
    log-probs (:mod:`workbench.backends.served_probe`): how a served model is recognised without its weights."""

    model: str
    texts: list[str]
    logprobs: list[list[float]]
    context: int | None = None

    def __post_init__(self) -> None:
        if len(self.texts) != len(self.logprobs) or not all(math.isfinite(v) for row in self.logprobs for v in row):
            raise ValueError("'models.generator.probe' needs one finite log-prob list per probe text")


@dataclass
class ServedRecord:
    """``models.generator.served``: the run's generator was served: its served name, the tokenizer that rendered
    the prompts (None: the server's chat template) and what the server could give."""

    model: str
    tokenizer: str | None = None
    capabilities: dict[str, Any] | None = None
    approximate_features: dict[str, str] | None = None


@dataclass
class ServedEmbedderRecord:
    """``models.embedder.served``: the run's embedder was served (``embedder.backend: openai``): the server's
    ``base_url``, the served ``model`` name, the NAME of the API-key variable (never the key), the vectors'
    dimension and the probe vectors (:class:`~workbench.backends.served_embedder.EmbeddingProbe`; None when the run
    never embedded) by which the runtime recognises the model."""

    base_url: str
    model: str
    api_key_env: str | None = None
    dim: int | None = None
    probe: dict | None = None

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError("'models.embedder.served.base_url' must start with http:// or https://")
        if self.probe is None:
            return
        texts, vectors = self.probe.get("texts"), self.probe.get("vectors")
        rows_ok = isinstance(vectors, list) and all(
            isinstance(row, list) and len(row) == self.dim and all(isinstance(v, int | float) for v in row)
            for row in vectors
        )
        if not (isinstance(texts, list) and rows_ok and len(texts) == len(vectors)):  # type: ignore[arg-type]
            raise ValueError("'models.embedder.served.probe' needs one vector of 'dim' numbers per probe text")
        if not all(math.isfinite(v) for row in vectors for v in row):  # type: ignore[union-attr]
            raise ValueError("'models.embedder.served.probe' vectors must be finite")


@dataclass
class EmbedderRecord(ModelRecord):
    """``models.embedder``: the sentence embedder (weights digest), or the server that embedded (``served``)."""

    served: ServedEmbedderRecord | None = None


@dataclass
class GeneratorRecord(ModelRecord):
    """``models.generator``: the answering model and how it was run; ``allow_approximate_features``: the recipe let
    the bundle score features a server does not give exactly with calibrators fitted on exact ones
    (``export.allow_approximate_features``; :func:`workbench.methods.backend_needs.check_served_departures`)."""

    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    max_context: int | None = None
    prompt_format: Literal["auto", "chat", "completion"] = "auto"
    probe: ProbeBlock | None = None
    served: ServedRecord | None = None
    allow_approximate_features: bool = False

    block: ClassVar[str] = "models.generator"

    def __post_init__(self) -> None:
        super().__post_init__()
        _in_range("max_context", self.max_context, "models.generator.max_context")


@dataclass
class JudgeRecord:
    """``models.nli``: the NLI judge's kind, batch size and (for model judges) its model and weights digest."""

    kind: str
    batch_size: int = 32
    model: str | None = None
    weights_sha256: str | None = None

    def __post_init__(self) -> None:
        _in_range("batch_size", self.batch_size, "models.nli.batch_size")
        _sha256_or_none(self.weights_sha256, "models.nli.weights_sha256")


@dataclass
class ModelsBlock:
    """``models``."""

    generator: GeneratorRecord
    embedder: EmbedderRecord
    nli: JudgeRecord


@dataclass
class AnsweringBlock:
    """``answering``: how every method retrieves and answers."""

    retriever: str
    k: int
    passage_chars: int
    max_new_tokens: int
    batch_size: int = 8

    def __post_init__(self) -> None:
        for name in ("k", "passage_chars", "max_new_tokens", "batch_size"):
            _in_range(name, getattr(self, name), f"answering.{name}")


@dataclass
class CorpusRecord:
    """``corpus``: where the passages come from and how they were chunked."""

    source: str
    chunking: str
    chunk_size: int
    chunk_overlap: int
    passages: int | None = None
    fingerprint: str | None = None
    source_sha256: str | None = None
    fields: dict[str, str] | None = None  # data.corpus_fields: the file's column for each passage field (docs/data.md)

    def __post_init__(self) -> None:
        _in_range("chunk_size", self.chunk_size, "corpus.chunk_size")
        _in_range("chunk_overlap", self.chunk_overlap, "corpus.chunk_overlap")
        _sha256_or_none(self.source_sha256, "corpus.source_sha256")
        if self.fields is not None and not all(isinstance(v, str) for v in [*self.fields, *self.fields.values()]):
            raise ValueError("'corpus.fields' must map field names to column names (strings)")


@dataclass
class FeatureRecord:
    """One entry of ``features``: a decision feature as the collection described it."""

    name: str
    requires_gold: bool
    version: str | int | None = None
    category: str | None = None
    orientation: float | None = None
    stats: list[str] | None = None
    params: dict | None = None
    package: dict | None = None  # a plugin feature's package (name, version): checked when the runtime loads it


@dataclass
class StatsBlock:
    """``stats``: how the features were collected (``settings`` is checked by StatSettings when it is read)."""

    settings: dict | None = None
    prompts: str | None = None
    prompt_groups: dict | None = None
    nli_judge: str | None = None
    attention_logdiag_scope: str | None = None
    generator: str | None = None

    def __post_init__(self) -> None:
        from workbench.uncertainty.stat_settings import StatSettings

        for group, digest in (self.prompt_groups or {}).items():
            if not isinstance(digest, str):
                raise ValueError(f"'stats.prompt_groups.{group}' must be a string, got {digest!r}")
        if self.settings is not None:  # the settings the runtime computes features with: typed and bounded now
            try:
                StatSettings.from_dict(self.settings, "stats.settings")
            except ConfigError as exc:
                raise ValueError(f"'stats.settings': {exc.what}") from None


@dataclass
class DecisionFiles:
    """``decision.files``: the learned files of the decision, each a key of the manifest's ``files`` (``ood``: the
    fit split's OOD profile, docs/ood.md; absent from bundles exported before it)."""

    calibrators: str
    classifier: str
    classifier_onnx: str
    lars: str | None = None
    ood: str | None = None


@dataclass
class DecisionBlock:
    """``decision``: D²-RAG's stage 1 (retrieve iff P(correct) < τ)."""

    features: list[str]
    classifier: Literal["logistic", "mlp", "knn", "tree"]
    tau: float
    files: DecisionFiles
    rule: str = ""
    always_retrieve: bool | None = None
    calibrator: str | None = None
    label: str | None = None

    def __post_init__(self) -> None:
        from workbench.classify.threshold import ABOVE_ONE

        if not self.features or len(set(self.features)) != len(self.features):
            raise ValueError(f"'decision.features' must be distinct names, at least one, got {self.features}")
        if not (math.isfinite(self.tau) and 0.0 <= self.tau <= ABOVE_ONE):
            raise ValueError(f"'decision.tau' must be in [0, 1] (or 1 + ε: always retrieve), got {self.tau}")
        if ("lars" in self.features) != (self.files.lars is not None):
            raise ValueError("'decision.files.lars' must be given exactly when 'lars' is a decision feature")


@dataclass
class UtilityBlock:
    """``utility``: D²-RAG's gold-free utility — a learned predictor (``file``) or none."""

    kind: Literal["learned", "none"]
    file: str | None = None
    label: str | None = None
    model: str | None = None
    meaning: str | None = None

    def __post_init__(self) -> None:
        if (self.kind == "learned") != (self.file is not None):
            raise ValueError("'utility.file' must be given exactly when 'utility.kind' is 'learned'")


@dataclass
class AdapterBlock:
    """``controller_adapter``: the distilled InSemRAG controller's adapter file."""

    file: str
    kind: str


@dataclass
class QuestionsRecord:
    """One record of ``provenance.fitted`` (a shipped part or parameter: ``set_by``) or ``provenance.held_out`` (a
    held-out figure: ``measured_by``): the split, how many questions (or articles, ``unit``) and the sha256 of their
    sorted ids (:mod:`workbench.bundle.provenance`); ``split`` None: fitted on nothing (a user's choice, a default)."""

    split: str | None = None
    questions: int | None = None
    ids_sha256: str | None = None
    set_by: str | None = None
    measured_by: str | None = None
    unit: Literal["questions", "articles"] = "questions"
    source: str | None = None
    out_of_fold: bool = False

    def __post_init__(self) -> None:
        _sha256_or_none(self.ids_sha256, "provenance.*.ids_sha256")
        if self.questions is not None and self.questions < 0:
            raise ValueError(f"'provenance.*.questions' must be >= 0, got {self.questions}")
        if (self.set_by is None) == (self.measured_by is None):
            raise ValueError("a provenance record names exactly one of 'set_by' and 'measured_by'")


@dataclass
class ProvenanceBlock:
    """``provenance`` (since 1.3; docs/bundles.md): per shipped part and parameter what it was fitted on and who set
    it (``fitted``), per held-out figure what it was measured on (``held_out``), and per method the digest of the
    decision parameters evaluate ran and the bundle ships (``evaluated``)."""

    fitted: dict = field(default_factory=dict)
    held_out: dict = field(default_factory=dict)
    evaluated: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = {f.name for f in dataclasses.fields(QuestionsRecord)}
        for group in ("fitted", "held_out"):
            for name, entry in getattr(self, group).items():
                if not isinstance(entry, dict):
                    raise ValueError(f"'provenance.{group}.{name}' must be a mapping")
                entry = {k: v for k, v in entry.items() if k in known}  # a later minor's keys are ignored
                build_dataclass(QuestionsRecord, entry, LocatedYAML(entry, {}, ""), ("provenance", group, name))
        for method, digest in self.evaluated.items():
            _sha256_or_none(digest if isinstance(digest, str) else repr(digest), f"provenance.evaluated.{method}")


@dataclass
class ProbeHitsRecord:
    """One probe query of ``external_retriever.fingerprint.probes`` and its hits at export (ids, scores)."""

    query: str
    ids: list[str]
    scores: list[float]

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.scores) or not all(math.isfinite(s) for s in self.scores):
            raise ValueError("'external_retriever.fingerprint.probes' needs one finite score per id")


@dataclass
class EngineFingerprintRecord:
    """``external_retriever.fingerprint``: the engine's document count and the top ``k`` hits of each probe query
    (:mod:`workbench.bundle.external`)."""

    documents: int | None  # None: the engine cannot say (a retriever server other than serve-retriever)
    k: int
    probes: list[ProbeHitsRecord]

    def __post_init__(self) -> None:
        if self.documents is not None and self.documents < 0:
            raise ValueError("'external_retriever.fingerprint.documents' must be >= 0")
        _in_range("k", self.k, "external_retriever.fingerprint.k")
        if not self.probes or len(self.probes) > 100:
            raise ValueError("'external_retriever.fingerprint.probes' must hold 1 to 100 probe queries")


ENGINE_LIMITS = {
    "timeout_s": (0.001, 3600.0),
    "retries": (0, 100),
    "backoff_s": (0.0, 600.0),
    "max_concurrency": (1, 1024),
}
"""Inclusive bounds of ``external_retriever.connection``'s request limits (a crafted value cannot make the runtime
wait or retry without end)."""

RECORDED_CONNECTION = ("uri", "index", "channel", "fields", "credentials_env", *ENGINE_LIMITS)
"""The :class:`~workbench.backends.retrieval_engines.Connection` fields a bundle records (not ``batch_size``: it is
for writing an index)."""


@dataclass
class ExternalRetrieverBlock:
    """``external_retriever`` (schema 1.5): the user's engine the bundle retrieves from — ``backend``, its
    ``connection`` (the :data:`RECORDED_CONNECTION` fields of a
    :class:`~workbench.backends.retrieval_engines.Connection`: the URI without credentials, ``credentials_env`` the
    NAME of the variable holding them), what to do when it fails at run time (``on_failure``) and the fingerprint of
    its index at export (docs/bundles.md, docs/retrieval.md)."""

    backend: str
    connection: dict
    fingerprint: EngineFingerprintRecord
    on_failure: Literal["error", "closed_book"] = "error"

    def __post_init__(self) -> None:
        from workbench.backends.retrieval_engines import ENGINES, check_fields

        spec = ENGINES.get(self.backend)
        if spec is None or not spec.external:
            external = ", ".join(name for name, s in ENGINES.items() if s.external)
            raise ValueError(f"'external_retriever.backend' must be one of {external}")
        where = "external_retriever.connection"
        conn = self.connection
        for name in ("uri", "index", "channel"):
            if not isinstance(conn.get(name), str) or not conn[name]:
                raise ValueError(f"'{where}.{name}' must be a non-empty string")
        if conn["channel"] not in spec.channels:
            raise ValueError(f"'{where}.channel': {self.backend} has no {conn['channel']} channel")
        if not isinstance(conn.get("credentials_env"), str | None):
            raise ValueError(f"'{where}.credentials_env' must be a variable name or null")
        try:
            check_fields(conn.get("fields") or {}, f"{where}.fields")
        except ConfigError as exc:
            raise ValueError(f"'{exc.where}': {exc.what}") from None
        for name, (low, high) in ENGINE_LIMITS.items():
            value = conn.get(name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
                raise ValueError(f"'{where}.{name}' must be a number between {low} and {high}, got {value!r}")


@dataclass
class IdentityBlock:
    """``identity`` (schema 1.3): the bundle's ``name`` and ``version`` again, inside the content digest, so neither
    can be edited without re-hashing (a bundle cannot load as ``official-prod 9.9.9`` by an edit of two fields)."""

    name: str
    version: str


@dataclass
class MethodRecord:
    """One entry of ``methods`` (its options are checked by the method's own settings, :func:`check_manifest`);
    ``package``: the distribution that provides a third-party method (absent for the workbench's own)."""

    options: dict = field(default_factory=dict)
    requires_gold: bool = False
    package: str | None = None


@dataclass
class MonitoringBlock:
    """``monitoring`` (schema 1.6): the reference distributions drift monitoring compares served answers with
    (``file``, :mod:`workbench.monitoring.reference`), from the run's ``split`` of ``rows`` questions."""

    file: str
    split: str | None = None
    rows: int | None = None

    def __post_init__(self) -> None:
        if self.rows is not None and self.rows < 0:
            raise ValueError(f"'monitoring.rows' must be >= 0, got {self.rows}")


@dataclass
class RecalibrationBlock:
    """``recalibration`` (schema 1.7): this version's calibrators were refitted from labelled feedback by
    ``workbench recalibrate`` (:mod:`workbench.recalibration`): the ``parent`` version they replace, the feedback
    file's ``feedback_sha256`` and row counts, the held-out fraction and ``seed`` of the split, whether the refit was
    ``forced`` past a worse held-out comparison, what was ``refitted`` (``calibrators``, and ``tau`` / ``router``
    when asked), and ``metrics``: before / after AUROC and ECE on the held-out feedback with their intervals (and the
    retrieval rate and routed quality of both decisions, ``metrics.routing``)."""

    parent: str
    feedback_sha256: str
    feedback_rows: int
    fit_rows: int
    holdout_rows: int
    holdout: float
    seed: int
    forced: bool
    metrics: dict
    refitted: list = field(default_factory=lambda: ["calibrators"])

    def __post_init__(self) -> None:
        parse_semver(self.parent, "recalibration.parent")
        known = ("calibrators", "tau", "router")
        if "calibrators" not in self.refitted or any(r not in known for r in self.refitted):
            raise ValueError("'recalibration.refitted' must list calibrators and, optionally, tau and router")
        _sha256_or_none(self.feedback_sha256, "recalibration.feedback_sha256")
        for name in ("feedback_rows", "fit_rows", "holdout_rows"):
            if getattr(self, name) < 0:
                raise ValueError(f"'recalibration.{name}' must be >= 0, got {getattr(self, name)}")
        if not 0.0 < self.holdout < 1.0:
            raise ValueError(f"'recalibration.holdout' must be between 0 and 1, got {self.holdout}")


@dataclass
class FileRecord:
    """One entry of ``files``."""

    sha256: str
    size: int

    def __post_init__(self) -> None:
        _sha256_or_none(self.sha256, "files.*.sha256")
        if self.size < 0:
            raise ValueError(f"'files.*.size' must be >= 0, got {self.size}")


@dataclass
class Manifest:
    """The whole manifest (``format`` and ``schema_version`` are checked first, by the schema module)."""

    format: str
    schema_version: str
    name: str
    version: str
    content_sha256: str
    seed: int
    corpus: CorpusRecord
    models: ModelsBlock
    answering: AnsweringBlock
    features: list[FeatureRecord]
    methods: dict
    files: dict
    created: str = ""
    workbench: dict | None = None
    recipe: dict | None = None
    data: dict | None = None
    stats: StatsBlock | None = None
    decision: DecisionBlock | None = None
    utility: UtilityBlock | None = None
    controller_adapter: AdapterBlock | None = None
    identity: IdentityBlock | None = None
    external_retriever: ExternalRetrieverBlock | None = None
    monitoring: MonitoringBlock | None = None
    recalibration: RecalibrationBlock | None = None
    metrics: dict | None = None
    provenance: ProvenanceBlock | None = None
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        _in_range("seed", self.seed, "seed")
        _sha256_or_none(self.content_sha256, "content_sha256")
        check_name(self.name, "name")
        parse_semver(self.version, "version")
        if not self.methods:
            raise ValueError("'methods' must name at least one method")
        in_process = self.answering.retriever in ("bm25", "dense", "hybrid")
        engine = self.external_retriever
        if not in_process and (engine is None or engine.backend != self.answering.retriever):
            raise ValueError(f"'answering.retriever' {self.answering.retriever} needs its 'external_retriever' block")
        if in_process and engine is not None:
            raise ValueError("'external_retriever' with an in-process 'answering.retriever'")


MAPPING_OF: dict[str, type] = {"methods": MethodRecord, "files": FileRecord}
"""Top-level mappings whose every value is a block of this type."""


def _dataclass_of(tp: Any) -> type | None:
    """The dataclass inside ``tp`` (``X``, ``X | None``), else None."""
    if dataclasses.is_dataclass(tp):
        return tp
    if get_origin(tp) in (typing.Union, types.UnionType):
        found = [a for a in get_args(tp) if dataclasses.is_dataclass(a)]
        return found[0] if len(found) == 1 else None
    return None


def _known_only(cls: type, data: dict[str, Any], path: str, unknown: list[str]) -> dict[str, Any]:
    """``data`` without the keys ``cls`` (recursively) does not declare; their dotted names go to ``unknown``."""
    every = typing.get_type_hints(cls)
    hints = {f.name: every[f.name] for f in dataclasses.fields(cls)}  # fields only: a ClassVar is no manifest key
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key not in hints:
            unknown.append(f"{path}{key}")
            continue
        inner = _dataclass_of(hints[key])
        if inner is None and get_origin(hints[key]) is list:
            (item,) = get_args(hints[key])
            if dataclasses.is_dataclass(item) and isinstance(value, list):
                value = [_known_only(item, v, f"{path}{key}[].", unknown) if isinstance(v, dict) else v for v in value]
        elif inner is not None and isinstance(value, dict):
            value = _known_only(inner, value, f"{path}{key}.", unknown)
        out[key] = value
    return out


def _build(cls: type, data: Any, path: str, where: str, unknown: list[str]) -> Any:
    if not isinstance(data, dict):
        raise DataError(f"'{path.rstrip('.') or 'manifest'}' must be a mapping, got {type(data).__name__}", where)
    known = _known_only(cls, data, path, unknown)
    try:
        return build_dataclass(cls, known, LocatedYAML(known, {}, where), tuple(p for p in path.split(".") if p))
    except ConfigError as exc:
        raise DataError(exc.what, where) from None


def check_manifest(manifest: Any, where: str, *, method_options: bool = True) -> list[str]:
    """Validate a parsed manifest against the schema (see the module docstring); returns notes naming the fields this
    workbench does not know. DataError (one line naming the field) on a missing, mistyped or out-of-range value.

    ``method_options=False`` leaves out the methods' options (each method's settings class): for a manifest that
    :func:`~workbench.bundle.integrity.parse_manifest` already accepted, so a bundle's options are validated once when
    it is opened (the runtime configures them again only with the caller's overrides laid over, a new source)."""
    unknown: list[str] = []
    parsed = _build(Manifest, manifest, "", where, unknown)
    for key, cls in MAPPING_OF.items():
        for name, entry in getattr(parsed, key).items():
            _build(cls, entry, f"{key}.{name}.", where, unknown)
    if method_options:
        _check_method_options(parsed.methods, where)
    notes = _check_identity(parsed, manifest, where)
    if unknown:
        shown = ", ".join(sorted(unknown)[:8]) + (" …" if len(unknown) > 8 else "")
        notes.append(f"manifest field(s) unknown to this workbench were ignored: {shown}")
    return notes


def _check_identity(parsed: Manifest, manifest: dict[str, Any], where: str) -> list[str]:
    """Refuse a ``name`` or ``version`` other than the ``identity`` block's (required from schema 1.3 on); a note for
    an older manifest, whose name and version nothing covers."""

    identity = parsed.identity
    if identity is None:
        if schema_minor(manifest) >= IDENTITY_MINOR:
            raise DataError(f"missing 'identity' (required since schema 1.{IDENTITY_MINOR})", where)
        return [
            f"name and version are not covered by the content digest (schema {manifest['schema_version']}, before "
            f"1.{IDENTITY_MINOR}): nothing verifies them; re-export the run to seal them"
        ]
    for key in ("name", "version"):
        if getattr(identity, key) != getattr(parsed, key):
            raise DataError(
                f"'{key}' differs from 'identity.{key}', which the content digest covers: edited after export", where
            )
    return []


def _check_method_options(methods: dict[str, Any], where: str) -> None:
    """Each known method's options checked by their owner (:func:`workbench.methods.registry.check_options`: the
    method's settings class — types, choices and bounds), as a recipe's are; one line naming
    ``methods.<name>.options.<key>``. A method this workbench does not know is the runtime's to refuse."""
    from workbench.methods.registry import METHOD_TABLE, check_options

    for name, record in methods.items():
        if name not in METHOD_TABLE:
            continue
        try:
            check_options([name], {name: record.get("options") or {}})
        except ConfigError as exc:
            key = str(exc.where or "").removeprefix(f"evaluate.options.{name}").lstrip(".")
            field = f"methods.{name}.options" + (f".{key}" if key else "")
            raise DataError(f"'{field}': {exc.what}", where) from None


def referenced_files(manifest: dict[str, Any]) -> list[tuple[str, Any]]:
    """``(field, value)`` of every manifest field that names a bundle file (the learned files the runtime reads).

    A field added by a later schema that names a file belongs here too: the loader refuses any of these whose value is
    not a key of ``files`` (:func:`~workbench.bundle.integrity.verify_bundle_dir`)."""
    out: list[tuple[str, Any]] = []
    decision = manifest.get("decision")
    if isinstance(decision, dict) and isinstance(decision.get("files"), dict):
        out += [(f"decision.files.{key}", value) for key, value in decision["files"].items() if value is not None]
    utility = manifest.get("utility")
    if isinstance(utility, dict) and utility.get("file") is not None:
        out.append(("utility.file", utility["file"]))
    adapter = manifest.get("controller_adapter")
    if isinstance(adapter, dict):
        out.append(("controller_adapter.file", adapter.get("file")))
    monitoring = manifest.get("monitoring")
    if isinstance(monitoring, dict):
        out.append(("monitoring.file", monitoring.get("file")))
    return out


def content_digest(manifest: dict[str, Any], files: dict[str, Any]) -> str:
    """``content_sha256``: a digest of every manifest field outside :data:`DIGEST_EXCLUDES` (``identity`` included:
    the name and version) and of every file's record but the model card's."""
    body = {k: v for k, v in manifest.items() if k not in DIGEST_EXCLUDES}
    return stable_hash([body, {k: v for k, v in files.items() if k != CARD}], length=64)


def unversioned_digest(manifest: dict[str, Any], files: dict[str, Any]) -> str:
    """The content digest without ``identity``: what two exports of the same content share whatever their version
    (how the exporter tells an unchanged run, :func:`~workbench.bundle.export.export_run`)."""
    return content_digest({k: v for k, v in manifest.items() if k != "identity"}, files)


def seal(manifest: dict[str, Any], files: dict[str, Any]) -> dict[str, Any]:
    """``manifest`` with its ``identity`` (its name and version) and ``content_sha256`` set over ``files``."""
    manifest["identity"] = {"name": manifest["name"], "version": manifest["version"]}
    manifest["content_sha256"] = content_digest(manifest, files)
    return manifest


def check_content_digest(manifest: dict[str, Any], where: str) -> None:
    """Recompute ``content_sha256`` and refuse a manifest whose content no longer matches it (an edited field)."""
    if content_digest(manifest, manifest["files"]) != manifest["content_sha256"]:
        raise DataError(
            "content_sha256 does not match the manifest's content: a field the runtime reads was edited after export",
            where,
        )
