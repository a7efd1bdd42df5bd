"""``GET /docs`` (Swagger UI) and ``GET /redoc`` (ReDoc) from assets shipped in a Python package
(``fastapi-offline``), so they work offline; off, with a warning, when the package is absent."""

# No ``from __future__ import annotations``: FastAPI and pydantic read the annotations as objects.

import html
import importlib.util
import logging
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

logger = logging.getLogger("workbench.serve")

DOCS_ASSETS = "/docs/assets"

"""Where the Swagger UI / ReDoc assets are mounted."""


def docs_assets() -> Path | None:
    """The folder of Swagger UI / ReDoc assets shipped by the ``fastapi-offline`` package (None when absent).

    Found without importing the package: only its static files are used.
    """
    spec = importlib.util.find_spec("fastapi_offline")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        folder = Path(location) / "static"
        if all((folder / name).is_file() for name in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js")):
            return folder
    return None


def add_docs_pages(app: FastAPI, assets: Path | None) -> None:
    """Mount the Swagger UI / ReDoc ``assets`` (:func:`docs_assets`) and add ``GET /docs`` and ``GET /redoc`` over
    them; with no assets, warn once and add neither."""
    if assets is None:
        logger.warning("no Swagger UI / ReDoc assets (the fastapi-offline package): /docs and /redoc are off")
    else:
        app.mount(DOCS_ASSETS, StaticFiles(directory=assets), name="docs-assets")
        page_title = html.escape(app.title)

        @app.get("/docs", include_in_schema=False)
        async def swagger_ui() -> HTMLResponse:
            return get_swagger_ui_html(
                openapi_url="/openapi.json",
                title=f"{page_title} — docs",
                swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
                swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
                swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
                # no online validator badge: it would call a validator service on the internet
                swagger_ui_parameters={"validatorUrl": None},
            )

        @app.get("/redoc", include_in_schema=False)
        async def redoc() -> HTMLResponse:
            return get_redoc_html(
                openapi_url="/openapi.json",
                title=f"{page_title} — ReDoc",
                redoc_js_url=f"{DOCS_ASSETS}/redoc.standalone.js",
                redoc_favicon_url=f"{DOCS_ASSETS}/favicon.png",
                with_google_fonts=False,  # fonts from the internet: the page uses the browser's own
            )
