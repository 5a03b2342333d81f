"""Capture by change (core/table_changes.py, core/table_versions.py): the runners' persistent tables
(V1's token_ids_cpu and block tables, V2's all_token_ids and per-slot block tables) are recorded as
what each step wrote and materialised when read. Whatever the order of reading, after later steps
have overwritten the buffers, from a cold cache or through a pickle per step (as the compute
processes send them), a step's tables are the tables the runner held when the step was captured."""

from __future__ import annotations

import gc
import pickle
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedviz.core import Scenario, make_engine, table_changes
from pagedviz.core.table_versions import MAX_DEPTH, TableVersion, forget_materialised
from pagedviz.core.trace import StepTrace
from tests.support.strategies import scenarios


@pytest.fixture(autouse=True, scope="module")
def every_table_by_change() -> Any:
    """These scenarios' tables are small, which capture copies whole: here every one is
    recorded by change."""
    names = (
        "SMALL_TABLE",
        "STRUCTURAL_COPY",
        "DELTA_FIXED",
        "COST_PER_ENTRY",
        "COST_PER_SPAN",
        "SPANS_FIXED",
    )
    costs = {name: getattr(table_changes, name) for name in names}
    for name in names:
        setattr(table_changes, name, 0)
    yield
    for name, value in costs.items():
        setattr(table_changes, name, value)


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def live_tables(runner: Any) -> dict[str, np.ndarray]:
    """What main's capture copied: the runner's persistent tables now, by trace name."""
    if getattr(runner, "runner", "v1") == "v2":
        out = {"all_token_ids": runner.all_token_ids.copy()}
        for g, table in enumerate(runner.tables.tables):
            out["block_tables" + (f"_g{g}" if g else "")] = table.copy()
        return out
    ib, n = runner.input_batch, runner.v["num_reqs"]
    out = {"token_ids_cpu": ib.token_ids_cpu[:n].copy()}
    for g, table in enumerate(ib.block_tables.block_tables):
        out["block_table" + (f"_g{g}" if g else "")] = table.block_table_np[:n].copy()
    return out


def run_with_copies(scenario: Scenario) -> tuple[list[StepTrace], list[dict[str, np.ndarray]]]:
    """The run's steps, and beside each the full copies of the tables taken when it was captured."""
    engine = make_engine(scenario)
    runner = engine.runner
    capture_state = runner.capture_state
    copies: list[dict[str, np.ndarray]] = []

    def spy(values: dict[str, Any]) -> None:
        capture_state(values)
        copies.append(live_tables(runner))

    runner.capture_state = spy
    steps = list(engine.run())
    assert len(copies) == len(steps)
    return steps, copies


def check_late_reads(scenario: Scenario, seed: int) -> None:
    steps, copies = run_with_copies(scenario)
    order = list(range(len(steps)))
    random.Random(seed).shuffle(order)
    forget_materialised()
    for i in order:  # out of order, every buffer long overwritten
        entries = steps[i].array_entries
        for name, want in copies[i].items():
            kept = entries[name]._data  # a plain copy only for a table of no rows
            assert isinstance(kept, TableVersion) or kept.size == 0, name
            got = entries[name].data
            assert got.dtype == want.dtype and np.array_equal(got, want), f"step {i + 1}: {name}"
        if i % 3 == 0:
            forget_materialised()


@SETTINGS
@given(scenarios(runner="v1"), st.integers(0, 1 << 16))
def test_v1_tables_read_late_and_out_of_order_equal_the_tables_at_capture(s: Scenario, seed: int) -> None:
    check_late_reads(s, seed)


@SETTINGS
@given(scenarios(runner="v2"), st.integers(0, 1 << 16))
def test_v2_tables_read_late_and_out_of_order_equal_the_tables_at_capture(s: Scenario, seed: int) -> None:
    check_late_reads(s, seed)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["v1", "v2"]),
    st.booleans(),
    st.data(),
)
def test_with_drafts_or_async_scheduling_the_tables_read_late_are_the_tables_at_capture(
    runner: str, spec: bool, data: st.DataObject
) -> None:
    s = data.draw(scenarios(runner=runner, spec=spec, async_scheduling=not spec))
    check_late_reads(s, data.draw(st.integers(0, 1 << 16)))


def decode_scenario(runner: str, steps: int = 140) -> Scenario:
    """8 requests of 40-token prompts decoding `steps` tokens (past MAX_DEPTH captures)."""
    return Scenario.from_dict(
        {
            "name": "decode",
            "seed": 1,
            "config": {
                "model_runner": runner,
                "async_scheduling": False,
                "block_size": 4,
                "max_model_len": 256,
                "max_num_reqs": 8,
                "max_num_batched_tokens": 512,
                "num_kv_blocks": 8 * 64 + 1,  # no preemption: a resumed request rewrites its row
                "model": None,
            },
            "requests": [{"id": str(i), "prompt_len": 40, "max_tokens": steps} for i in range(8)],
            "max_steps": steps + 2,
        }
    )


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_a_decode_step_records_its_new_tokens_not_the_table(runner: str) -> None:
    steps, copies = run_with_copies(decode_scenario(runner))
    name = "all_token_ids" if runner == "v2" else "token_ids_cpu"
    versions = [t.array_entries[name]._data for t in steps]
    deltas = [v for v in versions if v.snapshot is None]
    assert len(deltas) > len(versions) * 0.9 and max(v.depth for v in versions) >= 100
    assert len(versions) - len(deltas) >= 2 and all(v.depth <= MAX_DEPTH for v in versions)
    for v in deltas[1:]:  # one new token a request, not the [rows, max_model_len] table
        assert len(v.values) <= 8 and v.values.nbytes + v.index.nbytes + v.moved.nbytes <= 8 * 12
        assert v.own_nbytes() * 10 < copies[0][name].nbytes
    forget_materialised()
    assert all(np.array_equal(t.array_entries[name].data, c[name]) for t, c in zip(steps, copies))


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_steps_pickled_one_by_one_read_back_in_another_process_state(runner: str) -> None:
    scenario = decode_scenario(runner, steps=70)
    steps, copies = run_with_copies(scenario)
    for t in steps:
        t.array_entries  # noqa: B018 - built, as the compute processes do before sending
    want = [t.to_dict()["arrays"] for t in steps]
    sent = [pickle.dumps(t) for t in steps]  # one message a step, as the compute processes send
    del steps
    gc.collect()
    forget_materialised()  # nothing of the run is left in this process but the messages
    got = [pickle.loads(m) for m in sent]  # received in order
    for i in reversed(range(len(got))):
        assert got[i].to_dict()["arrays"] == want[i], f"step {i + 1}"
    again = pickle.loads(sent[-1])  # a step received twice is the one already held
    name = "all_token_ids" if runner == "v2" else "token_ids_cpu"
    assert again.array_entries[name]._data is got[-1].array_entries[name]._data


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_without_capture_what_the_runner_was_told_stays_bounded_and_capture_resumes_exactly(
    runner: str,
) -> None:
    engine = make_engine(decode_scenario(runner, steps=60))
    r = engine.runner
    capture_state = r.capture_state
    copies: list[dict[str, np.ndarray]] = []

    def spy(values: dict[str, Any]) -> None:
        capture_state(values)
        copies.append(live_tables(r))

    r.capture_state = spy
    engine.capture = False
    for _ in range(50):
        engine.step()
    log = r.token_changes if runner == "v2" else r.input_batch.token_changes
    assert len(log.entries) + len(log.spans) <= table_changes.MAX_TOLD
    assert len(log.scalars[0]) <= table_changes.MAX_TOLD_SPANS
    engine.capture = True
    steps = [engine.step() for _ in range(5)]
    forget_materialised()
    name = "all_token_ids" if runner == "v2" else "token_ids_cpu"
    for t, want in zip(steps, copies):
        assert np.array_equal(t.array_entries[name].data, want[name]), f"step {t.step}"


def test_a_step_received_without_the_steps_before_it_says_so_when_read() -> None:
    steps, _ = run_with_copies(decode_scenario("v1", steps=8))
    message = pickle.dumps(steps[5])
    del steps
    gc.collect()
    forget_materialised()
    alone = pickle.loads(message)
    with pytest.raises(RuntimeError, match="without the steps before it"):
        alone.arrays  # noqa: B018
