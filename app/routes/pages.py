"""The HTML pages (Jinja2, autoescaped) and the static files. The pages draw their heatmaps on
canvases (static/canvasmap.js), so no plotting library is served."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse
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


@router.get("/", response_class=HTMLResponse)
def landing(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "index.html", {"version": __version__, "page": "landing"})


@router.get("/run", response_class=HTMLResponse)
def run_page(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "run.html", {"version": __version__, "page": "run"})


def mount(app: FastAPI) -> None:
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=str(_dir("static"))), name="static")
