"""The recorder's driver and check (tests/fidelity): pagedviz.record's recorders replace the
scheduler of the engine `vllm`'s V1 side (pagedviz.core.vllm_engine.v1), which is then driven as
the differential suite drives it, with pagedviz's sampled tokens; `check_import` imports the
recording (core/replay.py, no vLLM) and asserts that the replay reproduces, step for step, what
vLLM's scheduler did (scheduled tokens, new, resumed, preempted and finished requests, block ids,
the free queue in vLLM's order) and the arrays of pagedviz's own trace of the same scenario, and
that pagedviz's scheduler agrees to the end.

Callers check first that vLLM is installed (tests.support.fidelity_env.require_vllm).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pagedviz.core import Scenario, make_engine
from pagedviz.core.recording import read_recording
from pagedviz.core.replay import import_recording
from pagedviz.core.vllm_engine import v1 as vllm_side
from pagedviz.record import RecordingAsyncScheduler, RecordingScheduler
from tests.support.vllm_v1 import ARRAYS, vllm_new_blocks


def v1_side(scenario: Scenario) -> Any:
    """The V1 side; its config says async_scheduling as the scenario does (vLLM's CPU
    platform turns the setting off in VllmConfig, where a GPU server keeps it on)."""
    side = vllm_side.VllmSide(scenario)
    side.config.scheduler_config.async_scheduling = scenario.config.async_scheduling
    # a server's compilation config holds the capture sizes the inputs are padded to
    sizes = scenario.config.cudagraph_capture_sizes
    side.config.compilation_config.cudagraph_capture_sizes = sorted(sizes) if sizes else None
    if sizes:  # the CPU platform turns CUDA graphs off; a GPU server keeps its mode
        from vllm.config import CUDAGraphMode

        side.config.compilation_config.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    return side


def recording_side(scenario: Scenario, path: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> Any:
    """The V1 side with its scheduler replaced by a recorder writing to `path`."""
    monkeypatch.setenv("PAGEDVIZ_RECORD", str(path))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    side = v1_side(scenario)
    cls = RecordingAsyncScheduler if scenario.config.async_scheduling else RecordingScheduler
    side.scheduler = cls(
        vllm_config=side.config,
        kv_cache_config=vllm_side.kv_cache_config(scenario),
        structured_output_manager=vllm_side.StructuredOutputManager(side.config),
        block_size=scenario.config.block_size,
    )
    return side


def record(
    scenario: Scenario, path: Path, monkeypatch: pytest.MonkeyPatch, **env: str
) -> list[dict[str, Any]]:
    """Drive the recorder on the scenario (pagedviz's tokens); what vLLM scheduled, per schedule()."""
    side = recording_side(scenario, path, monkeypatch, **env)
    seen: list[dict[str, Any]] = []
    # vLLM's own free queue (ids, head first) right after each schedule(), by the output it returned
    queues: dict[int, tuple[Any, list[int]]] = {}
    schedule = side.scheduler.schedule

    def schedule_and_look(*args: Any, **kwargs: Any) -> Any:
        out = schedule(*args, **kwargs)
        q = side.scheduler.kv_cache_manager.block_pool.free_block_queue
        queues[id(out)] = (out, [b.block_id for b in q.get_all_free_blocks()])
        return out

    side.scheduler.schedule = schedule_and_look
    for t in make_engine(scenario).run():
        if scenario.config.async_scheduling:
            loop, _ = side.async_step(t.sampled_token_ids)
            out = loop.scheduler_output
        else:
            out, _ = side.step(t.sampled_token_ids)
        if out is not None:
            seen.append(
                {
                    "num_scheduled_tokens": dict(out.num_scheduled_tokens),
                    "new_req_ids": [r.req_id for r in out.scheduled_new_reqs],
                    "resumed_req_ids": sorted(out.scheduled_cached_reqs.resumed_req_ids),
                    "preempted_req_ids": sorted(out.preempted_req_ids or ()),
                    "finished_req_ids": sorted(out.finished_req_ids),
                    "new_block_ids": vllm_new_blocks(out),
                    "free_queue": queues[id(out)][1],
                }
            )
    side.scheduler.shutdown()
    return seen


def check_import(scenario: Scenario, path: Path, seen: list[dict[str, Any]]) -> None:
    with open(path, "rb") as f:
        header, steps = read_recording(f)
    imported = import_recording(header, steps)
    # the batches vLLM's update_from_output consumed (all of them: the run ends with none in flight)
    assert len(imported.traces) == len(seen)
    for t, vs in zip(imported.traces, seen):
        s = t.scheduler
        where = f"step {t.step}"
        assert list(s["num_scheduled_tokens"].items()) == list(vs["num_scheduled_tokens"].items()), where
        assert s["new_req_ids"] == vs["new_req_ids"], where
        assert sorted(s["resumed_req_ids"]) == vs["resumed_req_ids"], where
        assert sorted(s["preempted_req_ids"]) == vs["preempted_req_ids"], where
        assert sorted(s["finished_req_ids"]) == vs["finished_req_ids"], where
        assert s["new_block_ids"] == vs["new_block_ids"], where
        # vLLM's get_num_free_blocks() at that schedule(): the null block 0 is never free
        free = t.kv_cache["free_block_queue"]
        assert len(free) == steps[t.step - 1].num_free_blocks and 0 not in free, where
        # and its free queue is vLLM's, in vLLM's order (head first: what the next allocation takes)
        assert free == vs["free_queue"], where
        assert not t.kv_cache["free_queue_order"].startswith("not recorded"), where
        assert t.kv_cache["num_usable_blocks"] == header.num_kv_blocks - 1, where
    # the arrays equal pagedviz's own trace of the scenario (synchronous: step for step)
    if not scenario.config.async_scheduling:
        own = list(make_engine(scenario).run())
        assert len(own) == len(imported.traces)
        for a, b in zip(own, imported.traces):
            assert a.batch["req_ids"] == b.batch["req_ids"], f"step {a.step}"
            for name in ARRAYS:
                if name in a.arrays:
                    assert a.arrays[name].tolist() == b.arrays[name].tolist(), f"step {a.step}: {name}"
            assert a.sampled_token_ids == b.sampled_token_ids, f"step {a.step}"
    assert imported.agreement.diverges_at is None, imported.agreement.text
    assert imported.agreement.agrees_up_to == len(seen)
