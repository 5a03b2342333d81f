"""The FastAPI application: REST routes, pages and static files over one run store, and the
project's documents (docs/*.md) at /docs-md/NAME for the OpenAPI text and the page to link to."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import PlainTextResponse
from fastapi_offline import FastAPIOffline

from pagedviz.app import errors
from pagedviz.app.errors import ApiError
from pagedviz.app.routes import health, pages, presets, runs, schema, teach
from pagedviz.app.settings import Settings
from pagedviz.app.store import RunStore
from pagedviz.core import __version__

# the repository's docs/ (a checkout or an editable install; not part of the wheel)
DOCS_DIR = Path(__file__).resolve().parents[1] / "docs"
DESCRIPTION = """How a vLLM-v1-style engine prepares model inputs over a paged KV cache, step by step and
stage by stage.

- [The scenario format](/docs-md/scenario-format.md) (also as JSON Schema: `GET /api/schema/scenario`)
- [Every array in the trace](/docs-md/arrays.md): what it is, its shape, its formula, why vLLM computes it
- [Architecture](/docs-md/architecture.md): one engine step, and where each part lives

Every error has one shape: `{"error": ..., "detail": [{"field": ..., "message": ...}]}`."""


def docs_md(name: str) -> PlainTextResponse:
    """One of the project's documents (docs/NAME.md), as text."""
    known = sorted(p.name for p in DOCS_DIR.glob("*.md")) if DOCS_DIR.is_dir() else []
    if name not in known:
        listed = ", ".join(known) or "none here (they are in the repository's docs/ folder)"
        raise ApiError(404, "not_found", "name", f"no document {name[:60]!r}; documents: {listed}")
    return PlainTextResponse((DOCS_DIR / name).read_text(encoding="utf-8"))


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()
    # /docs and /redoc with Swagger UI and ReDoc from a Python package, not from a CDN: offline too
    app = FastAPIOffline(
        static_url="/vendor/docs",
        title="pagedviz",
        version=__version__,
        description=DESCRIPTION,
    )
    app.state.settings = settings
    shared = Path(settings.shared_dir) if settings.shared_dir else None
    if shared is not None:
        shared.mkdir(parents=True, exist_ok=True)
    app.state.store = RunStore(
        settings.max_runs, settings.max_store_bytes, settings.max_scenarios, settings.max_run_seconds, shared
    )
    app.add_middleware(GZipMiddleware, minimum_size=1024)
    errors.install(app)
    for r in (health.router, presets.router, runs.router, schema.router, teach.router):
        app.include_router(r)
    app.add_api_route("/docs-md/{name}", docs_md, methods=["GET"], include_in_schema=False)
    pages.mount(app)
    return app
