"""pagedviz.record's recorders on vLLM 0.33.0's real Scheduler and AsyncScheduler (pytest -m fidelity).

The recorder classes replace the scheduler of the engine `vllm`'s V1 side
(pagedviz.core.vllm_engine.v1), which is then driven as the differential suite drives it,
with pagedviz's sampled tokens. Each recording is then imported
(core/replay.py, no vLLM): the replay must reproduce, step for step, what vLLM's scheduler did
(scheduled tokens, new, resumed, preempted and finished requests, block ids) and the arrays of
pagedviz's own trace of the same scenario, and pagedviz's scheduler must agree to the end (the
driver and the check are tests/support/vllm_record.py's).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from pagedviz.core import Scenario, make_engine
from pagedviz.core.presets import preset_dict
from pagedviz.core.recording import read_recording
from pagedviz.core.replay import import_recording
from tests.support.fidelity_env import require_vllm
from tests.support.strategies import V1_FIDELITY, scenarios

require_vllm()
from pagedviz.core.vllm_engine import v1 as vllm_side  # noqa: E402
from pagedviz.record import RecorderConfigError, RecordingAsyncScheduler, RecordingScheduler  # noqa: E402
from tests.support.vllm_record import check_import, record, recording_side, v1_side  # noqa: E402
from tests.support.vllm_v1 import as_vllm  # noqa: E402


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(scenario=scenarios(V1_FIDELITY))
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
@given(scenario=scenarios(V1_FIDELITY, async_scheduling=True))
def test_a_recording_of_vllms_async_scheduler_imports_as_what_it_scheduled(
    scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rec.jsonl"
    check_import(scenario, path, record(scenario, path, monkeypatch))


def test_every_line_is_on_disk_when_update_from_output_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = as_vllm(preset_dict("demo-preemption"))
    path = tmp_path / "rec.jsonl"
    side = recording_side(scenario, path, monkeypatch)
    for n, t in enumerate(make_engine(scenario).run(), start=1):
        side.step(t.sampled_token_ids)
        lines = path.read_text().splitlines()
        assert len(lines) == n + 1  # the header, then one line per step so far
        assert json.loads(lines[-1])["step"] == n


def test_the_header_holds_what_a_replay_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = as_vllm(preset_dict("demo-preemption"), async_scheduling=True)
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
    scenario = as_vllm(preset_dict("demo-preemption"))
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
    scenario = as_vllm(preset_dict("demo-preemption"))
    path = tmp_path / "rec.jsonl"
    seen = record(scenario, path, monkeypatch, PAGEDVIZ_RECORD_MAX_MB="0.002")
    lines = path.read_text().splitlines()
    assert 1 < len(lines) < len(seen) + 1
    assert path.stat().st_size <= 0.002 * (1 << 20)


def test_a_data_parallel_rank_writes_its_own_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = as_vllm(preset_dict("demo-preemption"))
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
    scenario = as_vllm(preset_dict("demo-preemption"), async_scheduling=async_scheduling)
    monkeypatch.setenv("PAGEDVIZ_RECORD", str(tmp_path / "rec.jsonl"))
    side = v1_side(scenario)
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

    scenario = as_vllm(preset_dict("demo-preemption"))
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
    scenario = as_vllm(preset_dict("demo-preemption"))
    path = tmp_path / "rec.jsonl"
    side = recording_side(scenario, path, monkeypatch)
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
        record(as_vllm(preset_dict(ex["preset"])), path, monkeypatch)
        shipped = Path(rec.__file__).parent / ex["file"]
        if os.environ.get("PAGEDVIZ_REGENERATE_EXAMPLES") == "1":
            shipped.write_bytes(path.read_bytes())
        assert path.read_bytes() == shipped.read_bytes(), name
