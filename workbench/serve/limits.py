"""The API's request limits and scheduling (:class:`ServeLimits`), checked when the server is set up."""

import math
from dataclasses import dataclass

from workbench.core.errors import ConfigError


@dataclass(frozen=True)
class ServeLimits:
    """Request limits and scheduling of the API; each count must be an integer >= 1 and ``timeout_s`` a number > 0
    (else a one-line :class:`ConfigError`).

    ``max_batch``: most questions in one ``POST /answer``; ``max_body_bytes``: largest request body (413 beyond);
    ``max_question_chars`` / ``max_question_tokens``: longest question in characters / in the generator's tokens
    (422 beyond); ``max_queue``: most questions waiting to be answered, over all requests (503 beyond; at least
    ``max_batch``, so any valid request can be queued); ``max_batch_questions``: most questions answered in one
    ``answer_many`` call across requests (the runtime's batch size is a good value); ``timeout_s``: seconds from a
    request's arrival to its answer (504 beyond; work not started by then is dropped, a running batch of requests all
    past it interrupted).
    """

    max_batch: int = 32
    max_body_bytes: int = 65536
    max_question_chars: int = 2000
    max_question_tokens: int = 256
    max_queue: int = 128
    max_batch_questions: int = 8
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        counts = (
            "max_batch",
            "max_body_bytes",
            "max_question_chars",
            "max_question_tokens",
            "max_queue",
            "max_batch_questions",
        )
        for name in counts:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}", f"serve.{name}")
        timeout = self.timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not (0 < timeout < math.inf):
            raise ConfigError(f"timeout_s must be a number of seconds > 0, got {timeout!r}", "serve.timeout_s")
        if self.max_queue < self.max_batch:
            raise ConfigError(
                f"max_queue ({self.max_queue}) must be >= max_batch ({self.max_batch}): a full request could never "
                "be queued",
                "serve.max_queue",
            )


DEFAULT_LIMITS = ServeLimits()
"""The limits :func:`~workbench.serve.app.create_app` and :func:`~workbench.serve.app.run_server` take by default."""
