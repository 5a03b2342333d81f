"""The null block and one pool count (issue 37, point 3). Block 0 is vLLM's null block
(`BlockPool.null_block`): never free, never handed out, not in `get_num_free_blocks()` nor in the
pool's usable count (`get_usage` divides by `num_gpu_blocks - 1`). An imported recording's free
queue holds the recorded number of blocks at every step and never block 0; the CLI's import
prints no block 0; and every view reads one pool size, `kv_cache.num_usable_blocks`: the step
trace, the overview's step summaries (the step tooltip), the metrics, the run-metrics figure (the
run chart's pool line, through the API and pagedviz.plots) and the KV pool figure's title."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from pagedviz import plots
from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core import Scenario, load_preset, make_engine
from pagedviz.core.narrate import narrate
from pagedviz.core.presets import preset_dict
from pagedviz.core.recording import read_recording
from pagedviz.core.replay import import_recording
from tests.support.cli import in_process
from tests.support.recording_cases import EXAMPLE, LINES, scenario, write_recording

POOL = "KV pool (usable blocks)"


def recorded_free(lines: list[bytes]) -> list[int]:
    return [json.loads(x)["num_free_blocks"] for x in lines[1:]]


def synthetic(tmp_path: Path, sc: Scenario) -> list[bytes]:
    path = tmp_path / "rec.jsonl"
    write_recording(sc, path)
    return path.read_bytes().splitlines(keepends=True)


@pytest.mark.parametrize("which", ["shipped", "demo-preemption", "long"])
def test_an_imported_recording_has_the_recorded_free_blocks_at_every_step_and_never_block_0(
    which: str, tmp_path: Path
) -> None:
    if which == "shipped":
        lines = list(LINES)
    elif which == "long":
        lines = synthetic(tmp_path, scenario(40, 3, 24))
    else:
        sc = Scenario.from_dict(
            {**preset_dict(which), "config": {**preset_dict(which)["config"], "model": None}}
        )
        lines = synthetic(tmp_path, sc)
    header, steps = read_recording(lines)
    imported = import_recording(header, steps)
    want = recorded_free(lines)
    assert len(imported.traces) == len(want)
    prev = None
    for t, free in zip(imported.traces, want):
        kv = t.kv_cache
        assert len(kv["free_block_queue"]) == free, f"step {t.step}"
        assert 0 not in kv["free_block_queue"], f"step {t.step}: the null block counted as free"
        assert kv["num_usable_blocks"] == header.num_kv_blocks - 1
        assert len(kv["owners"]) + free == kv["num_usable_blocks"]
        # the narration's count is the recorded one, and it names no block 0
        pool = next(i for i in narrate(t, prev, imported.scenario.config) if i["key"] == "pool")
        assert pool["text"]["en"].startswith(f"The pool has {free} free block")
        assert pool["text"]["zh"].startswith(f"调度之后块池还有 {free} 个空闲块")
        assert {"kind": "block", "id": 0} not in pool["refs"]
        prev = t
    assert not [n for n in imported.notes if "free blocks, its block lists leave" in n]


def test_the_shipped_recording_frees_the_blocks_a_native_run_frees_in_its_free_queue_order() -> None:
    """The same scenario run natively (vLLM's rules) holds the same free queue at every step, in
    the same order (the recorder notes what vLLM put back on its free queue, and where): step 1
    takes 7 and 8 next, not 0, and the narration says so as for a native run."""
    imported = import_recording(*read_recording(LINES))
    native = list(make_engine(Scenario.from_dict(imported.scenario.to_dict())).run())
    assert len(native) == len(imported.traces)
    for a, b in zip(native, imported.traces):
        assert a.kv_cache["free_block_queue"] == b.kv_cache["free_block_queue"], f"step {a.step}"
    assert imported.traces[0].kv_cache["free_block_queue"] == [7, 8]
    # a step whose queue is not in id order (preemption and finishes put blocks back at the head)
    assert any(t.kv_cache["free_block_queue"] != sorted(t.kv_cache["free_block_queue"]) for t in native)
    prev = None
    for a, b in zip(native, imported.traces):
        pool = next(i for i in narrate(b, prev, imported.scenario.config) if i["key"] == "pool")
        own = next(i for i in narrate(a, prev, imported.scenario.config) if i["key"] == "pool")
        assert pool["text"] == own["text"], f"step {b.step}"
        head = b.kv_cache["free_block_queue"][:4]
        if head:
            assert (
                f"the next allocations take {', '.join(map(str, head))} from the head" in pool["text"]["en"]
            )
            assert f"下一次分配从空闲队列头部取 {', '.join(map(str, head))}" in pool["text"]["zh"]
        prev = b


def test_an_older_recording_without_freed_shows_free_blocks_in_id_order_and_says_order_unknown() -> None:
    """A recording from before the recorder noted the free queue (no `freed` on its steps) still
    imports: the count is the recorded one, the blocks in id order, and the narration says the
    order is not known rather than what the next allocation takes."""
    lines = [LINES[0]]
    for raw in LINES[1:]:
        d = json.loads(raw)
        d.pop("freed", None)
        lines.append(json.dumps(d).encode() + b"\n")
    imported = import_recording(*read_recording(lines))
    want = recorded_free(lines)
    prev = None
    for t, free in zip(imported.traces, want):
        q = t.kv_cache["free_block_queue"]
        assert len(q) == free and q == sorted(q) and 0 not in q, f"step {t.step}"
        assert t.kv_cache["free_queue_order"].startswith("not recorded")
        pool = next(i for i in narrate(t, prev, imported.scenario.config) if i["key"] == "pool")
        if q:
            assert "not the free queue's order" in pool["text"]["en"], f"step {t.step}"
            assert "没有记下空闲队列的顺序" in pool["text"]["zh"], f"step {t.step}"
            assert "the next allocations take" not in pool["text"]["en"]
        prev = t


def test_a_recording_whose_free_count_its_block_lists_contradict_is_noted_naming_the_step() -> None:
    lines = list(LINES)
    d = json.loads(lines[2])
    d["num_free_blocks"] += 1
    lines[2] = json.dumps(d).encode() + b"\n"
    notes = import_recording(*read_recording(lines)).notes
    assert any(n.startswith(f"step 2: the recording says {d['num_free_blocks']} free blocks") for n in notes)


def test_the_cli_import_never_prints_block_0_in_the_free_queue(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    path.write_bytes(EXAMPLE)
    r = in_process("import", str(path), columns=200)  # the command's real main(), in this process
    assert r.returncode == 0, r.stderr
    queues = re.findall(r"free_block_queue \(head first\): \[([^\]]*)\]", r.stdout)
    want = recorded_free(list(LINES))
    assert len(queues) == len(want)
    for q, free in zip(queues, want):
        ids = [int(x) for x in q.split(",") if x.strip()]
        assert 0 not in ids and len(ids) == free
    usable = json.loads(LINES[0])["num_kv_blocks"] - 1
    assert re.findall(r"KV pool: (\d+) of (\d+) usable blocks free", r.stdout) == [
        (str(f), str(usable)) for f in want
    ]


# ---------------------------------------------------------------- one pool size in every view


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Settings(max_runs=4, compute_in="thread")))


def ys(trace: dict[str, Any]) -> list[int]:
    y = trace["y"]
    if isinstance(y, dict):  # a typed array
        return np.frombuffer(base64.b64decode(y["bdata"]), dtype=np.dtype(y["dtype"])).tolist()
    return list(y)


@pytest.mark.parametrize(
    "preset,usable", [("seed-001", 15), ("demo-v2-slots", 8), ("nanovllm-block-tables", 16)]
)
def test_every_view_reads_one_pool_size(client: TestClient, preset: str, usable: int) -> None:
    """vllm: num_kv_blocks less the null block (seed-001: 16 -> 15, demo-v2-slots: 9 -> 8);
    nano-vllm has no null block (all 16)."""
    sc = load_preset(preset)
    assert usable == sc.config.num_kv_blocks - (0 if sc.flavor == "nanovllm" else 1)
    r = client.post("/api/runs", json={"preset": preset})
    assert r.status_code == 201
    run_id = r.json()["run_id"]
    overview = client.get(f"/api/runs/{run_id}").json()
    # the step tooltip's "used / pool"
    assert {s["kv_pool_blocks"] for s in overview["steps"]} == {usable}
    # the queue bar's pool (the step's trace)
    for n in (1, overview["num_steps"]):
        kv = client.get(f"/api/runs/{run_id}/steps/{n}").json()["kv_cache"]
        assert kv["num_usable_blocks"] == usable
        assert (0 not in kv["free_block_queue"]) or sc.flavor == "nanovllm"
    metrics = client.get(f"/api/runs/{run_id}/metrics").json()
    assert metrics["totals"]["num_usable_blocks"] == usable
    for m, s in zip(metrics["steps"], overview["steps"]):
        assert m["blocks_used"] + m["blocks_free"] == usable, m
        assert m["blocks_used"] == s["kv_blocks_in_use"] <= usable
    # the run chart's pool line, as the page gets it and as pagedviz.plots draws it
    fig = client.get(f"/api/runs/{run_id}/figures/run_metrics").json()
    by_name = {d["name"]: d for d in fig["data"]}
    assert set(ys(by_name[POOL])) == {usable}
    assert max(ys(by_name["KV blocks in use"])) <= usable
    local = {d.name: d for d in plots.run_metrics(preset).data}
    assert set(local[POOL].y) == {usable}
    title = plots.kv_pool(preset, n=1).layout.title.text
    assert f"{sc.config.num_kv_blocks} × block_size {sc.config.block_size}, {usable} usable" in title


def test_the_kv_pool_figure_says_block_0_is_the_null_block_not_free() -> None:
    fig = plots.kv_pool("seed-001", n=1)
    hover = fig.data[0].customdata
    assert "null block" in hover[0][0] and "free" not in hover[0][0]
    nano = plots.kv_pool("nanovllm-block-tables", n=1).data[0].customdata
    assert "null block" not in nano[0][0]
