"""Trace capture's shortcuts hold: the batch state (V1) or slot state (V2) recorded with the stages'
arrays is still the runner's when the step's forward is done (so one pass records both), and
input_ids gathered by numpy's take (small batches) equals torch's index_select (large ones)."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import pytest

from pagedviz.core import Scenario, load_preset, make_engine
from pagedviz.core.presets import list_presets
from pagedviz.core.runners import v1_stages as runner_module
from pagedviz.core.trace import StepTrace

PRESETS = [p["id"] for p in list_presets()]


# what each runner records with its stages (capture_state), against where it lives at the end of
# the step's forward
V1_STATE = {
    "num_tokens": lambda r, n: r.input_batch.num_tokens[:n],
    "num_computed_tokens_cpu": lambda r, n: r.input_batch.num_computed_tokens_cpu[:n],
    "token_ids_cpu": lambda r, n: r.input_batch.token_ids_cpu[:n],
    "block_table": lambda r, n: r.input_batch.block_table.block_table_np[:n],
}
V2_STATE = {
    name: operator.attrgetter(name)
    for name in (
        "num_computed_tokens",
        "prefill_len",
        "total_len",
        "num_blocks",
        "last_sampled_tokens",
        "all_token_ids",
        "block_tables",
    )
}


@pytest.mark.parametrize("preset", PRESETS)
def test_the_state_recorded_with_the_stages_is_the_state_at_the_end_of_the_forward(preset: str) -> None:
    engine = make_engine(load_preset(preset))
    runner = getattr(engine, "runner", None)
    if runner is None or not hasattr(runner, "record_batch"):
        pytest.skip("this flavour records its trace in its own engine")
    state = V2_STATE if getattr(runner, "runner", "v1") == "v2" else V1_STATE
    record_batch = runner.record_batch
    checked = []

    def spy(trace: StepTrace) -> None:
        n = runner.v.get("num_reqs", 0)
        for name, live in state.items():
            entry = trace.array_entries[name]
            got = entry.data
            want = live(runner, n) if state is V1_STATE else live(runner)
            assert np.array_equal(got, want[: len(got)]), f"step {trace.step}: {name} changed"
            assert not np.shares_memory(got, want), f"{name} is not a copy"
        checked.append(trace.step)
        record_batch(trace)

    runner.record_batch = spy
    steps = list(engine.run())
    assert checked == [t.step for t in steps]
    for t in steps:  # recorded once, named as written by update_states (finish_and_add on V2)
        name = "num_tokens" if state is V1_STATE else "total_len"
        assert t.array_entries[name].stage in ("update_states", "finish_and_add")
        assert t.stages[0].name in ("update_states", "finish_and_add")


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
