"""Figures of one step: any traced array (`array`), the KV pool's physical blocks (`kv_pool`) and
the block table (`block_table`). Axes and hovers carry vLLM's names; requests keep the page's
colours (style.Identity)."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from pagedviz.core import StepTrace
from pagedviz.core.kv_groups import flat_blocks
from pagedviz.plots.source import one_step
from pagedviz.plots.style import Identity, apply_theme, label, theme_vars

# per-batch-row block tables, the one the attention kernel reads first
BLOCK_TABLES = ("block_table", "input_block_tables", "block_tables")


def _row_labels(t: StepTrace, rows: int, level: str) -> list[str]:
    """A label per row of a 2-D array: the request in that batch row where there is one."""
    req_ids = [str(r) for r in t.batch.get("req_ids", [])]
    slots = t.batch.get("slots")
    if slots is not None and level == "system":  # Model Runner V2: tables are per state slot
        by_slot = {int(s): str(r) for r, s in slots.items()}
        return [f"slot {i}" + (f" · {by_slot[i]}" if i in by_slot else "") for i in range(rows)]
    return [f"{i} · {req_ids[i]}" if i < len(req_ids) else str(i) for i in range(rows)]


def array(
    step: Any,
    name: str,
    *,
    n: int | None = None,
    kind: str = "heatmap",
    theme: str = "light",
    lang: str = "en",
) -> go.Figure:
    """A traced array of one step as a heatmap (values as colour and text) or a table, named as
    vLLM names it; `step` is a StepTrace, or a preset id / scenario / run with `n` the step."""
    if kind not in ("heatmap", "table"):
        raise ValueError(f"kind must be heatmap or table (got {kind!r:.40})")
    t, _, _ = one_step(step, n)
    entry = t.array_entries.get(name)
    if entry is None:
        known = ", ".join(sorted(t.array_entries)) or "none (an idle step)"
        raise ValueError(f"name: step {t.step} has no array {name!r:.60}; it has {known}")
    value = np.asarray(entry.value)
    z = value.astype(np.int64) if value.dtype == np.bool_ else value
    title = f"{name} · {label('step', lang)} {t.step} ({entry.level}, {entry.stage}, {entry.side})"
    grid = z.reshape(1, -1) if z.ndim <= 1 else z.reshape(z.shape[0], -1)
    req_ids = [str(r) for r in t.batch.get("req_ids", [])]
    if z.ndim <= 1:
        ylabels = [name]
        if entry.level == "request" and len(z) <= len(req_ids) + 1:
            xlabels = [req_ids[i] if i < len(req_ids) else str(i) for i in range(len(z.reshape(-1)))]
        else:
            xlabels = [str(i) for i in range(grid.shape[1])]
        xtitle = f"{name}[i] · {label('index', lang)}"
    else:
        ylabels = _row_labels(t, grid.shape[0], entry.level)
        xlabels = [str(i) for i in range(grid.shape[1])]
        xtitle = label("column", lang)
    if kind == "table":
        header = [label("row", lang), *xlabels]
        cells = [ylabels, *[grid[:, j].tolist() for j in range(grid.shape[1])]]
        v = theme_vars(theme)
        fig = go.Figure(
            go.Table(
                header={"values": header, "fill_color": v["panel"], "font": {"color": v["fg"]}},
                cells={"values": cells, "fill_color": v["bg"], "font": {"color": v["fg"]}},
                name=name,
            )
        )
        return apply_theme(fig, theme, title)
    text = [[str(x) for x in row] for row in grid.tolist()]
    fig = go.Figure(
        go.Heatmap(
            z=grid,
            x=xlabels,
            y=ylabels,
            text=text,
            texttemplate="%{text}" if grid.size <= 2048 else None,
            colorscale="Blues" if theme == "light" else "Cividis",
            showscale=False,
            name=name,
            hovertemplate=f"{name}[%{{y}}, %{{x}}] = %{{z}}<extra></extra>"
            if z.ndim > 1
            else f"{name}[%{{x}}] = %{{z}}<extra></extra>",
            xgap=1,
            ygap=1,
        )
    )
    fig.update_xaxes(title=xtitle, type="category")
    fig.update_yaxes(type="category", autorange="reversed")
    return apply_theme(fig, theme, title, height=max(160, 60 + 28 * grid.shape[0]))


def _category_scale(colours: list[str]) -> list[list[Any]]:
    """A stepwise colorscale: integer z = i shows colours[i] (zmin 0, zmax len - 1)."""
    k = len(colours)
    if k == 1:
        return [[0, colours[0]], [1, colours[0]]]
    out: list[list[Any]] = []
    for i, c in enumerate(colours):
        out += [[i / k, c], [(i + 1) / k, c]]
    out[-1][0] = 1.0
    return out


def kv_pool(
    step: Any,
    *,
    n: int | None = None,
    prev: StepTrace | None = None,
    scenario: Any = None,
    columns: int = 16,
    theme: str = "light",
    lang: str = "en",
) -> go.Figure:
    """The KV cache's physical blocks after the step, coloured by owner (grey: shared by several
    requests or a batch with more requests than colours; vLLM's block 0 is the null block, never
    free, and the title counts the usable blocks: `kv_cache.num_usable_blocks`), with the blocks
    allocated this step, reused from the prefix cache and freed since the step before (`prev`,
    found in a run) marked."""
    t, before, src = one_step(step, n, scenario, prev)
    ident = Identity(src.req_ids())
    kv = t.kv_cache
    num_blocks = int(kv.get("num_blocks", 0))
    if num_blocks <= 0:
        raise ValueError(f"step: step {t.step} has no KV cache (kv_cache.num_blocks)")
    owners = {int(b): [str(r) for r in o] for b, o in kv.get("owners", {}).items()}
    usable = int(kv.get("num_usable_blocks", num_blocks))
    has_null = usable < num_blocks  # vLLM's block 0: never free, never handed out
    ref = np.asarray(kv.get("ref_cnt", np.zeros(num_blocks)), dtype=np.int64)
    groups, block_group = kv.get("kv_cache_groups") or [], kv.get("block_group") or {}
    v = theme_vars(theme)
    colours = [v["panel"], ident.grey]  # 0 free, 1 shared
    code: dict[str, int] = {}
    for rid in ident.ids:
        code[rid] = len(colours)
        colours.append(ident.colour(rid))
    cols = max(1, min(columns, num_blocks))
    rows = -(-num_blocks // cols)
    z = np.zeros((rows, cols), dtype=np.int64)
    text = [["" for _ in range(cols)] for _ in range(rows)]
    hover = [["" for _ in range(cols)] for _ in range(rows)]
    for b in range(num_blocks):
        r, c = divmod(b, cols)
        o = owners.get(b, [])
        z[r, c] = 0 if not o else 1 if len(o) > 1 or ident.big else code.get(o[0], 1)
        text[r][c] = str(b)
        held = ", ".join(o) if o else label("null_block" if has_null and b == 0 else "free", lang)
        refs = int(ref[b]) if b < len(ref) else 0
        hover[r][c] = f"{label('block', lang)} {b} · {label('owner', lang)}: {held} · ref_cnt {refs}"
        if str(b) in block_group:  # a hybrid model: the KV cache group whose table holds it
            g = int(block_group[str(b)])
            hover[r][c] += f" · group {g} ({groups[g]['kind']})"
    for r in range(rows):  # cells past the pool: nothing
        for c in range(cols):
            if r * cols + c >= num_blocks:
                z[r, c] = 0
    fig = go.Figure(
        go.Heatmap(
            z=z,
            text=text,
            customdata=hover,
            texttemplate="%{text}",
            colorscale=_category_scale(colours),
            zmin=0,
            zmax=len(colours) - 1,
            showscale=False,
            xgap=2,
            ygap=2,
            hovertemplate="%{customdata}<extra></extra>",
            name=label("kv_pool", lang),
        )
    )
    new_blocks = {int(b) for bs in t.scheduler.get("new_block_ids", {}).values() for b in flat_blocks(bs)}
    cached_before = {int(b) for b in (before.kv_cache.get("block_hash", {}) if before else {})}
    held_before = {int(b) for b in (before.kv_cache.get("owners", {}) if before else {})}
    reused = sorted(b for b in new_blocks if b in cached_before or b in held_before)
    allocated = sorted(new_blocks - set(reused))
    freed = sorted(held_before - set(owners)) if before is not None else []
    marks = (
        ("allocated", allocated, "circle-open", v["ok"]),
        ("reused", reused, "diamond-open", v["accent"]),
        ("freed", freed, "x-thin-open", v["bad"]),
    )
    for key, blocks, symbol, colour in marks:
        fig.add_trace(
            go.Scatter(
                x=[b % cols for b in blocks],
                y=[b // cols for b in blocks],
                customdata=blocks,
                mode="markers",
                marker={"symbol": symbol, "size": 22, "color": colour, "line": {"width": 3, "color": colour}},
                name=label(key, lang),
                hovertemplate=f"{label(key, lang)}: {label('block', lang)} %{{customdata}}<extra></extra>",
                showlegend=True,
            )
        )
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, autorange="reversed")
    size = f"{num_blocks} × block_size {kv.get('block_size')}, {usable} {label('usable', lang)}"
    title = f"{label('kv_pool', lang)} · {label('step', lang)} {t.step} ({size})"
    return apply_theme(fig, theme, title, height=max(200, 90 + 34 * rows))


def block_table(
    step: Any,
    *,
    n: int | None = None,
    scenario: Any = None,
    group: int = 0,
    theme: str = "light",
    lang: str = "en",
) -> go.Figure:
    """The step's block table (V1's block_table; Model Runner V2's input_block_tables, one row per
    batch row; nano-vllm's block_tables): a cell per entry with its block id, the rows its requests
    hold tinted in their colours. `group`: which KV cache group's table (a hybrid model has one per
    group, `block_table_g1`, ...; a sliding-window group's 0 entries past its window are the null
    block)."""
    t, _, src = one_step(step, n, scenario)
    suffix = f"_g{group}" if group else ""
    name = next((nm + suffix for nm in BLOCK_TABLES if nm + suffix in t.array_entries), None)
    if name is None:
        groups = t.kv_cache.get("kv_cache_groups") or [{}]
        if group >= len(groups) or group < 0:
            raise ValueError(f"group: the run has {len(groups)} KV cache group(s), numbered from 0")
        raise ValueError(f"step: step {t.step} has no block table (one of {', '.join(BLOCK_TABLES)})")
    table = np.asarray(t.array_entries[name].value)
    ident = Identity(src.req_ids())
    v = theme_vars(theme)
    req_ids = [str(r) for r in t.batch.get("req_ids", [])]
    by_slot = {int(s): str(r) for r, s in t.batch.get("slots", {}).items()} if name == "block_tables" else {}
    owners = {int(b): set(map(str, o)) for b, o in t.kv_cache.get("owners", {}).items()}
    colours = [v["panel"]]
    code: dict[str, int] = {}
    z = np.zeros(table.shape, dtype=np.int64)
    ylabels = []
    for r in range(table.shape[0]):
        rid = by_slot.get(r) if by_slot else (req_ids[r] if r < len(req_ids) else None)
        ylabels.append(
            (f"slot {r}" if by_slot else f"{label('row', lang)} {r}") + (f" · {rid}" if rid else "")
        )
        if rid is None:
            continue
        if rid not in code:
            code[rid] = len(colours)
            colours.append(ident.colour(rid))
        held = [j for j, b in enumerate(table[r].tolist()) if rid in owners.get(int(b), set())]
        z[r, held] = code[rid]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            customdata=table,
            text=[[str(x) for x in row] for row in table.tolist()],
            texttemplate="%{text}",
            colorscale=_category_scale(colours),
            zmin=0,
            zmax=max(1, len(colours) - 1),
            showscale=False,
            xgap=1,
            ygap=1,
            y=ylabels,
            hovertemplate=f"{name}[%{{y}}, %{{x}}] = %{{customdata}}<extra></extra>",
            name=name,
        )
    )
    fig.update_xaxes(title=label("column", lang), dtick=1)
    fig.update_yaxes(type="category", autorange="reversed")
    title = f"{name} · {label('step', lang)} {t.step}"
    groups = t.kv_cache.get("kv_cache_groups") or []
    if len(groups) > 1:
        g = groups[group]
        window = f", window {g['sliding_window']}" if g.get("sliding_window") else ""
        title += f" · group {group}: {g['kind']} {g['layers']}{window}"
    return apply_theme(fig, theme, title, height=max(180, 80 + 28 * table.shape[0]))
