"""pagedviz.plots: each figure's data are the trace's numbers, requests keep the page's colours,
and bad input names the field."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from pagedviz import plots
from pagedviz.core import load_preset, make_engine
from pagedviz.plots.run import blocks_in_use
from pagedviz.plots.style import theme_vars

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def seed000():
    sc = load_preset("seed-000")
    return sc, list(make_engine(sc).run())


def test_palette_is_the_pages_palette():
    # one source: static/palette.json, which the page's views.js reads through its template too
    page = json.loads((ROOT / "static" / "palette.json").read_text())["identity"]
    assert (
        list(plots.palette()[0])
        == page["colours"]
        == re.findall(
            r"#[0-9A-Fa-f]{6}",
            '"#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#999999"',
        )
    )
    assert plots.palette()[1:] == (tuple(page["tints"]), 7)
    assert 'getElementById("palette")' in (ROOT / "static" / "views.js").read_text()


def test_dark_theme_takes_the_dark_css_colours():
    assert theme_vars("light")["bg"] == "#fff"
    assert theme_vars("dark")["bg"] == "#121212"
    fig = plots.run_metrics("seed-000", theme="dark")
    assert fig.layout.paper_bgcolor == "#121212"
    with pytest.raises(ValueError, match="theme"):
        plots.run_metrics("seed-000", theme="blue")


@pytest.mark.parametrize(
    "name", ["slot_mapping", "positions", "block_table", "seq_lens", "discard_request_mask"]
)
def test_array_heatmap_holds_the_traced_array(seed000, name):
    _, run = seed000
    t = run[2]
    fig = plots.array(t, name)
    z = np.asarray(fig.data[0].z)
    want = t.arrays[name]
    assert np.array_equal(z.reshape(want.shape), want.astype(np.int64) if want.dtype == bool else want)
    assert name in fig.layout.title.text


def test_array_table_lists_the_values_by_column(seed000):
    _, run = seed000
    fig = plots.array("seed-000", "block_table", n=3, kind="table")
    cells = fig.data[0].cells.values
    assert [list(col) for col in cells[1:]] == run[2].arrays["block_table"].T.tolist()


def test_array_names_the_arrays_a_step_has_when_asked_for_another(seed000):
    with pytest.raises(ValueError, match="name: step 3 has no array 'nope'; it has .*slot_mapping"):
        plots.array(seed000[1][2], "nope")


def test_run_metrics_series_are_the_traces_numbers(seed000):
    sc, run = seed000
    fig = plots.run_metrics(run, scenario=sc)
    by_name = {d.name: d for d in fig.data}
    assert list(by_name["tokens scheduled"].y) == [t.scheduler["total_num_scheduled_tokens"] for t in run]
    assert list(by_name["KV blocks in use"].y) == [blocks_in_use(t) for t in run]
    assert list(by_name["running (scheduled)"].y) == [len(t.scheduler["num_scheduled_tokens"]) for t in run]
    assert set(by_name["token budget (max_num_batched_tokens)"].y) == {sc.config.max_num_batched_tokens}
    # the pool as vLLM counts it: num_kv_blocks less the null block
    assert set(by_name["KV pool (usable blocks)"].y) == {sc.config.num_kv_blocks - 1}
    assert list(by_name["tokens scheduled"].x) == [t.step for t in run]


def test_run_metrics_of_a_bare_run_asks_for_its_scenario(seed000):
    with pytest.raises(ValueError, match="scenario: a list of step traces carries no token budget"):
        plots.run_metrics(seed000[1])


def test_run_metrics_counts_preemptions_and_prefix_cache_hits():
    pre = plots.series(plots.resolve("demo-preemption").steps)
    assert (
        sum(pre["preempted"])
        == sum(len(t.scheduler["preempted_req_ids"]) for t in plots.resolve("demo-preemption").steps)
        > 0
    )
    hits = plots.series(plots.resolve("demo-prefix-cache").steps)["hits"]
    assert max(hits) > 0 and max(hits) % 4 == 0  # whole blocks of 4 tokens


def test_timeline_covers_every_scheduled_token_of_every_request(seed000):
    sc, run = seed000
    fig = plots.timeline(run, scenario=sc)
    got: dict[str, int] = {}
    for d in fig.data:
        if d.type == "bar":
            for rid, cd in zip(d.y, d.customdata):
                got[rid] = got.get(rid, 0) + int(cd[2])
    want: dict[str, int] = {}
    for t in run:
        for rid, n in t.scheduler["num_scheduled_tokens"].items():
            want[rid] = want.get(rid, 0) + n
    assert got == want
    assert list(fig.layout.yaxis.categoryarray) == [r.id for r in sc.requests]


def test_timeline_bars_take_each_requests_colour(seed000):
    sc, run = seed000
    fig = plots.timeline(run, scenario=sc)
    colours = plots.palette()[0]
    prefill = next(d for d in fig.data if d.name == "prefill chunk")
    for rid, c in zip(prefill.y, prefill.marker.color):
        assert c == colours[[r.id for r in sc.requests].index(rid)]


def test_timeline_marks_preemptions_and_finishes():
    src = plots.resolve("demo-preemption")
    fig = plots.timeline("demo-preemption")
    marks = {d.name: sorted(zip(d.y, d.x)) for d in fig.data if d.type == "scatter"}
    want = sorted((str(r), t.step) for t in src.steps for r in t.scheduler["preempted_req_ids"])
    assert marks["preempted"] == want
    fin = sorted((str(r), t.step) for t in src.steps for r in t.scheduler["finished_req_ids"])
    assert marks["finished"] == fin


def test_kv_pool_colours_blocks_by_owner_and_marks_reuse():
    src = plots.resolve("demo-prefix-cache")
    t = src.step(3)
    fig = plots.kv_pool("demo-prefix-cache", n=3)
    heat = fig.data[0]
    cols = len(heat.z[0])
    owners = {int(b): o for b, o in t.kv_cache["owners"].items()}
    for b in range(t.kv_cache["num_blocks"]):
        code = heat.z[b // cols][b % cols]
        assert (code == 0) == (b not in owners)
        assert str(b) == heat.text[b // cols][b % cols]
    marks = {d.name: sorted(d.customdata) for d in fig.data[1:]}
    new = sorted(b for bs in t.scheduler["new_block_ids"].values() for b in bs)
    assert sorted(marks["allocated this step"] + marks["reused (prefix cache)"]) == new
    assert marks["reused (prefix cache)"]  # request b finds a's prompt blocks cached


def test_block_table_holds_each_runners_table():
    for pid, name in (("seed-000", "block_table"), ("demo-v2-slots", "input_block_tables")):
        t = plots.resolve(pid).step(2)
        fig = plots.block_table(pid, n=2)
        assert np.array_equal(np.asarray(fig.data[0].customdata), t.arrays[name])
        assert fig.data[0].name == name


def test_a_step_past_the_run_names_its_range():
    with pytest.raises(ValueError, match="n: the run has steps 1..8"):
        plots.kv_pool("seed-000", n=99)


def test_an_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError, match="no preset 'nope'; presets: .*seed-000"):
        plots.timeline("nope")


def test_zh_labels():
    fig = plots.timeline("seed-000", lang="zh")
    assert fig.layout.title.text == "每个请求的生命周期"


def test_block_table_draws_each_kv_cache_groups_table_and_names_the_group():
    from pagedviz.core import Scenario

    config = {
        "layer_types": ["full_attention", "sliding_attention"],
        "sliding_window": 8,
        "block_size": 4,
        "num_kv_blocks": 40,
        "max_model_len": 64,
        "model_runner": "v1",
        "async_scheduling": False,
        "model": None,
    }
    requests = [{"id": "a", "prompt_token_ids": list(range(1, 21)), "max_tokens": 4}]
    steps = list(make_engine(Scenario.from_dict({"config": config, "requests": requests})).run())
    t = steps[1]  # the window has dropped a's first sliding blocks
    fig = plots.block_table(t, group=1)
    assert np.array_equal(np.asarray(fig.data[0].customdata), t.arrays["block_table_g1"])
    assert "group 1: sliding_attention [1], window 8" in fig.layout.title.text
    assert "group 0: full_attention [0]" in plots.block_table(t).layout.title.text
    # the pool's hover names the group whose table holds each block
    hover = [h for row in plots.kv_pool(t).data[0].customdata for h in row]
    assert any("group 1 (sliding_attention)" in h for h in hover)
    with pytest.raises(ValueError, match="group: the run has 2 KV cache group"):
        plots.block_table(t, group=2)
