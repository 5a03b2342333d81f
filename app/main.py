"""The FastAPI application: REST routes, pages and static files over one run store."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.middleware.gzip import GZipMiddleware
from fastapi_offline import FastAPIOffline

from pagedviz.app import errors
from pagedviz.app.routes import health, pages, presets, runs, schema
from pagedviz.app.settings import Settings
from pagedviz.app.store import RunStore
from pagedviz.core import __version__


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()
    # /docs and /redoc with Swagger UI and ReDoc from a Python package, not from a CDN: offline too
    app = FastAPIOffline(
        static_url="/vendor/docs",
        title="pagedviz",
        version=__version__,
        description="How a vLLM-v1-style engine prepares model inputs over a paged KV cache, "
        "step by step and stage by stage.",
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
    for r in (health.router, presets.router, runs.router, schema.router):
        app.include_router(r)
    pages.mount(app)
    return app
