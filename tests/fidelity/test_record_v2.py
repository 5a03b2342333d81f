"""pagedviz.record on vLLM 0.33.0's scheduler for Model Runner V2 (pytest -m fidelity): the
recorders replace the V2 side's scheduler (pagedviz.core.vllm_engine.v2), driven with pagedviz's tokens; each
recording's import (core/replay.py, the V2 runner as recorded) reproduces what vLLM scheduled
(resumed requests travel as new ones, as V2 gets them) and pagedviz's own V2 arrays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from pagedviz.core import Scenario, make_engine
from pagedviz.core.recording import read_recording
from pagedviz.core.replay import import_recording
from tests.support.fidelity_env import require_triton
from tests.support.strategies import V2_FIDELITY, scenarios

require_triton()
from vllm.config import CUDAGraphMode  # noqa: E402

from pagedviz.core.vllm_engine import v2  # noqa: E402
from pagedviz.record import RecordingAsyncScheduler, RecordingScheduler  # noqa: E402
from tests.support.vllm_v1 import vllm_new_blocks  # noqa: E402
from tests.support.vllm_v2 import REQ_ARRAYS, TOKEN_ARRAYS  # noqa: E402

SETTINGS = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def record_v2(scenario: Scenario, path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, list[int]]]:
    """Drive a recorder as the V2 side's scheduler; every SchedulerOutput vLLM made, in order, with
    vLLM's free queue right after that schedule() (block ids, head first)."""
    monkeypatch.setenv("PAGEDVIZ_RECORD", str(path))
    side = v2.VllmV2Side(scenario)
    cfg = scenario.config
    cls = RecordingAsyncScheduler if side.config.scheduler_config.async_scheduling else RecordingScheduler
    # the V2 side hands capture sizes to its own graph manager; a server's compilation config holds them
    sizes = cfg.cudagraph_capture_sizes
    side.config.compilation_config.cudagraph_capture_sizes = sorted(sizes) if sizes else None
    if sizes:  # the CPU platform turns CUDA graphs off; a GPU server keeps its mode
        side.config.compilation_config.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    with v2._env(VLLM_USE_V2_MODEL_RUNNER="1"):
        side.scheduler = cls(
            vllm_config=side.config,
            kv_cache_config=v2.kv_cache_config(scenario),
            structured_output_manager=v2.StructuredOutputManager(side.config),
            block_size=cfg.block_size,
        )
    assert side.scheduler.use_v2_model_runner
    outs: list[tuple[Any, list[int]]] = []
    schedule = side.scheduler.schedule
    pool = side.scheduler.kv_cache_manager.block_pool

    def schedule_and_look(*args: Any, **kwargs: Any) -> Any:
        out = schedule(*args, **kwargs)
        outs.append((out, [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]))
        return out

    side.scheduler.schedule = schedule_and_look
    for t in make_engine(scenario).run():
        if cfg.async_scheduling:
            side.async_step(t.sampled_token_ids)
        else:
            side.step(t.sampled_token_ids)
    side.scheduler.shutdown()
    return outs


def check_v2_import(scenario: Scenario, path: Path, outs: list[tuple[Any, list[int]]]) -> None:
    with open(path, "rb") as f:
        header, steps = read_recording(f)
    assert header.runner == "v2"
    imported = import_recording(header, steps)
    assert len(imported.traces) == len(outs)
    for t, (out, queue) in zip(imported.traces, outs):
        s, where = t.scheduler, f"step {t.step}"
        assert list(s["num_scheduled_tokens"].items()) == list(out.num_scheduled_tokens.items()), where
        assert s["new_req_ids"] == [r.req_id for r in out.scheduled_new_reqs], where
        assert sorted(s["preempted_req_ids"]) == sorted(out.preempted_req_ids or ()), where
        assert sorted(s["finished_req_ids"]) == sorted(out.finished_req_ids), where
        assert s["new_block_ids"] == vllm_new_blocks(out), where
        # vLLM's get_num_free_blocks() at that schedule(): the null block 0 is never free
        free = t.kv_cache["free_block_queue"]
        assert len(free) == steps[t.step - 1].num_free_blocks and 0 not in free, where
        # and its free queue is vLLM's, in vLLM's order (head first: what the next allocation takes)
        assert free == queue, where
    if not scenario.config.async_scheduling:
        own = list(make_engine(scenario).run())
        assert len(own) == len(imported.traces)
        for a, b in zip(own, imported.traces):
            for name in (*REQ_ARRAYS, *TOKEN_ARRAYS):
                if name in a.arrays:
                    assert a.arrays[name].tolist() == b.arrays[name].tolist(), f"step {a.step}: {name}"
            assert a.sampled_token_ids == b.sampled_token_ids, f"step {a.step}"
    assert imported.agreement.diverges_at is None, imported.agreement.text


@SETTINGS
@given(scenario=scenarios(V2_FIDELITY))
def test_a_v2_recording_imports_as_what_vllm_scheduled(
    scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rec.jsonl"
    check_v2_import(scenario, path, record_v2(scenario, path, monkeypatch))


@SETTINGS
@given(scenario=scenarios(V2_FIDELITY, async_scheduling=True))
def test_a_v2_async_recording_imports_as_what_vllm_scheduled(
    scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rec.jsonl"
    check_v2_import(scenario, path, record_v2(scenario, path, monkeypatch))
