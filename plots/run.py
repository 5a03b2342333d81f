"""Figures of a whole run: `run_metrics` (tokens per step against the budget, KV blocks in use
against the pool, waiting and running requests, preemptions, prefix-cache hits; one figure, shared
x) and `timeline` (a Gantt chart of each request's life: waiting, prefill chunks, decode, running
but not scheduled; preemption and finish marked). `series` and `lives` are the numbers they draw,
read from the traces alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pagedviz.core import StepTrace
from pagedviz.core.kv_cache import usable_blocks
from pagedviz.core.narrate_facts import Facts
from pagedviz.core.parallel_sampling import scheduled_specs
from pagedviz.plots.source import Source, resolve
from pagedviz.plots.style import Identity, apply_theme, label, theme_vars

STATES = ("waiting", "prefill", "decode", "unscheduled")


def blocks_in_use(t: StepTrace) -> int:
    """KV blocks some request holds after the step (ref counts above zero)."""
    ref = t.kv_cache.get("ref_cnt")
    return (
        int(np.count_nonzero(np.asarray(ref) > 0)) if ref is not None else len(t.kv_cache.get("owners", {}))
    )


def prefix_hits(f: Facts) -> int:
    """Tokens that the requests admitted this step (new or resumed) found computed already: their
    prefix-cache hit."""
    if f.t.idle:
        return 0
    admitted = {str(r) for r in (*f.sched.get("new_req_ids", []), *f.sched.get("resumed_req_ids", []))}
    return int(
        sum(int(f.computed[r]) for r, rid in enumerate(f.rows) if rid in admitted and r < len(f.computed))
    )


def series(steps: tuple[StepTrace, ...] | list[StepTrace]) -> dict[str, list[int]]:
    """The per-step numbers run_metrics draws, one list per name, in step order."""
    out: dict[str, list[int]] = {
        k: [] for k in ("step", "tokens", "blocks", "waiting", "running", "preempted", "hits")
    }
    for t in steps:
        f = Facts(t)
        out["step"].append(int(t.step))
        out["tokens"].append(f.T)
        out["blocks"].append(blocks_in_use(t))
        out["waiting"].append(len(t.scheduler.get("waiting_req_ids", [])))
        out["running"].append(len(f.nst))
        out["preempted"].append(len(t.scheduler.get("preempted_req_ids", [])))
        out["hits"].append(prefix_hits(f))
    return out


def pool_size(src: Source) -> int:
    """The pool's usable blocks, vLLM's count (the null block left out): the steps'
    `kv_cache.num_usable_blocks`, else the scenario's (core/kv_cache.py `usable_blocks`)."""
    for t in src.steps:
        if "num_usable_blocks" in t.kv_cache:
            return int(t.kv_cache["num_usable_blocks"])
    assert src.scenario is not None
    return usable_blocks(src.scenario.flavor, int(src.scenario.config.num_kv_blocks))


def _limits(src: Source) -> tuple[int, int]:
    if src.scenario is None:
        raise ValueError(
            "scenario: a list of step traces carries no token budget; pass a preset id, a scenario,"
            " or the run with scenario=..."
        )
    return int(src.scenario.config.max_num_batched_tokens), pool_size(src)


def run_metrics(
    run: Any, *, scenario: Any = None, theme: str = "light", lang: str = "en", height: int = 560
) -> go.Figure:
    """How the run evolves, step by step, in four rows sharing the step axis: tokens scheduled
    with the token budget, KV blocks in use with the pool (its usable blocks, `pool_size`),
    waiting / running / preempted requests, and prefix-cache hit tokens. `run` is a preset id, a
    scenario, or a run with `scenario=`."""
    src = resolve(run, scenario)
    budget, pool = _limits(src)
    s = series(src.steps)
    v = theme_vars(theme)
    x = s["step"]
    fig = make_subplots(
        rows=4,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.05,
        row_heights=[0.3, 0.3, 0.25, 0.15],
        subplot_titles=(
            f"{label('tokens', lang)} · - - {label('budget', lang)}",
            f"{label('blocks', lang)} · - - {label('pool', lang)}",
            f"{label('requests', lang)}: {label('waiting', lang)}, {label('running', lang)}, "
            f"{label('preempted', lang)}",
            label("hits", lang),
        ),
    )
    lim = {"dash": "dash", "width": 2, "color": v["warn"]}
    fig.add_trace(go.Bar(x=x, y=s["tokens"], name=label("tokens", lang), marker_color=v["k-prefill"]), 1, 1)
    fig.add_trace(
        go.Scatter(x=x, y=[budget] * len(x), name=label("budget", lang), mode="lines", line=lim), 1, 1
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=s["blocks"],
            name=label("blocks", lang),
            mode="lines+markers",
            fill="tozeroy",
            line={"color": v["k-decode"]},
        ),
        2,
        1,
    )
    fig.add_trace(go.Scatter(x=x, y=[pool] * len(x), name=label("pool", lang), mode="lines", line=lim), 2, 1)
    fig.add_trace(
        go.Scatter(
            x=x,
            y=s["waiting"],
            name=label("waiting", lang),
            mode="lines+markers",
            line={"color": v["muted"], "shape": "hv"},
        ),
        3,
        1,
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=s["running"],
            name=label("running", lang),
            mode="lines+markers",
            line={"color": v["accent"], "shape": "hv"},
        ),
        3,
        1,
    )
    fig.add_trace(go.Bar(x=x, y=s["preempted"], name=label("preempted", lang), marker_color=v["bad"]), 3, 1)
    fig.add_trace(go.Bar(x=x, y=s["hits"], name=label("hits", lang), marker_color=v["k-mixed"]), 4, 1)
    fig.update_xaxes(title=label("step", lang), row=4, col=1)
    fig.update_xaxes(
        dtick=1 if len(x) <= 40 else None, range=[min(x, default=1) - 0.5, max(x, default=1) + 0.5]
    )
    fig.update_yaxes(rangemode="tozero")
    # the rows' titles name every series; a legend of eight entries would be as tall as the figure
    fig.update_layout(hovermode="x unified", bargap=0.15, barmode="overlay", showlegend=False)
    for ann in fig.layout.annotations:  # the subplot titles: the page's text colour, left
        ann.update(x=0, xanchor="left", font={"size": 12, "color": v["muted"]})
    return apply_theme(fig, theme, label("run_metrics", lang), height=height)


@dataclass(frozen=True)
class Segment:
    req_id: str
    state: str  # one of STATES
    start: int  # first step
    end: int  # last step (inclusive)
    tokens: int  # tokens scheduled over the segment


def _decode_rows(f: Facts, prompt_len: dict[str, int]) -> set[str]:
    """The scheduled requests of the step that decode (their computed tokens reach their known
    tokens but one), the others prefill (or recompute after a preemption)."""
    if f.nano:
        return set() if f.t.scalars.get("is_prefill") else set(f.nst)
    out = set()
    for r, rid in enumerate(f.rows):
        if rid not in f.nst or r >= len(f.computed):
            continue
        total = f.total_tokens(r)
        known = total if total is not None else prompt_len.get(rid, 0) + 1
        if int(f.computed[r]) >= known - 1 and int(f.computed[r]) >= prompt_len.get(rid, 0):
            out.add(rid)
    return out


def lives(src: Source) -> tuple[list[Segment], dict[str, list[int]], dict[str, list[int]]]:
    """Each request's life as segments of one state over consecutive steps (decode, waiting and
    not-scheduled runs merged; each prefill chunk its own segment), with the steps it was
    preempted and finished at."""
    # the requests the scheduler sees: one with n > 1 as its children
    specs = scheduled_specs(src.scenario.requests) if src.scenario else ()
    prompt_len = {r.id: len(r.prompt_token_ids) for r in specs}
    # requests by arrival step, latest first (popped as their step comes)
    arrivals = sorted(((int(r.arrival_step), r.id) for r in specs), reverse=True)
    unseen: set[str] = set()  # arrived, and in no queue yet
    segs: list[Segment] = []
    open_: dict[str, list[Any]] = {}  # rid -> [state, start, end, tokens]
    preempted: dict[str, list[int]] = {}
    finished: dict[str, list[int]] = {}
    done: set[str] = set()
    seen: set[str] = set()  # requests that have had a state

    def close(rid: str) -> None:
        o = open_.pop(rid, None)
        if o is not None:
            segs.append(Segment(rid, o[0], o[1], o[2], o[3]))

    for t in src.steps:
        f = Facts(t)
        decode = _decode_rows(f, prompt_len)
        waiting = {str(r) for r in t.scheduler.get("waiting_req_ids", [])}
        holders = {str(r) for o in t.kv_cache.get("owners", {}).values() for r in o}
        pre = [str(r) for r in t.scheduler.get("preempted_req_ids", [])]
        fin = [str(r) for r in t.scheduler.get("finished_req_ids", [])]
        state: dict[str, str] = {}
        for rid in f.nst:
            state[rid] = "decode" if rid in decode else "prefill"
        for rid in waiting | set(pre):
            state.setdefault(rid, "waiting")
        for rid in holders:
            if rid not in done:
                state.setdefault(rid, "unscheduled")
        while arrivals and arrivals[-1][0] <= t.step:
            unseen.add(arrivals.pop()[1])
        unseen -= seen
        for rid in unseen:  # arrived and not yet seen in a queue: waiting
            state.setdefault(rid, "waiting")
        seen.update(state)
        for rid in list(open_):
            if rid not in state:
                close(rid)
        for rid, st in state.items():
            o = open_.get(rid)
            n = f.nst.get(rid, 0)
            if o is not None and o[0] == st and st != "prefill" and o[2] == t.step - 1:
                o[2] = t.step
                o[3] += n
            else:
                close(rid)
                open_[rid] = [st, t.step, t.step, n]
        for rid in pre:
            preempted.setdefault(rid, []).append(int(t.step))
        for rid in fin:
            finished.setdefault(rid, []).append(int(t.step))
            done.add(rid)
            close(rid)
    for rid in list(open_):
        close(rid)
    return segs, preempted, finished


def timeline(
    run: Any, *, scenario: Any = None, theme: str = "light", lang: str = "en", height: int | None = None
) -> go.Figure:
    """A Gantt chart of every request's life, one row per request in the scenario's order, x the
    step: waiting (hollow), prefill chunks (full bar), decode (thinner bar), running but not
    scheduled (a line); preemptions (✕) and the finish (✓) marked. Bars in the request's colour."""
    src = resolve(run, scenario)
    ident = Identity(src.req_ids())
    v = theme_vars(theme)
    segs, preempted, finished = lives(src)
    widths = {"waiting": 0.5, "prefill": 0.8, "decode": 0.45, "unscheduled": 0.15}
    fig = go.Figure()
    for st in STATES:
        mine = [s for s in segs if s.state == st]
        colours = [ident.colour(s.req_id) for s in mine]
        fill = [v["panel"] if st == "waiting" else c for c in colours]
        fig.add_trace(
            go.Bar(
                orientation="h",
                y=[s.req_id for s in mine],
                x=[s.end - s.start + 1 for s in mine],
                base=[s.start - 0.5 for s in mine],
                width=widths[st],
                customdata=[[s.start, s.end, s.tokens] for s in mine],
                marker={
                    "color": fill,
                    "line": {"color": colours if st == "waiting" else v["bg"], "width": 1.5},
                    "opacity": 0.65 if st == "decode" else 1.0,
                },
                name=label(st, lang),
                legendgroup=st,
                showlegend=False,
                hovertemplate=(
                    f"{label('request', lang)} %{{y}} · {label(st, lang)}<br>"
                    f"{label('step', lang)} %{{customdata[0]}}–%{{customdata[1]}} · "
                    f"{label('tokens', lang)} %{{customdata[2]}}<extra></extra>"
                ),
            )
        )
        # the legend's key for the state: the bar's shape in a neutral colour (bars are per request)
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                name=label(st, lang),
                legendgroup=st,
                hoverinfo="skip",
                marker={
                    "symbol": "square-open" if st == "waiting" else "square",
                    "size": 12 if widths[st] > 0.3 else 6,
                    "color": v["muted"],
                    "opacity": 0.65 if st == "decode" else 1.0,
                },
            )
        )
    for key, marks, symbol, colour in (
        ("preempted", preempted, "x", v["bad"]),
        ("finished", finished, "star", v["ok"]),
    ):
        pts = [(rid, s) for rid, steps in marks.items() for s in steps]
        fig.add_trace(
            go.Scatter(
                x=[s for _, s in pts],
                y=[rid for rid, _ in pts],
                mode="markers",
                name=label(key, lang),
                marker={
                    "symbol": symbol,
                    "size": 11,
                    "color": colour,
                    "line": {"width": 1, "color": v["fg"]},
                },
                hovertemplate=f"{label('request', lang)} %{{y}} · {label(key, lang)}"
                f" @ {label('step', lang)} %{{x}}<extra></extra>",
            )
        )
    steps = [t.step for t in src.steps]
    ids = ident.ids
    fig.update_yaxes(
        type="category",
        categoryorder="array",
        categoryarray=ids,
        autorange="reversed",
        title=label("request", lang),
    )
    fig.update_xaxes(
        title=label("step", lang),
        range=[min(steps, default=1) - 0.5, max(steps, default=1) + 0.5],
        dtick=1 if len(steps) <= 40 else None,
    )
    fig.update_layout(barmode="overlay", bargap=0.1, hovermode="closest")
    h = height if height is not None else min(900, max(260, 120 + 22 * len(ids)))
    return apply_theme(fig, theme, label("timeline", lang), height=h)
