"""pagedviz.record's recorders on vLLM 0.33.0's real Scheduler and AsyncScheduler (pytest -m fidelity).

The recorder classes replace the scheduler of the engine `vllm`'s V1 side
(pagedviz.core.vllm_engine.v1), which is then driven as the differential suite drives it,
with pagedviz's sampled tokens. Each recording is then imported
(core/replay.py, no vLLM): the replay must reproduce, step for step, what vLLM's scheduler did
(scheduled tokens, new, resumed, preempted and finished requests, block ids) and the arrays of
pagedviz's own trace of the same scenario, and pagedviz's scheduler must agree to the end.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from pagedviz.core import Scenario, make_engine
from pagedviz.core.presets import preset_dict
from pagedviz.core.recording import read_recording
from pagedviz.core.replay import import_recording

vllm_side = pytest.importorskip(
    "pagedviz.core.vllm_engine.v1",
    reason="the vLLM 0.33.0 wheel is not installed (run scripts/fidelity-deps.sh)",
)
sys.path.insert(0, str(Path(__file__).parent))  # test_vllm_fidelity, beside this file
from test_vllm_fidelity import ARRAYS, _as_vllm, _vllm_new_blocks, scenarios  # noqa: E402

from pagedviz.record import (  # noqa: E402
    RecorderConfigError,
    RecordingAsyncScheduler,
    RecordingScheduler,
)

pytestmark = pytest.mark.fidelity


def _side(scenario: Scenario) -> Any:
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


def _recording_side(scenario: Scenario, path: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> Any:
    """The V1 side with its scheduler replaced by a recorder writing to `path`."""
    monkeypatch.setenv("PAGEDVIZ_RECORD", str(path))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    side = _side(scenario)
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
    side = _recording_side(scenario, path, monkeypatch, **env)
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
                    "new_block_ids": _vllm_new_blocks(out),
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


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(scenario=scenarios())
def test_a_recording_of_vllms_scheduler_imports_as_what_it_scheduled(
    scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rec.jsonl"
    check_import(scenario, path, record(scenario, path, monkeypatch))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(scenario=scenarios(async_scheduling=True))
def test_a_recording_of_vllms_async_scheduler_imports_as_what_it_scheduled(
    scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rec.jsonl"
    check_import(scenario, path, record(scenario, path, monkeypatch))


def test_every_line_is_on_disk_when_update_from_output_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = _as_vllm(preset_dict("demo-preemption"))
    path = tmp_path / "rec.jsonl"
    side = _recording_side(scenario, path, monkeypatch)
    for n, t in enumerate(make_engine(scenario).run(), start=1):
        side.step(t.sampled_token_ids)
        lines = path.read_text().splitlines()
        assert len(lines) == n + 1  # the header, then one line per step so far
        assert json.loads(lines[-1])["step"] == n


def test_the_header_holds_what_a_replay_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = _as_vllm(preset_dict("demo-preemption"), async_scheduling=True)
    path = tmp_path / "rec.jsonl"
    record(scenario, path, monkeypatch)
    header = json.loads(path.read_text().splitlines()[0])
    cfg = scenario.config
    assert header["vllm_version"] == "0.33.0"
    assert header["scheduler"] == "RecordingAsyncScheduler" and header["async_scheduling"] is True
    assert header["runner"] == "v1"
    assert (header["block_size"], header["num_kv_blocks"], header["max_num_seqs"]) == (
        cfg.block_size,
        cfg.num_kv_blocks,
        cfg.max_num_reqs,
    )
    assert header["kv_cache_groups"] == [
        {"kind": "FullAttentionSpec", "block_size": cfg.block_size, "num_layers": 1}
    ]


def test_redaction_writes_counts_not_token_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = _as_vllm(preset_dict("demo-preemption"))
    path = tmp_path / "rec.jsonl"
    record(scenario, path, monkeypatch, PAGEDVIZ_RECORD_REDACT="1")
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines[0]["redacted"] is True
    prompts = [a["prompt_token_ids"] for s in lines[1:] for a in s["arrivals"]]
    assert prompts and all(isinstance(p, int) for p in prompts)
    assert all(isinstance(v, int) for s in lines[1:] for v in (s["sampled"] or {}).values())
    with open(path, "rb") as f:
        imported = import_recording(*read_recording(f))
    assert any("synthetic" in n for n in imported.notes)
    assert imported.agreement.diverges_at is None


def test_the_size_cap_stops_the_recording_not_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    scenario = _as_vllm(preset_dict("demo-preemption"))
    path = tmp_path / "rec.jsonl"
    seen = record(scenario, path, monkeypatch, PAGEDVIZ_RECORD_MAX_MB="0.002")
    lines = path.read_text().splitlines()
    assert 1 < len(lines) < len(seen) + 1
    assert path.stat().st_size <= 0.002 * (1 << 20)


def test_a_data_parallel_rank_writes_its_own_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = _as_vllm(preset_dict("demo-preemption"))
    monkeypatch.setenv("PAGEDVIZ_RECORD", str(tmp_path / "rec.jsonl"))
    side = vllm_side.VllmSide(scenario)
    side.config.parallel_config.data_parallel_size = 2
    side.config.parallel_config.data_parallel_rank = 1
    RecordingScheduler(
        vllm_config=side.config,
        kv_cache_config=vllm_side.kv_cache_config(scenario),
        structured_output_manager=vllm_side.StructuredOutputManager(side.config),
        block_size=scenario.config.block_size,
    ).shutdown()
    assert (tmp_path / "rec.dp1.jsonl").exists() and not (tmp_path / "rec.jsonl").exists()


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_a_class_that_would_change_the_server_is_refused_at_start(
    async_scheduling: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = _as_vllm(preset_dict("demo-preemption"), async_scheduling=async_scheduling)
    monkeypatch.setenv("PAGEDVIZ_RECORD", str(tmp_path / "rec.jsonl"))
    side = _side(scenario)
    wrong = RecordingScheduler if async_scheduling else RecordingAsyncScheduler
    right = "RecordingAsyncScheduler" if async_scheduling else "RecordingScheduler"
    with pytest.raises(RecorderConfigError, match=f"pagedviz.record.{right}"):
        wrong(
            vllm_config=side.config,
            kv_cache_config=vllm_side.kv_cache_config(scenario),
            structured_output_manager=vllm_side.StructuredOutputManager(side.config),
            block_size=scenario.config.block_size,
        )


def test_an_unknown_vllm_version_is_refused_at_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm

    scenario = _as_vllm(preset_dict("demo-preemption"))
    monkeypatch.setenv("PAGEDVIZ_RECORD", str(tmp_path / "rec.jsonl"))
    monkeypatch.setattr(vllm, "__version__", "0.34.0")
    side = vllm_side.VllmSide(scenario)
    with pytest.raises(RecorderConfigError, match="0.34.0.*pagedviz\\[vllm\\]"):
        RecordingScheduler(
            vllm_config=side.config,
            kv_cache_config=vllm_side.kv_cache_config(scenario),
            structured_output_manager=vllm_side.StructuredOutputManager(side.config),
            block_size=scenario.config.block_size,
        )


def test_a_failure_after_start_stops_the_recording_and_never_reaches_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = _as_vllm(preset_dict("demo-preemption"))
    path = tmp_path / "rec.jsonl"
    side = _recording_side(scenario, path, monkeypatch)
    for steps, t in enumerate(make_engine(scenario).run()):
        if steps == 2:
            side.scheduler._pagedviz.file.close()  # the disk goes away under the recorder
        side.step(t.sampled_token_ids)
    assert side.scheduler.get_num_unfinished_requests() == 0
    assert not side.scheduler._pagedviz.active


def test_the_shipped_example_is_what_the_recorder_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """core/recordings/: each example, recorded afresh from its preset, is byte for byte the
    shipped file (PAGEDVIZ_REGENERATE_EXAMPLES=1 rewrites them)."""
    import os

    import pagedviz.core.recordings as rec

    for name, ex in rec.EXAMPLES.items():
        if "preset" not in ex:  # made otherwise (its "made_by" checks it)
            continue
        path = tmp_path / ex["file"]
        record(_as_vllm(preset_dict(ex["preset"])), path, monkeypatch)
        shipped = Path(rec.__file__).parent / ex["file"]
        if os.environ.get("PAGEDVIZ_REGENERATE_EXAMPLES") == "1":
            shipped.write_bytes(path.read_bytes())
        assert path.read_bytes() == shipped.read_bytes(), name
