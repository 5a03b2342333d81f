"""The run page's run-level charts: GET /api/runs/{id}/figures/{name} answers pagedviz.plots'
figure (run_metrics or timeline) as plotly JSON, in the page's theme and language; and
GET /vendor/plotly.min.js serves plotly.js from the installed `plotly` package (the page's charts
work offline; nothing comes from a CDN)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, Response

from pagedviz.app.cache import BoundedCache
from pagedviz.app.errors import ApiError
from pagedviz.app.routes.deps import ERRORS, known_run
from pagedviz.app.run import Run

router = APIRouter()
FIGURES = ("run_metrics", "timeline")


@cache
def plotly_js() -> Path:
    """plotly.min.js inside the installed plotly package."""
    import plotly

    path = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise RuntimeError(f"the installed plotly {plotly.__version__} has no package_data/plotly.min.js")
    return path


# figures made lately, by (run id, steps, name, theme, lang): a reload or a second reader does not
# make them again (a 1024-request run's timeline takes seconds)
MAX_MADE = 32
_made: BoundedCache[tuple[str, int, str, str, str], bytes] = BoundedCache(MAX_MADE)


def figure_json(run: Run, name: str, theme: str, lang: str) -> bytes:
    key = (run.run_id, len(run.steps), name, theme, lang)
    body = _made.get(key)
    if body is None:
        body = make_figure(run, name, theme, lang)
        _made.put(key, body)
    return body


def make_figure(run: Run, name: str, theme: str, lang: str) -> bytes:
    from pagedviz import plots

    make: Any = plots.run_metrics if name == "run_metrics" else plots.timeline
    fig = make(run.steps, scenario=run.scenario, theme=theme, lang=lang)
    # the page draws the marker and takes the clicks: no zoom by dragging, the axes stay put
    fig.update_layout(dragmode=False, autosize=True, width=None)
    fig.update_xaxes(fixedrange=True)
    fig.update_yaxes(fixedrange=True)
    return fig.to_json(validate=False, engine="json").encode()


@router.get("/api/runs/{run_id}/figures/{name}", tags=["runs"], responses=ERRORS)
async def figure(
    request: Request,
    run_id: str,
    name: str,
    theme: str = Query("light", pattern="^(light|dark)$"),
    lang: str = Query("en", pattern="^(en|zh)$"),
) -> Response:
    """A run-level figure of pagedviz.plots as plotly JSON ({data, layout}): `run_metrics` (tokens
    against the budget, KV blocks against the pool, waiting / running / preempted requests,
    prefix-cache hits, per step) or `timeline` (each request's life). Waits for the run to be
    computed whole."""
    if name not in FIGURES:
        raise ApiError(404, "not_found", "name", f"no figure {name[:40]!r}; figures: {', '.join(FIGURES)}")
    run = await known_run(request, run_id)
    body = await run_in_threadpool(figure_json, run, name, theme, lang)
    return Response(body, media_type="application/json", headers={"Cache-Control": "private, max-age=300"})


@router.get("/vendor/plotly.min.js", include_in_schema=False)
def plotly_min_js() -> FileResponse:
    return FileResponse(
        plotly_js(), media_type="text/javascript", headers={"Cache-Control": "public, max-age=86400"}
    )
