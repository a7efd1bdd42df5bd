"""A pure-ASGI request-body size limit that answers 413 with a JSON body.

Starlette's own ``max_body_size`` answers some refusals in plain text (when the app answered without reading the
body), so the server keeps its own small middleware: every error the API sends is ``{"detail": "<one line>"}``.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

DRAIN_LIMIT = 32 << 20
"""A body declared over the limit but at most this many bytes is read (and discarded) before the 413 goes out."""


class BodySizeLimit:
    """Refuse HTTP request bodies larger than ``max_bytes`` with ``413 {"detail": ...}`` and ``Connection: close``.

    A ``Content-Length`` over the limit is refused without holding its body: up to :data:`DRAIN_LIMIT` bytes the body
    is read and discarded first, because most clients send the whole body before they read an answer, and a server
    that closes the connection on unread data makes the client's system reset it — the client saw "connection reset"
    instead of the 413 (urllib, curl, requests; a 9 MB body against ``serve``'s 64 KB limit); a larger declared body
    is refused at once. Any other body (a chunked one, or a ``Content-Length`` within the limit) is read here, chunk
    by chunk, and refused as soon as it grows past the limit: at most ``max_bytes`` plus one server-sized chunk is
    ever held. A body within the limit is replayed to the app as a single ``http.request`` message. Non-HTTP scopes
    (lifespan) pass straight through.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            if declared <= DRAIN_LIMIT and not await _drained(receive):
                return  # the client left while sending
            await self._refuse(send, f"request body of {declared} bytes exceeds the {self.max_bytes}-byte limit")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left: nobody to answer
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                # Stop reading: the rest of the body is never pulled off the socket (the server's flow control
                # pauses it), and the connection is closed after the answer.
                await self._refuse(send, f"request body exceeds the {self.max_bytes}-byte limit")
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break

        replayed = False

        async def replay() -> Message:
            # The whole (bounded) body once, then the real channel: later calls wait for http.disconnect.
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _refuse(send: Send, detail: str) -> None:
        payload = json.dumps({"detail": detail}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            (b"connection", b"close"),  # the unread rest of the body must not be parsed as a next request
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": payload, "more_body": False})


async def _drained(receive: Receive) -> bool:
    """Read the request body to its end, keeping nothing; False when the client disconnected first."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return False
        if not message.get("more_body", False):
            return True


def _content_length(scope: Scope) -> int | None:
    """The declared Content-Length, or None when absent or unparsable (the server's parser rejects malformed ones)."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
