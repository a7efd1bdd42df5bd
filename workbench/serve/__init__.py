"""``workbench serve``: a JSON HTTP API over a bundle's runtime (FastAPI + uvicorn), and a load generator for it.

``create_app(runtime, limits)`` builds the app (``GET /health``, ``GET /methods``, ``POST /answer``, ``/docs``);
``run_server(runtime, host="127.0.0.1", port=8000)`` serves it with uvicorn; ``run_load(base_url, bodies)`` measures a
live server; ``serve_process(bundle)`` runs ``workbench serve`` in a separate process to measure. Importing this
package loads FastAPI, Starlette and pydantic only: uvicorn and httpx are imported by the functions that use them, and
no model library is ever imported here.
"""

from workbench.serve.app import ServeLimits, create_app, run_server
from workbench.serve.load import free_port, run_load, serve_process

__all__ = ["ServeLimits", "create_app", "free_port", "run_load", "run_server", "serve_process"]
