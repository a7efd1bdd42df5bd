"""Run an ASGI app with uvicorn, announcing its URL once bound and stopping promptly: shared by ``serve`` and
``serve-model`` (neither has authentication: binding another interface than localhost logs a warning).

**Shutdown** (SIGTERM, Ctrl-C, :meth:`uvicorn.Server.should_exit`): uvicorn stops accepting connections, then waits for
the requests in flight — by default for as long as they take, and a request waiting on a batch of minutes held
``serve-model`` up for minutes after SIGTERM. Here ``on_shutdown`` (the app's ``scheduler.close``) runs as soon as
shutdown begins: queued requests are answered 503 at once and the running batch is interrupted before the model's next
forward (:mod:`workbench.core.interrupt`), so its requests end too; whatever still runs after
:data:`GRACEFUL_SHUTDOWN_S` seconds is cancelled.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Self

logger = logging.getLogger("workbench.serve")

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
GRACEFUL_SHUTDOWN_S = 5.0
"""Seconds uvicorn waits at shutdown for the requests still in flight before cancelling them."""


def http_url(host: str, port: int) -> str:
    """``http://host:port`` (brackets around an IPv6 address)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def make_server(
    app: Any,
    *,
    host: str,
    port: int,
    log_level: str,
    announce: Callable[[str], str] | None = None,
    on_shutdown: Callable[[], None] | None = None,
) -> Any:
    """A :class:`uvicorn.Server` for ``app`` on ``host:port`` (0: a free port) that prints ``announce(url)`` once
    bound (the real port) and calls ``on_shutdown()`` when shutdown begins, before waiting for the requests in
    flight (at most :data:`GRACEFUL_SHUTDOWN_S` seconds). Start it with ``.run()`` (in the main thread, it handles
    SIGINT / SIGTERM) or in a thread, and stop it with ``.should_exit = True``."""
    import uvicorn

    class _Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and announce is not None:
                print(announce(http_url(host, self.bound_port())), flush=True)

        async def shutdown(self, sockets: Any = None) -> None:
            if on_shutdown is not None:
                on_shutdown()  # waiting requests end now; a running batch stops at its next forward
            await super().shutdown(sockets=sockets)

        def bound_port(self) -> int:
            """The port the server listens on (``port`` unless it was 0)."""
            servers = getattr(self, "servers", None) or []
            if servers and servers[0].sockets:
                return int(servers[0].sockets[0].getsockname()[1])
            return port

    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S
    )
    return _Server(config)


def run_uvicorn(
    app: Any,
    *,
    host: str,
    port: int,
    log_level: str,
    announce: Callable[[str], str],
    on_shutdown: Callable[[], None] | None = None,
    on_server: Callable[[Any], None] | None = None,
) -> None:
    """Serve ``app`` until interrupted (see :func:`make_server`): SIGTERM or Ctrl-C stop it within about
    :data:`GRACEFUL_SHUTDOWN_S` seconds. ``on_server(server)`` is called before it starts, e.g. to keep a way of
    stopping it (``server.should_exit = True``)."""
    if host not in LOCAL_HOSTS:
        logger.warning("binding %s: the API is reachable from other machines and has no authentication", host)
    server = make_server(app, host=host, port=port, log_level=log_level, announce=announce, on_shutdown=on_shutdown)
    if on_server is not None:
        on_server(server)
    server.run()


class ServerThread:
    """``app`` served by uvicorn in a background daemon thread (tests, parity checks, benchmarks), on ``host:port``
    (0: a free port); ``on_shutdown`` as in :func:`make_server`. :meth:`start` returns once it accepts connections,
    ``url`` (``http://host:port``) and ``port`` then naming where; :meth:`stop` shuts it down (also a context
    manager)."""

    def __init__(
        self, app: Any, *, host: str, port: int, name: str, on_shutdown: Callable[[], None] | None = None
    ) -> None:

        self.app, self.host, self.port, self.name = app, host, port, name
        self.url = ""
        self._server = make_server(app, host=host, port=port, log_level="warning", on_shutdown=on_shutdown)
        self._thread = threading.Thread(target=self._server.run, name=f"workbench-{name}", daemon=True)

    def start(self, timeout: float) -> Self:
        """Start serving and wait until the server accepts connections (a RuntimeError when it does not within
        ``timeout`` seconds); sets ``port`` (the bound one) and ``url``."""

        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self._server.should_exit = True
                raise RuntimeError(f"{self.name} did not start on {self.host}:{self.port}")
            time.sleep(0.01)
        self.port = int(self._server.bound_port())
        self.url = http_url(self.host, self.port)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Shut the server down and wait for its thread (``timeout`` seconds at most)."""
        self._server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
