"""The HTML pages (Jinja2, autoescaped) and the static files; Plotly's cartesian bundle, vendored in
static/vendor (or the plotly package's full bundle), served gzipped from memory."""

from __future__ import annotations

import gzip
from functools import cache
from pathlib import Path

import plotly
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from pagedviz.core import __version__

router = APIRouter(include_in_schema=False)


def _dir(name: str) -> Path:
    """templates/ and static/: inside the installed package (app/NAME), else beside it in a checkout."""
    app_dir = Path(__file__).resolve().parents[1]
    installed = app_dir / name
    return installed if installed.is_dir() else app_dir.parent / name


templates = Jinja2Templates(directory=str(_dir("templates")))
# plotly.js's cartesian partial bundle (heatmaps are all the pages draw), vendored in static/vendor;
# the plotly package's full bundle when it is missing
PLOTLY_FULL_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
PLOTLY_CARTESIAN_JS = _dir("static") / "vendor" / "plotly-cartesian.min.js"
PLOTLY_JS = PLOTLY_CARTESIAN_JS if PLOTLY_CARTESIAN_JS.is_file() else PLOTLY_FULL_JS


@router.get("/", response_class=HTMLResponse)
def landing(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "index.html", {"version": __version__, "page": "landing"})


@router.get("/run", response_class=HTMLResponse)
def run_page(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "run.html", {"version": __version__, "page": "run"})


@cache
def _plotly_gz() -> bytes:
    return gzip.compress(PLOTLY_JS.read_bytes(), compresslevel=6)


@router.get("/vendor/plotly.min.js")
def plotly_js(request: Request) -> Response:
    """Plotly from this server (no CDN), gzipped once and then served from memory."""
    headers = {"Cache-Control": "public, max-age=86400", "Vary": "Accept-Encoding"}
    if "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"
        return Response(_plotly_gz(), media_type="text/javascript", headers=headers)
    return FileResponse(PLOTLY_JS, media_type="text/javascript", headers=headers)


def mount(app: FastAPI) -> None:
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=str(_dir("static"))), name="static")
