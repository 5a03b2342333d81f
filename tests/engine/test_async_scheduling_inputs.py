"""Async scheduling's inputs: decode tokens are placeholders on the CPU and right on the device, by
one copy when the batch kept its order, else a scatter."""

from __future__ import annotations

import numpy as np

from pagedviz.core import Scenario, load_preset, make_engine
from pagedviz.core.presets import preset_dict


def run(preset: str) -> list:
    return list(make_engine(load_preset(preset)).run())


def _sync_twin(preset: str) -> list:
    d = preset_dict(preset)
    d["config"]["async_scheduling"] = False
    return list(make_engine(Scenario.from_dict(d)).run())


def test_async_decode_inputs_are_placeholders_on_the_cpu_and_right_on_the_device() -> None:
    # the steps that run a forward (the batch queue adds steps that schedule nothing or only drain)
    steps = [t for t in run("demo-async-scheduling") if not t.idle]
    sync = _sync_twin("demo-async-scheduling")
    assert len(steps) == len(sync)
    for t, s in zip(steps, sync):
        a = t.arrays
        # the device holds what a synchronous engine gathers on the CPU, and the run is the same
        assert a["input_ids_device"].tolist() == s.arrays["input_ids"].tolist()
        assert t.sampled_token_ids == s.sampled_token_ids
        flat = a["sample_flattened_indices"]
        assert (a["input_ids"][flat] == 0).all(), "the CPU has only the placeholder there"
        others = np.setdiff1d(np.arange(len(a["input_ids"])), flat)
        assert (a["input_ids"][others] == a["input_ids_device"][others]).all()
        # every filled token is last step's sample of the same request
        prev = a.get("prev_sampled_token_ids")
        if len(flat):
            assert (a["input_ids_device"][flat] == prev[a["prev_common_req_indices"]]).all()


def test_async_one_copy_when_the_batch_kept_its_order_else_a_scatter() -> None:
    steps = run("demo-async-scheduling")
    modes = [t.scalars["input_ids_copy"] for t in steps]
    assert modes[:5] == ["cpu", "one_copy", "scatter", "one_copy", "one_copy"]
    for t in steps:
        a = t.arrays
        same = (a["sample_flattened_indices"] == a["prev_common_req_indices"]).all()
        dense = (
            len(a["sample_flattened_indices"])
            and a["sample_flattened_indices"].max() == len(a["sample_flattened_indices"]) - 1
        )
        if t.scalars["input_ids_copy"] != "cpu":
            assert (t.scalars["input_ids_copy"] == "one_copy") == bool(same and dense)
    step3 = steps[2]
    assert step3.batch["moves"] == [{"req_id": "c", "from": 2, "to": 0}]
    assert step3.arrays["prev_common_req_indices"].tolist() == [2, 1]
    assert step3.arrays["sample_flattened_indices"].tolist() == [0, 1]
