"""``workbench serve``: a JSON HTTP API over a bundle's runtime (FastAPI + uvicorn), and a load generator for it.

``create_app(runtime, limits)`` builds the app (``GET /health``, ``GET /ready``, ``GET /methods``, ``POST /answer``,
``/docs``, ``/redoc``); ``run_server(runtime, host="127.0.0.1", port=8000)`` serves it with uvicorn, warming the
runtime once bound (:mod:`workbench.serve.readiness`); requests are queued and batched by
:class:`~workbench.serve.scheduler.BatchScheduler`; ``run_load(base_url, bodies)`` and ``run_abandoned(base_url,
bodies)`` measure a live server; ``serve_process(bundle)`` runs ``workbench serve`` in a separate process to
measure. Importing this package loads FastAPI, Starlette and pydantic only: uvicorn and httpx are imported by the
functions that use them, and no model library is ever imported here.
"""

from workbench.runtime.questions import is_blank
from workbench.serve.app import create_app, run_server
from workbench.serve.limits import ServeLimits
from workbench.serve.load import free_port, run_abandoned, run_load, serve_process
from workbench.serve.scheduler import BatchScheduler

__all__ = [
    "BatchScheduler",
    "ServeLimits",
    "create_app",
    "free_port",
    "is_blank",
    "run_abandoned",
    "run_load",
    "run_server",
    "serve_process",
]
