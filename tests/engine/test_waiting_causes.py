"""scheduler.waiting_causes and scheduler.preemption_causes (docs/arrays.md, "Why requests wait"):
hand-built scenarios that hit each cause on every flavour and runner, the shipped recording's
derived causes against the native run's, and the contract's invariants on every preset and on
random scenarios."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedviz.core import Scenario, make_engine
from pagedviz.core.async_scheduler import AsyncScheduler
from pagedviz.core.presets import list_presets, preset_dict
from pagedviz.core.recording import read_recording
from pagedviz.core.replay import import_recording
from tests.support.cli import in_process
from tests.support.recording_cases import LINES, write_recording
from tests.support.scenarios import make_scenario, run_all

CAUSE_KEYS: dict[str, set[str]] = {
    "token_budget": {"tokens_needed", "tokens_left"},
    "kv_pool": {"blocks_needed", "blocks_free"},
    "max_num_seqs": {"running", "max_num_seqs"},
    "preemption": {"preempted"},
    "behind": {"behind"},
    "output_in_flight": {"tokens_in_flight"},
    "prefill_chunk": {"tokens_scheduled", "tokens_remaining"},
    "unknown": set(),
}
# (model_runner, async_scheduling): every runner, sync and async
RUNNERS = [("v1", False), ("v2", False), ("v1", True), ("v2", True)]


def check_causes(steps: list[Any]) -> None:
    """The contract on every step: both keys; waiting_causes keyed by exactly waiting_req_ids in
    their order; preemption_causes by exactly preempted_req_ids; each cause known with its
    numbers; `behind` names a waiting request with a cause of its own."""
    for t in steps:
        s = t.scheduler
        causes, pre = s["waiting_causes"], s["preemption_causes"]
        assert list(causes) == [str(r) for r in s["waiting_req_ids"]], t.step
        assert set(pre) == {str(r) for r in s["preempted_req_ids"]}, t.step
        for rid, c in causes.items():
            assert CAUSE_KEYS[c["cause"]] <= set(c), (t.step, rid, c)
            if c["cause"] == "behind":
                assert c["behind"] in causes and causes[c["behind"]]["cause"] != "behind"
            if c["cause"] == "token_budget":
                assert c["tokens_needed"] > c["tokens_left"] >= 0
            if c["cause"] == "kv_pool":
                assert c["blocks_needed"] + c.get("watermark_blocks", 0) > c["blocks_free"]
            assert rid not in s["num_scheduled_tokens"] or c["cause"] == "prefill_chunk"
        for c in pre.values():
            assert c["cause"] == "kv_pool" and c["for"] in {
                *s["num_scheduled_tokens"],
                *s["preempted_req_ids"],
            }


def causes_at(scenario: Scenario, step: int) -> dict[str, Any]:
    steps = run_all(scenario)
    check_causes(steps)
    return steps[step - 1].scheduler["waiting_causes"]


def two(prompt: int = 6, third: bool = False) -> list[dict[str, Any]]:
    reqs = [
        {"id": "A", "prompt_len": prompt, "max_tokens": 2},
        {"id": "B", "prompt_len": prompt, "max_tokens": 2},
    ]
    return reqs + ([{"id": "C", "prompt_len": 2, "max_tokens": 2}] if third else [])


@pytest.mark.parametrize(
    "flavor,runner,asynchronous",
    [*(("vllm", r, a) for r, a in RUNNERS), ("ascend", "v1", False), ("ascend", "v1", True)],
)
def test_with_chunking_off_the_head_waits_for_the_token_budget_and_the_rest_behind_it(
    runner: str, asynchronous: bool, flavor: str
) -> None:
    sc = make_scenario(
        two(third=True),
        flavor=flavor,
        model_runner=runner,
        async_scheduling=asynchronous,
        max_num_batched_tokens=8,
        enable_chunked_prefill=False,
        num_kv_blocks=16,
    )
    assert causes_at(sc, 1) == {
        "B": {"cause": "token_budget", "tokens_needed": 6, "tokens_left": 2},
        "C": {"cause": "behind", "behind": "B"},
    }


@pytest.mark.parametrize("runner,asynchronous", RUNNERS)
def test_a_budget_spent_before_the_loop_reaches_the_head_leaves_zero_tokens(
    runner: str, asynchronous: bool
) -> None:
    sc = make_scenario(
        two(), model_runner=runner, async_scheduling=asynchronous, max_num_batched_tokens=6, num_kv_blocks=16
    )
    assert causes_at(sc, 1) == {"B": {"cause": "token_budget", "tokens_needed": 6, "tokens_left": 0}}


@pytest.mark.parametrize("runner,asynchronous", RUNNERS)
def test_a_pool_that_cannot_hold_the_head_is_kv_pool_with_its_blocks(runner: str, asynchronous: bool) -> None:
    # 6 blocks of 2 tokens, block 0 the null block: A takes 3 of the 5, B needs 3 (its prompt)
    sc = make_scenario(
        two(), model_runner=runner, async_scheduling=asynchronous, scheduler_reserve_full_isl=False
    )
    assert causes_at(sc, 1) == {"B": {"cause": "kv_pool", "blocks_needed": 3, "blocks_free": 2}}


def test_a_full_sequence_reservation_says_so() -> None:
    # A takes 3 of the 5 usable blocks; B's 2-token chunk would fit the 2 free ones, its whole
    # prompt (3 blocks) does not: with scheduler_reserve_full_isl it waits
    def run(full: bool) -> list[Any]:
        return run_all(make_scenario(two(), scheduler_reserve_full_isl=full, max_num_batched_tokens=8))

    assert run(False)[0].scheduler["num_scheduled_tokens"] == {"A": 6, "B": 2}
    steps = run(True)
    check_causes(steps)
    assert steps[0].scheduler["waiting_causes"] == {
        "B": {"cause": "kv_pool", "blocks_needed": 3, "blocks_free": 2, "full_sequence": True}
    }


@pytest.mark.parametrize("runner,asynchronous", RUNNERS)
def test_a_full_running_list_is_max_num_seqs(runner: str, asynchronous: bool) -> None:
    sc = make_scenario(
        two(third=True), model_runner=runner, async_scheduling=asynchronous, max_num_reqs=1, num_kv_blocks=16
    )
    assert causes_at(sc, 1) == {
        "B": {"cause": "max_num_seqs", "running": 1, "max_num_seqs": 1},
        "C": {"cause": "behind", "behind": "B"},
    }


def test_a_victim_is_preempted_for_the_request_whose_allocation_failed() -> None:
    # demo-preemption step 3: a's next token needs a block, none is free: c (last) goes for a
    steps = run_all(Scenario.from_dict(preset_dict("demo-preemption")))
    check_causes(steps)
    s3 = steps[2].scheduler
    assert s3["preemption_causes"] == {
        "c": {"cause": "kv_pool", "for": "a", "blocks_needed": 1, "blocks_free": 0}
    }
    assert s3["waiting_causes"] == {"c": {"cause": "preemption", "preempted": ["c"]}}
    # step 6: b's next token; step 4, c resumes: nothing waits
    assert steps[5].scheduler["preemption_causes"]["c"]["for"] == "b"
    assert steps[3].scheduler["waiting_causes"] == {}


def test_a_request_that_preempts_itself_is_preempted_for_itself() -> None:
    steps = run_all(
        make_scenario(
            [{"id": "A", "prompt_len": 4, "max_tokens": 4}, {"id": "B", "prompt_len": 4, "max_tokens": 4}]
        )
    )
    check_causes(steps)
    assert steps[1].scheduler["preemption_causes"] == {
        "B": {"cause": "kv_pool", "for": "B", "blocks_needed": 1, "blocks_free": 0}
    }
    assert steps[1].scheduler["waiting_causes"] == {"B": {"cause": "preemption", "preempted": ["B"]}}


@pytest.mark.parametrize("asynchronous", [False, True])
def test_spec_decode_padding_that_does_not_fit_is_the_token_budget_padded(asynchronous: bool) -> None:
    # Model Runner V2 pads B's one-token prefill to 1 + 3 beside A's decode; 2 tokens are left
    sc = make_scenario(
        [
            {"id": "A", "prompt_len": 4, "max_tokens": 6},
            {"id": "B", "prompt_len": 1, "max_tokens": 2, "arrival_step": 3},
        ],
        model_runner="v2",
        async_scheduling=asynchronous,
        max_model_len=16,
        max_num_batched_tokens=6,
        num_kv_blocks=20,
        num_speculative_tokens=3,
        speculative_method="ngram",
    )
    assert causes_at(sc, 3) == {
        "B": {"cause": "token_budget", "tokens_needed": 4, "tokens_left": 2, "padded": True}
    }


def test_a_preempted_request_with_output_in_flight_is_skipped_and_the_next_is_the_head() -> None:
    # the scheduler on its own: B was preempted while its output was in flight (async scheduling)
    sc = make_scenario(two(2, third=True), max_num_reqs=1, num_kv_blocks=16, async_scheduling=True)
    sched = AsyncScheduler(sc.config, sc.requests)
    sched.admit_arrivals(1)
    b = sched.waiting[1]
    b.num_stale_output_tokens = 1
    out = sched.schedule(1)
    assert out.num_scheduled_tokens == {"A": 2}
    assert out.waiting_causes == {
        "B": {"cause": "output_in_flight", "tokens_in_flight": 1},
        "C": {"cause": "max_num_seqs", "running": 1, "max_num_seqs": 1},
    }


# ------------------------------------------------------------------ nano-vllm's own rules
def nano(reqs: list[dict[str, Any]], **config: Any) -> list[Any]:
    steps = run_all(make_scenario(reqs, flavor="nanovllm", **config))
    check_causes(steps)
    return steps


def test_nano_lets_only_the_first_sequence_take_a_chunk() -> None:
    steps = nano(two(6), max_num_batched_tokens=8, num_kv_blocks=16)
    assert steps[0].scheduler["waiting_causes"] == {
        "B": {"cause": "token_budget", "tokens_needed": 6, "tokens_left": 2, "first_seq_only_chunks": True}
    }


def test_nano_keeps_a_chunked_prefill_in_waiting_and_the_rest_behind_it() -> None:
    steps = nano(two(6, third=True), max_model_len=8, max_num_batched_tokens=4, num_kv_blocks=16)
    assert steps[0].scheduler["num_scheduled_tokens"] == {"A": 4}
    assert steps[0].scheduler["waiting_causes"] == {
        "A": {"cause": "prefill_chunk", "tokens_scheduled": 4, "tokens_remaining": 2},
        "B": {"cause": "behind", "behind": "A"},
        "C": {"cause": "behind", "behind": "A"},
    }


def test_nano_pool_and_batch_limits() -> None:
    # nano-vllm has no null block: 5 blocks, A takes 3, B needs 3
    steps = nano(two(6), num_kv_blocks=5)
    assert steps[0].scheduler["waiting_causes"] == {
        "B": {"cause": "kv_pool", "blocks_needed": 3, "blocks_free": 2}
    }
    steps = nano(two(2, third=True), max_num_reqs=1, num_kv_blocks=16)
    assert steps[0].scheduler["waiting_causes"] == {
        "B": {"cause": "max_num_seqs", "running": 1, "max_num_seqs": 1},
        "C": {"cause": "behind", "behind": "B"},
    }


def test_nano_decode_preemption_names_whom_it_was_for() -> None:
    steps = run_all(Scenario.from_dict({**preset_dict("demo-preemption"), "flavor": "nanovllm"}))
    check_causes(steps)
    s6 = steps[5].scheduler
    assert s6["preemption_causes"] == {
        "c": {"cause": "kv_pool", "for": "c", "blocks_needed": 1, "blocks_free": 0}
    }
    assert s6["waiting_causes"] == {"c": {"cause": "preemption", "preempted": ["c"]}}


# ------------------------------------------------------------------ imported recordings
def test_the_shipped_recording_derives_the_causes_the_native_run_has() -> None:
    imported = import_recording(*read_recording(LINES))
    check_causes(imported.traces)
    native = run_all(Scenario.from_dict(preset_dict("demo-preemption")))
    assert len(native) == len(imported.traces)
    for got, want in zip(imported.traces, native):
        g, w = got.scheduler, want.scheduler
        assert all(
            c["derived"] == "recording"
            for c in [*g["waiting_causes"].values(), *g["preemption_causes"].values()]
        )
        assert {r: c["for"] for r, c in g["preemption_causes"].items()} == {
            r: c["for"] for r, c in w["preemption_causes"].items()
        }
        strip = lambda cs: {r: {k: v for k, v in c.items() if k != "derived"} for r, c in cs.items()}  # noqa: E731
        assert strip(g["waiting_causes"]) == w["waiting_causes"], got.step


@pytest.mark.parametrize("chunked", [False, True])
def test_a_recorded_budget_bound_run_derives_its_native_causes(tmp_path: Any, chunked: bool) -> None:
    # pagedviz's own run written as a recording: the derived causes are the scheduler's own
    reqs = [{"id": f"r{i}", "prompt_len": 6, "max_tokens": 3, "arrival_step": 1 + i // 2} for i in range(5)]
    sc = make_scenario(
        reqs,
        max_model_len=10,
        max_num_batched_tokens=10,
        enable_chunked_prefill=chunked,
        num_kv_blocks=40,
        max_num_reqs=3,
    )
    path = tmp_path / "run.jsonl"
    write_recording(sc, path)
    lines = path.read_bytes().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["enable_chunked_prefill"] = chunked  # the synthetic recorder writes True
    lines[0] = json.dumps(header).encode() + b"\n"
    imported = import_recording(*read_recording(lines))
    check_causes(imported.traces)
    native = run_all(sc)
    seen = set()
    for got, want in zip(imported.traces, native):
        g = {
            r: {k: v for k, v in c.items() if k != "derived"}
            for r, c in got.scheduler["waiting_causes"].items()
        }
        assert g == want.scheduler["waiting_causes"], got.step
        seen |= {c["cause"] for c in g.values()}
    assert "token_budget" in seen or "max_num_seqs" in seen


# ------------------------------------------------------------------ every preset, random scenarios
PRESETS = [p["id"] for p in list_presets()]


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_carries_both_keys_on_every_step(preset: str) -> None:
    d = preset_dict(preset)
    d["config"]["model"] = None
    check_causes(run_all(Scenario.from_dict(d)))


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    bs = draw(st.integers(1, 4))
    reqs = [
        {
            "id": f"r{i}",
            "prompt_len": draw(st.integers(1, 10)),
            "max_tokens": draw(st.integers(1, 5)),
            "arrival_step": draw(st.integers(1, 4)),
        }
        for i in range(draw(st.integers(1, 5)))
    ]
    M = max(16, *(r["prompt_len"] + r["max_tokens"] for r in reqs))
    chunked = draw(st.booleans())
    runner, asynchronous = draw(st.sampled_from(RUNNERS))
    flavor = draw(st.sampled_from(["vllm", "vllm", "nanovllm", "ascend"]))
    if flavor != "vllm":
        runner = "v1"
    if flavor == "nanovllm":
        bs, asynchronous = max(bs, 2), False
    return make_scenario(
        reqs,
        flavor=flavor,
        model_runner=runner,
        async_scheduling=asynchronous,
        block_size=bs,
        max_model_len=M,
        max_num_reqs=draw(st.integers(1, 4)),
        max_num_batched_tokens=draw(st.integers(4, 30)) if chunked else draw(st.integers(M, 40)),
        enable_chunked_prefill=chunked,
        enable_prefix_caching=draw(st.booleans()),
        num_kv_blocks=-(-M // bs) + 1 + draw(st.integers(0, 4)),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_scenarios_keep_the_contract(s: Scenario) -> None:
    check_causes(list(make_engine(s).run()))


def test_pagedviz_run_file_json_carries_both_keys_on_every_step(tmp_path: Any) -> None:
    d = preset_dict("seed-000")
    d["config"].update(enable_chunked_prefill=False, max_num_batched_tokens=240, model=None)
    path = tmp_path / "chunked-off.json"
    path.write_text(json.dumps(d))
    r = in_process("run", str(path), "--json")  # the command's real main(), in this process
    assert r.returncode == 0, r.stderr
    steps = json.loads(r.stdout)["steps"]
    assert all({"waiting_causes", "preemption_causes"} <= set(s["scheduler"]) for s in steps)
    assert steps[1]["scheduler"]["waiting_causes"] == {
        "4": {"cause": "token_budget", "tokens_needed": 120, "tokens_left": 70}
    }
    text = in_process("run", str(path), "--step", "2").stdout
    want = "waiting_causes: {'4': {'cause': 'token_budget', 'tokens_needed': 120, 'tokens_left': 70}}"
    assert want in " ".join(text.split())  # the console may wrap the line
