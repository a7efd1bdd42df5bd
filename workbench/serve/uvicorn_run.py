"""Run an ASGI app with uvicorn in the foreground, announcing its URL once bound: shared by ``serve`` and
``serve-model`` (neither has authentication: binding another interface than localhost logs a warning)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("workbench.serve")

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def http_url(host: str, port: int) -> str:
    """``http://host:port`` (brackets around an IPv6 address)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def run_uvicorn(app: Any, *, host: str, port: int, log_level: str, announce: Callable[[str], str]) -> None:
    """Serve ``app`` until interrupted; once the socket is bound, print ``announce(url)`` (the real port when
    ``port`` is 0)."""
    import uvicorn

    class _Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                bound = port
                servers = getattr(self, "servers", None) or []
                if servers and servers[0].sockets:
                    bound = servers[0].sockets[0].getsockname()[1]
                print(announce(http_url(host, bound)), flush=True)

    if host not in LOCAL_HOSTS:
        logger.warning("binding %s: the API is reachable from other machines and has no authentication", host)
    _Server(uvicorn.Config(app, host=host, port=port, log_level=log_level)).run()
