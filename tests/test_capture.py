"""Trace capture's shortcuts hold: the copy of num_tokens that prepare_inputs records is still the
persistent batch's num_tokens when the step records its batch (so one copy serves both), and
input_ids gathered by numpy's take (small batches) equals torch's index_select (large ones)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pagedviz.core import Scenario, load_preset, make_engine
from pagedviz.core.presets import list_presets
from pagedviz.core.runners import v1_stages as runner_module
from pagedviz.core.trace import StepTrace

PRESETS = [p["id"] for p in list_presets()]


@pytest.mark.parametrize("preset", PRESETS)
def test_num_tokens_is_unchanged_between_prepare_inputs_and_record_batch(preset: str) -> None:
    engine = make_engine(load_preset(preset))
    runner = getattr(engine, "runner", None)
    if runner is None or not hasattr(runner, "record_batch"):
        pytest.skip("this flavour records its trace in its own engine")
    if getattr(runner, "runner", "v1") == "v2":
        pytest.skip("Model Runner V2 keeps no num_tokens per row (its slots hold total_len)")
    record_batch = runner.record_batch
    checked = []

    def spy(trace: StepTrace) -> None:
        n = runner.v["num_reqs"]
        kept = runner.recorded_num_tokens
        assert kept is not None and np.array_equal(kept, runner.input_batch.num_tokens[:n])
        assert not np.shares_memory(kept, runner.input_batch.num_tokens)
        checked.append(trace.step)
        record_batch(trace)

    runner.record_batch = spy
    steps = list(engine.run())
    assert checked == [t.step for t in steps]
    for t in steps:  # the recorded array is the batch's, named as written by update_states
        entry = t.array_entries["num_tokens"]
        assert entry.stage == "update_states" and len(entry.data) == t.scalars["num_reqs"]


def scenario(requests: int, tokens: int) -> Scenario:
    per = tokens // requests
    return Scenario.from_dict(
        {
            "name": "gather",
            "seed": 3,
            "config": {
                "model_runner": "v1",  # V1's token table and its numpy / torch gather
                "async_scheduling": False,
                "block_size": 4,
                "max_model_len": per * 2,
                "max_num_reqs": requests,
                "max_num_batched_tokens": tokens,
                "num_kv_blocks": requests * (per // 2 + 2) + 1,
                "model": None,
            },
            "requests": [{"id": str(i), "prompt_len": per, "max_tokens": 3} for i in range(requests)],
        }
    )


def input_ids_per_step(s: Scenario) -> list[Any]:
    return [t.arrays["input_ids"].tolist() for t in make_engine(s).run() if "input_ids" in t.arrays]


@pytest.mark.parametrize("size", [(4, 64), (16, 4096)])
def test_input_ids_gathered_by_numpy_and_by_torch_agree(size: tuple[int, int], monkeypatch: Any) -> None:
    s = scenario(*size)
    engine = make_engine(s)
    first = engine.step()
    r = engine.runner
    assert first.scalars["total_num_scheduled_tokens"] == size[1]
    want = r.input_batch.token_ids_cpu.ravel()[first.arrays["token_indices"]]
    assert np.array_equal(first.arrays["input_ids"], want)
    monkeypatch.setattr(runner_module, "SMALL_GATHER", 0)  # torch everywhere
    by_torch = input_ids_per_step(s)
    monkeypatch.setattr(runner_module, "SMALL_GATHER", 1 << 30)  # numpy everywhere
    by_numpy = input_ids_per_step(s)
    assert by_torch == by_numpy and len(by_torch) >= 3
