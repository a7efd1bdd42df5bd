"""The OpenAI-compatible routes over a bundle: ``GET /v1/models``, ``GET /v1/models/{model}`` and
``POST /v1/chat/completions`` (one model per method; the request and answer shapes are in
:mod:`workbench.serve.openai_bundle`; ``stream: true`` sends the whole answer as server-sent events)."""

# No ``from __future__ import annotations``: FastAPI and pydantic read the annotations as objects.

import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

import workbench.serve.openai_bundle as oai
from workbench.runtime.questions import is_blank
from workbench.serve.answering import ServeContext, answer_record, json_safe
from workbench.serve.http_errors import v1_error_response
from workbench.serve.openai_stream import event_stream


def add_chat_routes(app: FastAPI, ctx: ServeContext) -> None:
    """Add ``GET /v1/models``, ``GET /v1/models/{model}`` and ``POST /v1/chat/completions`` to ``app``: one model per
    method, answered on the same scheduler and limits as ``POST /answer``."""

    def model_cards() -> dict[str, dict[str, Any]]:
        created = oai.created_at(ctx.runtime.info().get("created"), ctx.started)  # the bundle's export time
        return {m: oai.model_card(m, owned_by=ctx.runtime.name, created=created) for m in ctx.methods}

    @app.get("/v1/models", response_model=oai.ModelList, summary="OpenAI: one model per method of the bundle")
    async def v1_models() -> dict[str, Any]:
        return {"object": "list", "data": list(model_cards().values())}

    @app.get("/v1/models/{model}", response_model=oai.ModelCard, responses=oai.RESPONSES, summary="OpenAI: one model")
    async def v1_model(model: str) -> Response:
        card = model_cards().get(model)
        if card is None:
            refusal = oai.unknown_model(model, ctx.methods)
            return v1_error_response(404, refusal.message, param=refusal.param, code=refusal.code)
        return JSONResponse(card)

    @app.post(
        "/v1/chat/completions",
        response_model=oai.ChatCompletion,
        responses={**oai.RESPONSES, 200: oai.STREAMED_RESPONSE},
        summary="OpenAI: answer the last user message with the method named by `model`",
    )
    async def chat_completions(body: oai.ChatCompletionRequest, request: Request) -> Response:
        deadline = time.monotonic() + ctx.limits.timeout_s
        try:
            index, question = oai.chat_question(body, ctx.methods, ctx.limits.max_question_chars, is_blank)
        except oai.ChatError as exc:
            return v1_error_response(exc.status, exc.message, param=exc.param, code=exc.code)
        where = f"messages[{index}].content"

        def chat_error(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
            return v1_error_response(
                status, detail, headers, param=where if status == 422 else None
            )  # 422: the question

        outcome = await ctx.answered([question], [where], body.model, request, deadline, chat_error)
        if not isinstance(outcome, list):
            return outcome
        record = answer_record(outcome[0], traces=False)
        answer = json_safe(oai.completion_body(record, bundle=ctx.runtime.name, version=ctx.runtime.version))
        if body.stream:
            usage = bool(body.stream_options and body.stream_options.include_usage)
            return event_stream(oai.streamed_chunks(answer, usage))
        return JSONResponse(answer)
