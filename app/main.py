"""The FastAPI application: REST routes, pages and static files over one run store, and the
project's documents (docs/*.md) at /docs-md/NAME for the OpenAPI text and the page to link to."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl

from fastapi import FastAPI, Query
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import PlainTextResponse
from fastapi_offline import FastAPIOffline
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pagedviz.app import errors
from pagedviz.app.compute import compute_pool
from pagedviz.app.errors import ApiError
from pagedviz.app.import_live import LiveRuns
from pagedviz.app.routes import figures, health, imports, pages, presets, runs, schema, stage_text, teach
from pagedviz.app.routes import live as live_routes
from pagedviz.app.settings import Settings
from pagedviz.app.store import RunStore
from pagedviz.core import __version__

# the repository's docs/ (a checkout or an editable install; not part of the wheel)
DOCS_DIR = Path(__file__).resolve().parents[1] / "docs"
DESCRIPTION = """How a vLLM-v1-style engine prepares model inputs over a paged KV cache, step by step and
stage by stage.

- [The scenario format](/docs-md/scenario-format.md) (also as JSON Schema: `GET /api/schema/scenario`)
- [Every array in the trace](/docs-md/arrays.md): what it is, its shape, its formula, why vLLM computes it
- [The trace contract](/docs-md/trace-contract.md): one step as data, the shape every step endpoint answers
- [Architecture](/docs-md/architecture.md): the packages, one engine step, and where each part lives
- [Recording a vLLM server](/docs-md/recording.md): the recorder, and what `POST /api/runs/import` takes
- [Deployment](/docs-md/deployment.md): the limits (`PAGEDVIZ_*`), a class server, workers, the run store
- [Fidelity](/docs-md/fidelity.md): what is proven against vLLM 0.33.0's own code

Every error has one shape: `{"error": ..., "detail": [{"field": ..., "message": ...}]}`."""


# what a document in English says first when the page asked for 中文 and docs/zh/ has no version
ZH_NOTE = "（本文档目前只有英文版，以下是英文原文。其中的数组名、代码和命令与页面上的相同。）\n\n"


def docs_md(
    name: str, lang: str = Query("en", pattern="^(en|zh)$", description="en or zh")
) -> PlainTextResponse:
    """One of the project's documents (docs/NAME.md), as text; with lang=zh its Chinese version
    (docs/zh/NAME.md), or the English text under a note in Chinese that says so."""
    known = sorted(p.name for p in DOCS_DIR.glob("*.md")) if DOCS_DIR.is_dir() else []
    if name not in known:
        listed = ", ".join(known) or "none here (they are in the repository's docs/ folder)"
        raise ApiError(404, "not_found", "name", f"no document {name[:60]!r}; documents: {listed}")
    if lang == "zh":
        local = DOCS_DIR / "zh" / name
        if local.is_file():
            return PlainTextResponse(local.read_text(encoding="utf-8"))
        return PlainTextResponse(ZH_NOTE + (DOCS_DIR / name).read_text(encoding="utf-8"))
    return PlainTextResponse((DOCS_DIR / name).read_text(encoding="utf-8"))


# Pages run only their own scripts (static/): no inline script, no eval.
# Styles may be inline: the views set element styles (sizes, colours) from script.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
# /docs and /redoc start Swagger UI and ReDoc with an inline script of FastAPI's; they read no user text
DOCS_CSP = CSP.replace("script-src 'self'", "script-src 'self' 'unsafe-inline'")
HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]


def is_embed(query_string: bytes) -> bool:
    """A request for an embeddable figure: its query has embed=<card>."""
    pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    return any(k == "embed" and v for k, v in pairs)


class SecurityHeaders:
    """Adds the security headers to every response: nosniff, Referrer-Policy, no framing, and the
    Content-Security-Policy (pure ASGI, so streamed responses pass through untouched). A request
    with embed=<card> (one figure for an iframe in slides) may be framed by `embed_ancestors`
    (PAGEDVIZ_EMBED_ANCESTORS) and has no X-Frame-Options; every other response keeps
    frame-ancestors 'none' and DENY."""

    def __init__(self, app: ASGIApp, embed_ancestors: str = "*", page_ancestors: str = "'none'") -> None:
        self.app = app
        self.embed_csp = CSP.replace("frame-ancestors 'none'", f"frame-ancestors {embed_ancestors}").encode()
        self.embed_headers = [h for h in HEADERS if h[0] != b"x-frame-options"]
        # every page framable by `page_ancestors` (pagedviz.notebook's loopback server only)
        self.csp = CSP.replace("frame-ancestors 'none'", f"frame-ancestors {page_ancestors}").encode()
        self.headers = HEADERS if page_ancestors == "'none'" else self.embed_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        docs = scope["path"].startswith(("/docs", "/redoc"))
        embed = not docs and is_embed(scope.get("query_string", b""))
        csp = self.embed_csp if embed else DOCS_CSP.encode() if docs else self.csp
        headers = self.embed_headers if embed else self.headers

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message.get("headers", []),
                    *headers,
                    (b"content-security-policy", csp),
                ]
            await send(message)

        await self.app(scope, receive, with_headers)


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
    pool = compute_pool() if settings.compute_in == "process" else None
    if pool is not None:
        # started now: the first runs find workers ready
        pool.warm(settings.max_computing, memory_budget=settings.max_computing * settings.max_run_bytes)
    app.state.store = RunStore(
        settings.max_runs,
        settings.max_store_bytes,
        settings.max_scenarios,
        settings.max_run_seconds,
        Path(settings.store_dir) if settings.store_dir else None,
        max_run_bytes=settings.max_run_bytes,
        max_scenario_bytes=settings.max_scenario_bytes,
        max_in_progress=settings.max_in_progress if pool is not None else settings.max_computing,
        max_queued=settings.max_queued,
        max_db_bytes=settings.max_db_bytes,
        max_db_total_bytes=settings.max_db_total_bytes,
        limits=settings.limits,
        pool=pool,
        max_record_line_bytes=settings.max_record_line_bytes,
    )
    # a replay in flight stops at its next step when the server stops (the next server resumes it)
    app.router.on_shutdown.append(app.state.store.imports.close)
    app.state.live = LiveRuns(app.state.store.imports, settings)  # POST /api/runs/live, with a token
    app.router.on_startup.append(app.state.live.start)
    app.router.on_shutdown.append(app.state.live.shutdown)
    app.add_middleware(GZipMiddleware, minimum_size=1024)
    app.add_middleware(
        SecurityHeaders, embed_ancestors=settings.embed_ancestors, page_ancestors=settings.page_ancestors
    )
    errors.install(app)
    for r in (
        health.router,
        presets.router,
        imports.router,
        live_routes.router,
        runs.router,
        schema.router,
        stage_text.router,
        teach.router,
        figures.router,
    ):
        app.include_router(r)
    app.add_api_route("/docs-md/{name}", docs_md, methods=["GET"], include_in_schema=False)
    pages.mount(app)
    return app
