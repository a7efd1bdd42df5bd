"""The bodies of ``GET /health``, ``GET /ready``, ``GET /methods`` and ``POST /answer`` as pydantic models (their
OpenAPI schema), the ``POST /answer`` request model built per app from its limits and methods, and the OOD tally
``/health`` reports."""

# No ``from __future__ import annotations``: FastAPI and pydantic read the annotations as objects.

import enum
import threading
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    create_model,
    field_validator,
    model_validator,
)

from workbench.runtime.questions import is_blank
from workbench.serve.limits import ServeLimits


class ErrorBody(BaseModel):
    """Every error response: one line saying what is wrong."""

    detail: str


class RetrieverHealth(BaseModel):
    """A bundle's external retriever in ``GET /health`` (:meth:`workbench.runtime.Runtime.retriever_status`)."""

    backend: str
    uri: str
    index: str
    on_failure: str
    reachable: bool | None
    error: str | None
    last_error: str | None
    fingerprint: str | None


class QueueInfo(BaseModel):
    """The answer queue: questions waiting and being answered, the limit, and counts since start (``interrupted``:
    batches stopped while running because every client left, or at shutdown)."""

    queued: int
    queued_requests: int
    running: int
    limit: int
    batches: int
    answered: int
    dropped: int
    interrupted: int


class OODCounts(BaseModel):
    """Answers computed since start that were checked for being out of distribution (docs/ood.md: the bundle has an
    OOD profile), how many were ``flagged``, and what the flag did: ``reported`` (only in the answer), ``retrieved``
    (D²-RAG retrieved because of it) or ``refused`` (no answer)."""

    checked: int
    flagged: int
    reported: int
    retrieved: int
    refused: int


class OODTally:
    """Thread-safe :class:`OODCounts` of the answers' ``ood`` blocks: the answering worker adds, ``/health`` reads."""

    ACTIONS = ("reported", "retrieved", "refused")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(("checked", "flagged", *self.ACTIONS), 0)

    def add(self, answers: Sequence[Any]) -> None:
        """Count each answer's ``ood`` block (``{"flag", "checks", "action"}``; None: not checked)."""
        with self._lock:
            for answer in answers:
                ood = getattr(answer, "ood", None)
                if not isinstance(ood, dict):
                    continue
                self._counts["checked"] += 1
                self._counts["flagged"] += bool(ood.get("flag"))
                if ood.get("action") in self.ACTIONS:
                    self._counts[ood["action"]] += 1

    def counts(self) -> dict[str, int]:
        """The :class:`OODCounts` fields, since start."""
        with self._lock:
            return dict(self._counts)


class HealthBody(BaseModel):
    """``GET /health``: liveness (the process answers), whether it is ``ready`` (``GET /ready``), the bundle, the
    queue and the OOD counts."""

    status: str = "ok"
    ready: bool
    bundle: str
    version: str
    methods: list[str]
    queue: QueueInfo
    ood: OODCounts
    retriever: RetrieverHealth | None = None


class ReadyBody(BaseModel):
    """``GET /ready`` once the server is warm: every method's models loaded and one warm-up answer run with each
    (``warm_up_s``: how long that took; 0 with ``serve --lazy``, which warms nothing)."""

    status: Literal["ready"] = "ready"
    warm_up_s: float


class MethodInfo(BaseModel):
    """One method of the bundle with its settings."""

    name: str
    default: bool
    options: dict[str, Any]


class MethodsBody(BaseModel):
    """``GET /methods``: the methods, the default one, and the bundle's retrieval decision (or null) as its manifest
    records it (the runtime's ``info()``: :func:`workbench.bundle.shipped.decision_view` — rule, features, τ and who
    set it, α, the held-out figures at that τ, and the one-line ``summary`` every reader prints)."""

    bundle: str
    version: str
    default: str
    methods: list[MethodInfo]
    decision: dict[str, Any] | None


class OODInfo(BaseModel):
    """An answer's out-of-distribution check (docs/ood.md): ``flag``, the failed ``checks`` and what the flag did
    (``action``: null, ``reported``, ``retrieved`` or ``refused``)."""

    flag: bool
    checks: list[str]
    action: Literal["reported", "retrieved", "refused"] | None = None


class PassageRef(BaseModel):
    """A passage that reached the final prompt."""

    id: str = Field(description="The chunk id in the bundle's corpus: `<doc_id>#<chunk index>`.")
    title: str | None = Field(description="The title of the passage's document (null when the corpus has none).")


class AnswerRecord(BaseModel):
    """One answer and how it was reached: ``RuntimeAnswer.to_dict()`` (docs/bundles.md), every field typed.
    ``create_app`` narrows ``method`` to the enum of the served bundle's methods."""

    question: str = Field(description="The question, as asked.")
    method: str = Field(description="The method that answered.")
    text: str = Field(description='The answer ("" when the question was refused as out of distribution).')
    retrieved: bool = Field(description="Whether retrieved text reached the final prompt.")
    decoding: str = Field(
        description="How the answer was decoded: `greedy`, `contrastive` (D²-RAG's utility-aware contrastive "
        "decoding) or `none` (refused, nothing generated)."
    )
    passages: list[PassageRef] = Field(description="The passages in the final prompt, in prompt order.")
    p_correct: float | None = Field(
        None, description="D²-RAG: calibrated P(the closed-book answer is correct); null for other methods."
    )
    tau: float | None = Field(None, description="D²-RAG: the threshold; it retrieves when p_correct < tau.")
    features: dict[str, float | None] | None = Field(
        None, description="D²-RAG: the raw uncertainty features of the decision (null: not finite / other methods)."
    )
    calibrated: dict[str, float] | None = Field(None, description="D²-RAG: the same features after calibration.")
    utility_class: Literal["closed", "relevant", "neutral", "noisy"] | None = Field(
        None, description="D²-RAG: the retrieved context's utility class, which picks the decoding mode."
    )
    ood: OODInfo | None = Field(None, description="The out-of-distribution check; null when the bundle has none.")
    lm_calls: float = Field(description="Prompts run through the model for this answer (a batch's share).")
    prompt_tokens: float = Field(description="Prompt tokens (prefill) spent on this answer (may be a fraction).")
    generated_tokens: float = Field(description="Tokens decoded for this answer (may be a fraction).")
    tokens: float = Field(description="prompt_tokens + generated_tokens.")
    nli_pairs: float = Field(description="Pairs judged by the NLI / equivalence judge.")
    retrieval_calls: float = Field(description="Retriever queries.")
    latency_s: float = Field(description="Wall time of the answer's steps in seconds (a shared step: its share).")
    fallbacks: int = Field(description="Recovered failures (a step that fell back to a simpler one).")
    notes: list[str] = Field(description="Recovered failures and departures from the bundle, one line each.")
    trace: dict[str, Any] | None = Field(
        None, description="Every step with its decisions and cost; present only when the request set `traces`."
    )


class AnswerBody(BaseModel):
    """``POST /answer``: one answer per question, in order. ``create_app`` narrows ``method`` to the enum of the
    served bundle's methods."""

    bundle: str = Field(description="The bundle's name.")
    version: str = Field(description="The bundle's version.")
    method: str = Field(description="The method that answered every question of the request.")
    answers: list[AnswerRecord] = Field(description="One answer per question, in the order asked.")


def method_enum(methods: Sequence[str]) -> type[enum.Enum]:
    """``Method``: a string enum of the served bundle's methods (its values are the method names), so the OpenAPI
    schema lists them and generated clients get a real type."""
    members = [(m if m.isidentifier() and not m.startswith("_") else f"method_{i}", m) for i, m in enumerate(methods)]
    return enum.Enum("Method", members, type=str)


def typed_answers(method_type: type[enum.Enum]) -> type[BaseModel]:
    """:class:`AnswerBody` (and its :class:`AnswerRecord`) with ``method`` typed as ``method_type``. Documentation
    only: the endpoint sends ``RuntimeAnswer.to_dict()`` as JSON, unchanged."""
    description = AnswerRecord.model_fields["method"].description
    record = create_model(
        "AnswerRecord",
        __base__=AnswerRecord,
        __doc__=AnswerRecord.__doc__,
        method=(method_type, Field(description=description)),
    )
    return create_model(
        "AnswerBody",
        __base__=AnswerBody,
        __doc__=AnswerBody.__doc__,
        method=(method_type, Field(description=AnswerBody.model_fields["method"].description)),
        answers=(list[record], Field(description=AnswerBody.model_fields["answers"].description)),
    )


def not_blank(value: str) -> str:
    # a lone surrogate never gets here: pydantic refuses it as "not a valid string" (no tokenizer would take it)
    if is_blank(value):
        raise ValueError("must not be blank (it has no visible character)")
    return value


def request_model(
    limits: ServeLimits, methods: Sequence[str], method_type: type[enum.Enum] | None = None
) -> type[BaseModel]:
    """The ``POST /answer`` body, its constraints taken from ``limits``; ``method`` an enum of ``methods``
    (``method_type``, made by :func:`method_enum` when not given)."""
    method_type = method_type or method_enum(methods)
    by_value = {member.value: member for member in method_type}
    question_type = Annotated[
        str, StringConstraints(min_length=1, max_length=limits.max_question_chars), AfterValidator(not_blank)
    ]
    known = ", ".join(methods)

    class AnswerRequest(BaseModel):
        """Exactly one of ``question`` / ``questions``; ``method`` defaults to the bundle's default method.

        Unknown fields are refused (a gold ``answers`` field must never reach a method).
        """

        # strict: no silent coercion ("traces": "no" is an error, not True)
        model_config = ConfigDict(
            extra="forbid",
            strict=True,
            json_schema_extra={
                "examples": [
                    {"question": "Who wrote The Old Man and the Sea?"},
                    {"questions": ["What is the capital of Peru?", "When did Apollo 11 land?"], "traces": False},
                ]
            },
        )

        question: question_type | None = Field(None, description="One question.")
        questions: list[question_type] | None = Field(
            None, min_length=1, max_length=limits.max_batch, description=f"1 to {limits.max_batch} questions."
        )
        method: method_type | None = Field(  # type: ignore[valid-type]
            None, description=f"The method that answers (one of: {known}); null: the bundle's default."
        )
        traces: bool = Field(False, description="Include each answer's full step-by-step trace.")
        on_ood: Literal["flag", "retrieve", "refuse"] | None = Field(
            None,
            description="What an out-of-distribution flag does: flag (only report it in the answer's `ood`), retrieve "
            "(D²-RAG retrieves), refuse (no answer); null: the server's setting (docs/ood.md).",
        )

        @field_validator("method", mode="before")
        @classmethod
        def _known_method(cls, value: Any) -> Any:
            # a method name (JSON has no enum type) becomes its member; an unknown name is refused in one line
            if isinstance(value, str):
                if value not in by_value:
                    raise ValueError(f"unknown method {value!r}; this bundle has: {known}")
                return by_value[value]
            return value

        @model_validator(mode="after")
        def _exactly_one(self) -> "AnswerRequest":
            if (self.question is None) == (self.questions is None):
                raise ValueError("give exactly one of 'question' or 'questions'")
            return self

    return AnswerRequest
