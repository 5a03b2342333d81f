"""The HTML pages (Jinja2, autoescaped) and the static files. The pages draw their heatmaps on
canvases (static/canvasmap.js); only the run-level charts under the page load plotly.js, lazily
(static/runcharts.js, app/routes/figures.py)."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from pagedviz.app.routes.stage_text import stages_payload
from pagedviz.core import __version__

router = APIRouter(include_in_schema=False)


def _dir(name: str) -> Path:
    """templates/ and static/: inside the installed package (app/NAME), else beside it in a checkout."""
    app_dir = Path(__file__).resolve().parents[1]
    installed = app_dir / name
    return installed if installed.is_dir() else app_dir.parent / name


templates = Jinja2Templates(directory=str(_dir("templates")))


def palette_css(palette: dict[str, dict[str, str]]) -> str:
    """static/palette.json's theme colours as the pages' CSS custom properties: the light ones,
    and the dark ones over them when the system asks for a dark theme."""

    def props(colours: dict[str, str]) -> str:
        return " ".join(f"--{name}: {value};" for name, value in colours.items())

    light, dark = props(palette["light"]), props(palette["dark"])
    return f":root {{ {light} }}\n@media (prefers-color-scheme: dark) {{ :root {{ {dark} }} }}"


# one palette for every page (static/palette.json, which pagedviz.plots reads too): the base template
# writes its theme colours as CSS custom properties and its request colours for static/views.js
PALETTE = json.loads((_dir("static") / "palette.json").read_text(encoding="utf-8"))
templates.env.globals.update(palette=PALETTE, palette_css=palette_css(PALETTE))
# the JSON the pages carry (the stage texts, the palette) keeps its 中文 as UTF-8, not \u escapes
templates.env.policies["json.dumps_kwargs"] = {"sort_keys": True, "ensure_ascii": False}
IMPORT = re.compile(r'(?:from|import) "\./([A-Za-z0-9_-]+\.js)"')


@cache
def module_graph(*entries: str) -> tuple[str, ...]:
    """Every module the entry scripts import, directly or not (static/ES modules, no build step):
    the page preloads them all at once instead of discovering them one import level at a time."""
    static = _dir("static")
    seen: list[str] = []
    todo = list(entries)
    while todo:
        name = todo.pop(0)
        if name in seen or not (static / name).is_file():
            continue
        seen.append(name)
        todo.extend(IMPORT.findall((static / name).read_text(encoding="utf-8")))
    return tuple(n for n in seen if n not in entries)


@router.get("/", response_class=HTMLResponse)
def landing(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "index.html", {"version": __version__, "page": "landing"})


@router.get("/run", response_class=HTMLResponse)
def run_page(request: Request) -> HTMLResponse:
    modules = module_graph("run.js", "embed.js", "runcharts.js")
    return templates.TemplateResponse(
        request,
        "run.html",
        # the stages' titles and explanations (GET /api/stages/text), in the page for its first paint
        {"version": __version__, "page": "run", "modules": modules, "stage_texts": stages_payload()},
    )


def mount(app: FastAPI) -> None:
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=str(_dir("static"))), name="static")
