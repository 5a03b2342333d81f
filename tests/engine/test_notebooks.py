"""The example notebooks (docs/notebooks/) run top to bottom in a real IPython kernel (nbclient),
with no error in any cell, and every plotly figure they output holds the numbers of the trace it
was drawn from: the heatmaps' values are the step's arrays, the run metrics the steps' totals, the
timeline every request's scheduled tokens, the KV pool the step's owners."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pagedviz.core import Scenario, StepTrace, make_engine, preset_dict

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "docs" / "notebooks"
PLOTLY = "application/vnd.plotly.v1+json"


def run_of(preset: str, runner: str | None = None) -> list[StepTrace]:
    d = preset_dict(preset)
    if runner:
        d["config"]["model_runner"] = runner
    return list(make_engine(Scenario.from_dict(d)).run())


def hybrid_run() -> list[StepTrace]:
    """The hybrid notebook's scenario: issue 38's example (full attention beside a window of 8)."""
    config = {
        "layer_types": ["full_attention", "sliding_attention"],
        "sliding_window": 8,
        "block_size": 4,
        "num_kv_blocks": 40,
        "max_model_len": 64,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 64,
        "model_runner": "v1",
        "async_scheduling": False,
        "device": "cpu",
    }
    requests = [
        {"id": "a", "prompt_token_ids": list(range(1, 21)), "max_tokens": 8},
        {"id": "b", "prompt_token_ids": list(range(1, 13)), "max_tokens": 4},
    ]
    return list(make_engine(Scenario.from_dict({"config": config, "requests": requests})).run())


# the runs each notebook draws from
SOURCES = {
    "seed-000-five-requests.ipynb": lambda: [run_of("seed-000")],
    "seed-004-nano-vllm-prefill.ipynb": lambda: [run_of("seed-004")],
    "v1-vs-v2.ipynb": lambda: [run_of("seed-000", "v1"), run_of("seed-000", "v2")],
    "rest-client.ipynb": lambda: [run_of("seed-000")],
    "hybrid-kv-cache-groups.ipynb": lambda: [hybrid_run()],
}


def execute(path: Path) -> Any:
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    return nb


def figures(nb: Any) -> list[dict[str, Any]]:
    return [
        o["data"][PLOTLY]
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if PLOTLY in o.get("data", {})
    ]


def values(v: Any) -> np.ndarray:
    """A figure's array as numpy: plotly writes numpy arrays as typed arrays ({dtype, bdata, shape},
    base64) and lists as lists."""
    if isinstance(v, dict) and "bdata" in v:
        arr = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        shape = [int(x) for x in str(v.get("shape", len(arr))).split(",")]
        return arr.reshape(shape)
    return np.asarray(v)


def check_figure(fig: dict[str, Any], runs: list[list[StepTrace]]) -> str:
    """Asserts that `fig` holds its trace's numbers; answers what it checked."""
    title = fig["layout"]["title"]["text"]
    data = fig["data"]
    if title == "How the run evolves":
        tokens = next(d for d in data if d["name"] == "tokens scheduled")
        got_tokens = values(tokens["y"]).tolist()
        assert any(got_tokens == [t.scheduler["total_num_scheduled_tokens"] for t in r] for r in runs)
        # the pool line is the pool as vLLM counts it, the number every view shows
        pool = next(d for d in data if d["name"] == "KV pool (usable blocks)")
        assert set(values(pool["y"]).tolist()) == {runs[0][0].kv_cache["num_usable_blocks"]}
        return "run_metrics"
    if title == "Each request's life":
        got: dict[str, int] = {}
        for d in data:
            if d["type"] == "bar":
                for rid, cd in zip(d["y"], values(d["customdata"]).tolist()):
                    got[rid] = got.get(rid, 0) + int(cd[2])
        want: dict[str, int] = {}
        for t in runs[0]:
            for rid, n in t.scheduler["num_scheduled_tokens"].items():
                want[rid] = want.get(rid, 0) + n
        assert got == want
        return "timeline"
    m = re.match(r"KV pool · step (\d+)", title)
    if m:
        t = runs[0][int(m.group(1)) - 1]
        assert f", {t.kv_cache['num_usable_blocks']} usable)" in title
        owners = {int(b) for b in t.kv_cache["owners"]}
        heat = data[0]
        z = values(heat["z"])
        cols = z.shape[1]
        for b in range(t.kv_cache["num_blocks"]):
            assert (z[b // cols, b % cols] == 0) == (b not in owners), b
        return "kv_pool"
    m = re.match(r"(\w+) · step (\d+)", title)
    assert m, f"a figure the test does not know: {title!r}"
    name, n = m.group(1), int(m.group(2))
    run = next(r for r in runs if name in r[n - 1].arrays)
    want_arr = run[n - 1].arrays[name]
    heat = data[0]
    # a KV cache group's table (block_table_g1, ...) holds its ids in customdata as group 0's does
    tables = ("block_table", "input_block_tables")
    got = values(heat["customdata"] if re.sub(r"_g\d+$", "", name) in tables else heat["z"])
    assert np.array_equal(got.reshape(want_arr.shape), want_arr), title
    return name


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_notebook_runs_and_its_figures_hold_the_trace(name: str) -> None:
    nb = execute(NOTEBOOKS / name)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []
    figs = figures(nb)
    assert figs, "no plotly figure in the outputs"
    runs = SOURCES[name]()
    checked = [check_figure(f, runs) for f in figs]
    assert len(checked) == len(figs)
    if name.startswith("hybrid"):  # both groups' tables, and the pool holding them
        assert {"block_table", "block_table_g1", "kv_pool"} <= set(checked)
    if name.startswith("seed-000"):
        assert {"run_metrics", "timeline", "slot_mapping", "block_table", "kv_pool"} <= set(checked)
        html = [
            o["data"].get("text/html", "")
            for c in nb.cells
            if c.cell_type == "code"
            for o in c.outputs
            if "data" in o
        ]
        assert any("<iframe" in h and "http://127.0.0.1:" in h and "preset=seed-000" in h for h in html)


def test_every_notebook_is_checked() -> None:
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(SOURCES)


def test_a_figure_that_stops_matching_its_trace_fails_the_check() -> None:
    from pagedviz import plots

    run = run_of("seed-000")
    fig = json.loads(plots.array(run[2], "slot_mapping").to_json())  # as a notebook's output holds it
    assert check_figure(fig, [run]) == "slot_mapping"
    fig["data"][0]["z"] = (values(fig["data"][0]["z"]) + 1).tolist()
    with pytest.raises(AssertionError):
        check_figure(fig, [run])
