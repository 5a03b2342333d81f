"""Device choice, the paged-attention model against its dense twin, CUDA-graph padding, KV view."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from pagedviz.core import Engine, load_preset, make_engine
from pagedviz.core.device import DeviceUnavailableError, pick_device_type, resolve_device
from pagedviz.core.presets import list_presets
from pagedviz.core.tiny_model import ForwardInputs
from tests.support.scenarios import make_scenario, run_all


def test_auto_picks_cpu_without_accelerators() -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present")
    assert resolve_device("auto") == torch.device("cpu")


def test_auto_picks_the_npu_when_torch_npu_reports_one(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_npu = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 1)
    monkeypatch.setitem(sys.modules, "torch_npu", types.SimpleNamespace(npu=fake_npu))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delattr(torch, "npu", raising=False)
    assert pick_device_type("auto") == "npu"


def test_asking_for_a_missing_device_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceUnavailableError, match="cuda was asked for"):
        resolve_device("cuda")
    with pytest.raises(DeviceUnavailableError, match="npu was asked for"):
        resolve_device("npu")
    with pytest.raises(DeviceUnavailableError, match="cuda was asked for"):
        make_engine(make_scenario([{"id": "a", "prompt_len": 2, "max_tokens": 2}], device="cuda"))


@pytest.mark.parametrize("preset", [p["id"] for p in list_presets()])
def test_paged_forward_agrees_with_dense_attention_on_every_preset(preset: str) -> None:
    for t in make_engine(load_preset(preset)).run():
        if t.idle:  # no forward (async scheduling: a step that schedules nothing or only drains)
            continue
        assert t.forward["paged_vs_dense_max_abs_diff"] < 1e-4
        assert "forward" in t.timing_us and t.timing_us["forward"] > 0


def test_a_corrupted_slot_mapping_entry_breaks_the_check() -> None:
    engine = make_engine(load_preset("seed-001"))
    assert engine.step().forward["paged_vs_dense_max_abs_diff"] < 1e-4

    def corrupt(inp: ForwardInputs) -> None:
        inp.slot_mapping[2] = 30  # request 2's token at position 5 goes to a slot nobody reads

    engine.before_forward = corrupt
    diff = engine.step().forward["paged_vs_dense_max_abs_diff"]
    assert diff > 1e-2


def test_kv_view_reads_written_slots_back_from_the_cache_tensor() -> None:
    engine = make_engine(load_preset("seed-001"))
    t1 = engine.step()
    kv = t1.kv_cache
    # 10 tokens written: blocks 1, 3, 4, 5 full (2 slots), blocks 2 and 6 hold one slot each
    assert kv["written_slots"][:8] == [0, 2, 1, 2, 2, 2, 1, 0]
    assert kv["owners"] == {"1": ["0"], "2": ["0"], "3": ["1"], "4": ["2"], "5": ["2"], "6": ["2"]}
    assert kv["ref_cnt"][:8] == [0, 1, 1, 1, 1, 1, 1, 0]
    assert kv["free_block_queue"][0] == 7
    t2 = engine.step()
    assert t2.kv_cache["written_slots"][:9] == [0, 2, 2, 2, 2, 2, 2, 1, 2]


def test_cudagraph_padding_pads_slot_mapping_with_minus_one() -> None:
    steps = run_all(
        make_scenario(
            [{"id": "a", "prompt_len": 5, "max_tokens": 2}], cudagraph_capture_sizes=[4, 8], num_kv_blocks=16
        )
    )
    t1, t2 = steps
    assert t1.scalars["total_num_scheduled_tokens"] == 5 and t1.scalars["num_input_tokens"] == 8
    assert t1.arrays["slot_mapping"].tolist()[5:] == [-1, -1, -1]
    assert t2.scalars["num_input_tokens"] == 4 and t2.arrays["slot_mapping"].tolist()[1:] == [-1, -1, -1]


def test_default_capture_sizes_follow_vllm_and_are_capped_by_the_budget() -> None:
    s = make_scenario(
        [{"id": "a", "prompt_len": 3, "max_tokens": 1}],
        cudagraph_capture_sizes="default",
        max_num_batched_tokens=40,
    )
    assert s.config.cudagraph_capture_sizes == (1, 2, 4, 8, 16, 24, 32, 40)
    t = run_all(s)[0]
    assert t.scalars["num_input_tokens"] == 4


def test_timing_and_device_are_recorded() -> None:
    t = Engine(load_preset("seed-001"), stage_timing=True).step()
    for stage in ("update_states", "positions", "slot_mapping", "copy_to_device", "device_slot_mapping"):
        assert t.timing_us[stage] >= 0
    stages = [s.name for s in t.stages if s.name != "update_states"]
    assert t.timing_us["prepare_inputs"] == pytest.approx(sum(t.timing_us[s] for s in stages), abs=0.2)


def test_by_default_prepare_inputs_is_timed_as_a_whole() -> None:
    t = make_engine(load_preset("seed-001")).step()
    assert t.timing_us["prepare_inputs"] > 0
    assert "positions" not in t.timing_us and "slot_mapping" not in t.timing_us
    assert t.timing_us["copy_to_device"] >= 0 and t.timing_us["update_states"] >= 0
    assert t.forward["device"] == str(resolve_device("auto"))
    assert t.forward["slot_mapping_device_matches_cpu"] is True


def _strip(steps: list) -> list:
    out = []
    for s in steps:
        d = s.to_dict()
        d.pop("timing_us")
        d["forward"].pop("device")
        d["forward"].pop("paged_vs_dense_max_abs_diff", None)
        # several KV cache groups: the float error per layer, as the total, differs by device
        d["forward"].pop("paged_vs_dense_max_abs_diff_per_layer", None)
        out.append(d)
    return out


@pytest.mark.cuda
@pytest.mark.parametrize("preset", [p["id"] for p in list_presets()])
def test_cpu_and_cuda_give_identical_traces(preset: str) -> None:
    from pagedviz.core import Scenario
    from pagedviz.core.presets import preset_dict

    def on(device: str) -> list:
        d = preset_dict(preset)
        d["config"]["device"] = device
        return _strip(list(make_engine(Scenario.from_dict(d)).run()))

    assert on("cpu") == on("cuda")


def _v2_variants() -> list[str]:
    """Every vllm preset that Model Runner V2 can run (no drafts, no image), as a V2 scenario."""
    from pagedviz.core.presets import preset_dict

    out = []
    for p in list_presets():
        d = preset_dict(p["id"])
        images = any("image" in r for r in d["requests"])
        if p["flavor"] == "vllm" and not d["config"].get("num_speculative_tokens") and not images:
            out.append(p["id"])
    return out


@pytest.mark.cuda
@pytest.mark.parametrize("preset", _v2_variants())
def test_cpu_and_cuda_give_identical_v2_traces(preset: str) -> None:
    from pagedviz.core import Scenario
    from pagedviz.core.presets import preset_dict

    def on(device: str) -> list:
        d = preset_dict(preset)
        d["config"].update(device=device, model_runner="v2")
        return _strip(list(make_engine(Scenario.from_dict(d)).run()))

    assert on("cpu") == on("cuda")


@pytest.mark.cuda
def test_cuda_staging_tensors_are_pinned() -> None:
    engine = make_engine(load_preset("seed-001"))
    assert engine.device.type == "cuda"
    assert engine.runner.input_batch.token_ids_cpu_tensor.is_pinned()
    assert engine.runner.slot_mapping.device.type == "cuda"


@pytest.mark.cuda
@pytest.mark.parametrize("runner", ["v1", "v2"])
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_cpu_and_cuda_give_identical_hybrid_traces(runner: str, async_scheduling: bool) -> None:
    """Two KV cache groups (a sliding window of 8 beside full attention): every group's block table
    and slot_mapping, built on the device, agree with the CPU's; the paged forward equals the dense
    one after every layer; the traces are the CPU's."""
    from pagedviz.core import Scenario

    def on(device: str) -> list:
        config = {
            "model_runner": runner,
            "async_scheduling": async_scheduling,
            "block_size": 4,
            "max_model_len": 64,
            "max_num_reqs": 4,
            "max_num_batched_tokens": 64,
            "num_kv_blocks": 40,
            "layer_types": ["sliding_attention", "full_attention"],
            "sliding_window": 8,
            "device": device,
        }
        requests = [
            {"id": "b", "prompt_token_ids": list(range(1, 13)), "max_tokens": 2},
            {"id": "a", "prompt_token_ids": list(range(1, 21)), "max_tokens": 8},
            {"id": "c", "prompt_token_ids": list(range(30, 41)), "max_tokens": 6, "arrival_step": 3},
        ]
        scenario = Scenario.from_dict({"name": "h", "config": config, "requests": requests})
        steps = list(make_engine(scenario).run())
        for t in steps:
            if not t.idle:
                assert t.forward["slot_mapping_device_matches_cpu"] is True
                assert max(t.forward.pop("paged_vs_dense_max_abs_diff_per_layer")) < 1e-3
        return _strip(steps)

    assert on("cpu") == on("cuda")
