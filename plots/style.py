"""The page's look for plotly figures: one colour per request (the Okabe-Ito palette) and the
theme colours (light, and the dark theme of `prefers-color-scheme: dark`), both read from
static/palette.json, the file the page's own colours come from, and the figures' texts in English
and Chinese."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

THEMES = ("light", "dark")
LANGS = ("en", "zh")


def static_dir() -> Path:
    """The page's static/ folder: inside the installed package (pagedviz/app/static), else the
    repository's static/ beside app/. Found as data, without importing the app's code (the plots
    sit below the app: pyproject's import-linter layers)."""
    spec = importlib.util.find_spec("pagedviz.app")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pagedviz.app is not installed: the page's static/palette.json cannot be found")
    app_dir = Path(next(iter(spec.submodule_search_locations))).resolve()
    installed = app_dir / "static"
    return installed if installed.is_dir() else app_dir.parent / "static"


@cache
def _palette_file() -> dict[str, Any]:
    """static/palette.json: the page's colours (identity colours and tints, the themes' colours)."""
    data: dict[str, Any] = json.loads((static_dir() / "palette.json").read_text(encoding="utf-8"))
    return data


@cache
def palette() -> tuple[tuple[str, ...], tuple[str, ...], int]:
    """(PALETTE, TINTS, NUM_IDENTITY_COLORS), the request colours static/views.js reads too."""
    identity = _palette_file()["identity"]
    colours, tints, n = identity["colours"], identity["tints"], identity["count"]
    if not colours or len(colours) != len(tints) or not 0 < n < len(colours):
        raise RuntimeError("static/palette.json: identity's colours, tints or count could not be read")
    return tuple(colours), tuple(tints), int(n)


@cache
def theme_vars(theme: str) -> dict[str, str]:
    """The pages' CSS custom properties for `theme` (static/palette.json): the light colours, with
    the dark ones over them for "dark"."""
    if theme not in THEMES:
        raise ValueError(f"theme must be one of {', '.join(THEMES)} (got {theme!r:.40})")
    data = _palette_file()
    out = dict(data["light"])
    if theme == "dark":
        out.update(data["dark"])
    return out


class Identity:
    """A request's colour for the whole run: its place in the scenario's request list (never its
    batch row). More requests than identity colours: every request grey, as on the page."""

    def __init__(self, req_ids: Sequence[str]) -> None:
        self.ids = [str(r) for r in req_ids]
        self.order = {rid: i for i, rid in enumerate(self.ids)}
        colours, tints, n = palette()
        self.grey, self.grey_tint = colours[-1], tints[-1]
        self.big = len(self.ids) > n
        self.colours, self.tints = colours, tints

    def colour(self, rid: Any) -> str:
        i = self.order.get(str(rid), -1)
        return self.grey if self.big or i < 0 else self.colours[i]

    def tint(self, rid: Any) -> str:
        i = self.order.get(str(rid), -1)
        return self.grey_tint if self.big or i < 0 else self.tints[i]


TEXT: dict[str, dict[str, str]] = {
    "step": {"en": "step", "zh": "步"},
    "tokens": {"en": "tokens scheduled", "zh": "调度的 token"},
    "budget": {"en": "token budget (max_num_batched_tokens)", "zh": "token 预算（max_num_batched_tokens）"},
    "blocks": {"en": "KV blocks in use", "zh": "已用 KV 块"},
    "pool": {"en": "KV pool (usable blocks)", "zh": "KV 池（可用块）"},
    "waiting": {"en": "waiting", "zh": "等待"},
    "running": {"en": "running (scheduled)", "zh": "运行中（已调度）"},
    "preempted": {"en": "preempted", "zh": "被抢占"},
    "hits": {"en": "prefix-cache hit tokens", "zh": "前缀缓存命中 token"},
    "requests": {"en": "requests", "zh": "请求"},
    "request": {"en": "request", "zh": "请求"},
    "run_metrics": {"en": "How the run evolves", "zh": "运行的变化"},
    "timeline": {"en": "Each request's life", "zh": "每个请求的生命周期"},
    "prefill": {"en": "prefill chunk", "zh": "预填充分块"},
    "decode": {"en": "decode", "zh": "解码"},
    "unscheduled": {"en": "running, not scheduled", "zh": "运行中，未调度"},
    "finished": {"en": "finished", "zh": "完成"},
    "block": {"en": "physical block", "zh": "物理块"},
    "owner": {"en": "owner", "zh": "持有者"},
    "free": {"en": "free", "zh": "空闲"},
    "null_block": {"en": "null block (never handed out)", "zh": "空块（null block，从不分配）"},
    "usable": {"en": "usable", "zh": "可用"},
    "shared": {"en": "shared", "zh": "共享"},
    "allocated": {"en": "allocated this step", "zh": "本步分配"},
    "reused": {"en": "reused (prefix cache)", "zh": "复用（前缀缓存）"},
    "freed": {"en": "freed this step", "zh": "本步释放"},
    "kv_pool": {"en": "KV pool", "zh": "KV 池"},
    "row": {"en": "row", "zh": "行"},
    "index": {"en": "index", "zh": "下标"},
    "value": {"en": "value", "zh": "值"},
    "column": {"en": "column", "zh": "列"},
}


def label(key: str, lang: str) -> str:
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)} (got {lang!r:.40})")
    return TEXT[key][lang]


def apply_theme(fig: go.Figure, theme: str, title: str, height: int | None = None) -> go.Figure:
    """The page's background, text and grid colours on `fig`, its title, compact margins."""
    v = theme_vars(theme)
    fig.update_layout(
        template="plotly_dark" if theme == "dark" else "plotly_white",
        paper_bgcolor=v["bg"],
        plot_bgcolor=v["plot-bg"],
        font={
            "color": v["fg"],
            "family": 'system-ui, "Noto Sans", "Noto Sans CJK SC", sans-serif',
            "size": 12,
        },
        title={"text": title, "x": 0.01, "xanchor": "left", "font": {"size": 14}},
        margin={"l": 60, "r": 20, "t": 40, "b": 80},
        # the legend at the figure's foot, under the x axis's title
        legend={
            "orientation": "h",
            "yref": "container",
            "y": 0,
            "yanchor": "bottom",
            "x": 0,
            "bgcolor": "rgba(0,0,0,0)",
        },
        hoverlabel={"namelength": -1},
    )
    fig.update_xaxes(gridcolor=v["line"], zerolinecolor=v["line"], linecolor=v["line"])
    fig.update_yaxes(gridcolor=v["line"], zerolinecolor=v["line"], linecolor=v["line"])
    if height is not None:
        fig.update_layout(height=height)
    return fig
