"""The teaching routes through FastAPI on the real engine: narration, metrics, compare, and the
predict-then-reveal check."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core.presets import preset_dict


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Settings(max_runs=16)))


def _run_id(client: TestClient, scenario: dict[str, Any]) -> str:
    r = client.post("/api/runs", json=scenario)
    assert r.status_code == 201, r.text
    return r.json()["run_id"]


def _fast(preset: str, **config: Any) -> dict[str, Any]:
    """A preset without the model (the scheduler and the arrays are the same), settings changed."""
    d = preset_dict(preset)
    d["config"].update({"model": None, **config})
    return d


def test_narration_route_serves_the_steps_sentences(client: TestClient) -> None:
    rid = _run_id(client, _fast("demo-preemption"))
    r = client.get(f"/api/runs/{rid}/steps/3/narration")
    assert r.status_code == 200
    body = r.json()
    assert body["step"] == 3 and body["run_id"] == rid
    keys = [it["key"] for it in body["items"]]
    assert "preempt:c" in keys
    pre = next(it for it in body["items"] if it["key"] == "preempt:c")
    assert {"kind": "request", "id": "c"} in pre["refs"] and pre["stage"] is None
    assert pre["text"]["zh"] and pre["text"]["en"]
    # the budget comes from the run's scenario
    budget = next(it for it in body["items"] if it["key"] == "budget")
    assert "budget of 16" in budget["text"]["en"]


def test_narration_route_says_the_last_step_ends_the_run(client: TestClient) -> None:
    rid = _run_id(client, _fast("seed-001"))
    n = client.get(f"/api/runs/{rid}").json()["num_steps"]
    keys = [it["key"] for it in client.get(f"/api/runs/{rid}/steps/{n}/narration").json()["items"]]
    assert "finish:last" in keys
    keys = [it["key"] for it in client.get(f"/api/runs/{rid}/steps/{n - 1}/narration").json()["items"]]
    assert "finish:last" not in keys


def test_narration_route_errors_name_the_field(client: TestClient) -> None:
    rid = _run_id(client, _fast("seed-001"))
    r = client.get(f"/api/runs/{rid}/steps/99/narration")
    assert r.status_code == 404 and r.json()["detail"][0]["field"] == "n"
    r = client.get("/api/runs/nope/steps/1/narration")
    assert r.status_code == 404 and r.json()["detail"][0]["field"] == "run_id"


def test_metrics_count_blocks_fragmentation_and_preemptions(client: TestClient) -> None:
    rid = _run_id(client, _fast("demo-preemption"))
    m = client.get(f"/api/runs/{rid}/metrics").json()
    steps, totals = m["steps"], m["totals"]
    run = client.get(f"/api/runs/{rid}").json()
    assert totals["steps"] == run["num_steps"] == len(steps)
    # preemptions at the steps the overview lists them
    assert [s["preemptions"] for s in steps] == [len(s["preempted_req_ids"]) for s in run["steps"]]
    assert totals["preemptions"] == 2
    # step 1: a, b, c hold 3, 4 and 4 tokens in 2 blocks of 2 each: 12 slots, 11 tokens, 1 empty slot
    s1 = steps[0]
    assert (s1["blocks_used"], s1["slots_allocated"], s1["tokens_held"]) == (6, 12, 11)
    assert s1["internal_fragmentation"] == 1
    for s in steps:
        assert s["blocks_used"] + s["blocks_free"] == 8  # 9 blocks, the null block never handed out
        assert 0 <= s["internal_fragmentation"] < 2 * max(s["num_reqs"], 1)
    assert totals["tokens_scheduled"] == sum(s["tokens_scheduled"] for s in steps)


def test_metrics_count_cudagraph_padding(client: TestClient) -> None:
    rid = _run_id(client, _fast("seed-001", cudagraph_capture_sizes=[1, 2, 4, 8, 16]))
    steps = client.get(f"/api/runs/{rid}/metrics").json()["steps"]
    # step 1 schedules 10 tokens (padded to 16), step 2 five (padded to 8)
    assert [s["padded_tokens"] for s in steps[:2]] == [6, 3]


def test_compare_prefix_caching_on_and_off(client: TestClient) -> None:
    on = _run_id(client, _fast("demo-prefix-cache"))
    off = _run_id(client, _fast("demo-prefix-cache", enable_prefix_caching=False))
    r = client.get("/api/compare", params={"a": on, "b": off})
    assert r.status_code == 200
    c = r.json()
    step3 = c["steps"][2]
    # without the cache, b prefills all 43 tokens at step 3 instead of 7
    assert step3["metrics_delta"]["tokens_scheduled"] == 36
    assert step3["arrays"]["slot_mapping"]["status"] == "shape"
    assert step3["arrays"]["num_computed_tokens_cpu"]["indices"] == [1]
    assert [1, 0] in step3["arrays"]["block_table"]["indices"]  # b's first block differs
    assert set(range(1, 10)) <= set(step3["kv_cache"]["ref_cnt"])  # ref count 2 with the cache, 1 without
    assert "prefix_hit:b" in step3["narration"]["only_a"]
    # step 1 (only a, no hit possible) is the same in both
    assert c["steps"][0]["arrays"] == {} and c["steps"][0]["metrics_delta"]["tokens_scheduled"] == 0
    assert c["totals_delta"]["tokens_scheduled"] == 36
    assert c["totals_delta"]["peak_shared_blocks"] == -9


def test_compare_flavours_lists_arrays_only_one_has(client: TestClient) -> None:
    a = _run_id(client, _fast("seed-001"))
    b = _run_id(client, {**_fast("seed-001"), "flavor": "ascend"})
    c = client.get("/api/compare", params={"a": a, "b": b}).json()
    step2 = c["steps"][1]
    assert step2["only_b"] == ["attn_mask"] and step2["arrays"] == {}
    # every differing scalar is one only the ascend flavour has (its state and what it follows)
    assert step2["scalars"]["attn_state"] == [None, "ChunkedPrefill"]
    assert all(a is None and b is not None for a, b in step2["scalars"].values())


def test_compare_unknown_run_is_404_naming_it(client: TestClient) -> None:
    a = _run_id(client, _fast("seed-001"))
    r = client.get("/api/compare", params={"a": a, "b": "nope"})
    assert r.status_code == 404 and r.json()["detail"][0]["field"] == "run_id"
    r = client.get("/api/compare", params={"a": a})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "query.b"


def test_check_marks_right_and_wrong_entries_with_explanations(client: TestClient) -> None:
    rid = _run_id(client, _fast("seed-001"))
    # document 001, step 2: slot_mapping [5, 14, 13, 16, 17]
    r = client.post(
        f"/api/runs/{rid}/steps/2/check", json={"array": "slot_mapping", "indices": [0, 2], "values": [5, 12]}
    )
    assert r.status_code == 200, r.text
    out = r.json()
    assert (out["num_correct"], out["total"], out["all_correct"]) == (1, 2, False)
    right, wrong = out["entries"]
    assert right["correct"] and right["explanation"] is None
    assert not wrong["correct"] and wrong["expected"] == 13 and wrong["given"] == 12
    assert "block 6 * 2 + 1 = 13" in wrong["explanation"]["en"]
    assert "block 6 * 2 + 1 = 13" in wrong["explanation"]["zh"]
    # a table entry (flattened, row-major): block_table[2, 3] is block 8 at step 2
    cell = {"array": "block_table", "indices": [15], "values": [8]}
    r = client.post(f"/api/runs/{rid}/steps/2/check", json=cell)
    assert r.json()["all_correct"]


def test_a_wrong_answer_gets_a_hint_without_the_value_and_a_cause_from_the_trace(client: TestClient) -> None:
    # document 001, step 1: request 2 (row 2) gets blocks [4, 5, 6] from the head of the free queue,
    # after request 0's [1, 2] and request 1's [3]; block_table rows are max_blocks long
    from pagedviz.core import load_preset, make_engine

    t = next(iter(make_engine(load_preset("seed-001")).run()))
    cols = t.arrays["block_table"].shape[1]
    rid = _run_id(client, _fast("seed-001"))
    body = {"array": "block_table", "indices": [2 * cols + 1], "values": [7]}
    wrong = client.post(f"/api/runs/{rid}/steps/1/check", json=body).json()["entries"][0]
    assert wrong["expected"] == 5 and not wrong["correct"]
    for lang in ("en", "zh"):
        assert "5" not in wrong["hint"][lang].replace(
            f"[{2}][1]", ""
        )  # the hint names the entry, not its value
    # the rule is said once for the array; the entry's hint says where it looks
    out = client.post(f"/api/runs/{rid}/steps/1/check", json=body).json()
    assert "free queue" in out["rule"]["en"] and "空闲队列" in out["rule"]["zh"]
    assert (
        "request 2's logical block 1" in wrong["hint"]["en"]
        and "请求 2 的第 1 个逻辑块" in wrong["hint"]["zh"]
    )
    # the cause: the free queue's order, not the stage's generic text
    assert "new blocks [4, 5, 6]" in wrong["explanation"]["en"] and "0 → [1, 2]" in wrong["explanation"]["en"]
    assert "condense" not in wrong["explanation"]["en"] and "condense" not in wrong["explanation"]["zh"]
    assert "[4, 5, 6]" in wrong["explanation"]["zh"] and "空闲队列" in wrong["explanation"]["zh"]


def test_a_preempted_requests_computed_tokens_are_explained_by_the_preemption(client: TestClient) -> None:
    # demo-preemption: c, preempted in step 3, resumes in step 4 at row 0 from 0 computed tokens
    rid = _run_id(client, _fast("demo-preemption"))
    body = {"array": "num_computed_tokens_cpu", "indices": [0], "values": [4]}
    wrong = client.post(f"/api/runs/{rid}/steps/4/check", json=body).json()["entries"][0]
    assert wrong["expected"] == 0
    assert "preempted" in wrong["explanation"]["en"] and "reset" in wrong["explanation"]["en"]
    assert "抢占" in wrong["explanation"]["zh"] and "condense" not in wrong["explanation"]["zh"]
    assert "preempted" in wrong["hint"]["en"] and "0" not in wrong["hint"]["en"].replace("[0]", "")


@cache
def _lesson_checks() -> list[tuple[int, dict[str, Any], Any]]:
    """Every checkpoint of the shipped lessons, checked wrong through the API: (section, its
    section, the response)."""
    from pagedviz.core.lesson import list_lessons, load_lesson, scenario_of

    app = TestClient(create_app(Settings(max_runs=16)))
    out = []
    for x in list_lessons():
        for k, sec in enumerate(load_lesson(x["id"])["sections"]):
            cp = sec["checkpoint"]
            if not cp:
                continue
            rid = _run_id(app, scenario_of(sec).to_dict())
            body = {"array": cp["array"], "indices": cp["indices"], "values": [-7] * len(cp["indices"])}
            r = app.post(f"/api/runs/{rid}/steps/{sec['step']}/check", json=body)
            assert r.status_code == 200, r.text
            out.append((k, sec, r.json()))
    return out


def test_every_checkpoints_hints_are_one_per_entry_with_the_rule_once_and_no_placeholder() -> None:
    """Issue 37 point 6: a wrong answer's hints differ from entry to entry (the array's rule comes
    once, in `rule`), name no "?", and give no expected value the student has not typed."""
    for k, _, out in _lesson_checks():
        wrong = [e for e in out["entries"] if not e["correct"]]
        assert out["rule"] and out["rule"]["en"] and out["rule"]["zh"], k
        for lang in ("en", "zh"):
            hints = [e["hint"][lang] for e in wrong]
            assert len(set(hints)) == len(hints), (k, lang, hints)  # one line per entry, none twice
            assert not any("?" in h.replace("？", "").split(":")[0] for h in hints)
            assert not any(" ?" in h or "?'" in h or "请求 ?" in h for h in hints), (k, lang, hints)
            assert out["rule"][lang] not in " ".join(hints), (k, lang)  # the rule is not repeated per entry


def test_v2_slot_reveal_says_the_freed_slot_was_on_top_of_the_stack() -> None:
    """Section 13's misconception: c does not get its old slot back; the slot a freed this step was
    on top of the free slot stack, and c popped it. Every number from the run's trace."""
    from pagedviz.core import make_engine

    (k, sec, out) = next(x for x in _lesson_checks() if x[1]["checkpoint"]["array"] == "idx_mapping")
    from pagedviz.core.lesson import scenario_of

    t = list(make_engine(scenario_of(sec)).run())[sec["step"] - 1]
    freed = next(e for e in t.batch["slot_events"] if e["event"] == "freed")
    added = next(e for e in t.batch["slot_events"] if e["event"] == "added")
    assert freed["slot"] == added["slot"]  # the scenario's point: the freed slot is handed out next
    row = t.batch["req_ids"].index(added["req_id"])
    why = next(e for e in out["entries"] if e["index"] == row)["explanation"]
    slot, by, rid = added["slot"], freed["req_id"], added["req_id"]
    assert f"{by} left this step and its slot {slot} went back on top of the free slot stack" in why["en"], (
        why
    )
    assert f"{rid}, sent as a new request, popped the top: slot {slot}" in why["en"], why
    assert f"它的槽位 {slot} 回到空闲槽位栈" in why["zh"] and "弹出栈顶" in why["zh"], why
    # the stack before the pop, top first: the freed slot, then the free slots after the step
    stack = [slot, *t.batch["free_slots"]]
    assert f"top first [{', '.join(map(str, stack))}]" in why["en"], why
    # the request that kept its slot says so
    kept = next(e for e in out["entries"] if e["index"] != row)["explanation"]
    assert "when it arrived and keeps it" in kept["en"] and "直到离开都不变" in kept["zh"], kept


def test_a_prefix_hit_and_a_preemption_are_the_causes_the_reveal_gives() -> None:
    checks = _lesson_checks()
    # prefix caching: b's first position is where its cached full blocks end
    k, sec, out = next(x for x in checks if x[1]["scenario"] == "demo-prefix-cache")
    why = out["entries"][0]["explanation"]
    assert "hit the prefix cache" in why["en"] and "命中前缀缓存" in why["zh"], why
    assert f"start at {out['entries'][0]['expected']}" in why["en"], why
    # the preempted request's computed tokens: reset by the preemption, in the step that did it
    k, sec, out = next(x for x in checks if x[1]["checkpoint"]["array"] == "num_computed_tokens_cpu")
    why = out["entries"][0]["explanation"]
    assert "preempted in step 3" in why["en"] and "第 3 步" in why["zh"], why


def test_a_preemption_told_from_an_earlier_step_names_whom_it_was_for_when_the_trace_records_it() -> None:
    """scheduler.preemption_causes (issue 37 point 1, the engine's part) is read where it exists:
    a step that records it names the request the victim made way for; one without it still says
    the step."""
    from pagedviz.core import load_preset, make_engine
    from pagedviz.core.answers_why import why

    steps = list(make_engine(load_preset("demo-preemption")).run())
    at = next(s for s in steps if "c" in map(str, s.scheduler.get("resumed_req_ids") or []))
    before = [s for s in steps if s.step < at.step]
    pre = next(s for s in before if "c" in map(str, s.scheduler.get("preempted_req_ids") or []))
    row = list(map(str, at.batch["req_ids"])).index("c")
    plain = why(at, "num_computed_tokens_cpu", row, before)
    assert plain and f"preempted in step {pre.step}" in plain["en"]
    pre.scheduler.setdefault("preemption_causes", {})["c"] = {"cause": "kv_pool", "for": "a"}
    told = why(at, "num_computed_tokens_cpu", row, before)
    assert told and f"in step {pre.step}, for request a" in told["en"] and "为请求 a 让路" in told["zh"], told


def test_null_values_show_every_answer_with_its_explanation(client: TestClient) -> None:
    rid = _run_id(client, _fast("seed-001"))
    body = {"array": "slot_mapping", "indices": [0, 2], "values": None}
    out = client.post(f"/api/runs/{rid}/steps/2/check", json=body).json()
    assert [e["expected"] for e in out["entries"]] == [5, 13] and out["num_correct"] == 0
    assert all(e["given"] is None and e["explanation"] for e in out["entries"])
    # a body without values is still refused, naming the field
    r = client.post(f"/api/runs/{rid}/steps/2/check", json={"array": "slot_mapping", "indices": [0]})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "values"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"array": "nope", "indices": [0], "values": [1]}, "array"),
        ({"array": "slot_mapping", "indices": [], "values": []}, "indices"),
        ({"array": "slot_mapping", "indices": [5], "values": [1]}, "indices[0]"),
        ({"array": "slot_mapping", "indices": [0, 1], "values": [1]}, "values"),
        ({"array": "slot_mapping", "indices": [0], "values": ["x"]}, "values[0]"),
        ({"array": "slot_mapping", "indices": [True], "values": [1]}, "indices[0]"),
        ([1, 2], "body"),
    ],
)
def test_check_rejects_bad_input_naming_the_field(client: TestClient, payload: Any, field: str) -> None:
    rid = _run_id(client, _fast("seed-001"))
    r = client.post(f"/api/runs/{rid}/steps/2/check", json=payload)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["field"] == field


def test_check_on_a_body_that_is_not_json_is_422(client: TestClient) -> None:
    rid = _run_id(client, _fast("seed-001"))
    r = client.post(f"/api/runs/{rid}/steps/1/check", content=b"{nope")
    assert r.status_code == 422 and r.json()["error"] == "invalid_json"


def test_compare_model_runner_v2_with_v1_aligns_the_batches_by_request(client: TestClient) -> None:
    v2 = _run_id(client, _fast("demo-v2-slots"))
    v1 = _run_id(client, _fast("demo-v2-slots", model_runner="v1"))
    c = client.get("/api/compare", params={"a": v2, "b": v1}).json()
    steps = {s["step"]: s for s in c["steps"]}
    runs = {rid: client.get(f"/api/runs/{rid}").json() for rid in (v2, v1)}
    for n, s in steps.items():
        # each side's arrays are its own: V2's slot state and idx_mapping, V1's rows and block_table
        assert {"idx_mapping", "input_block_tables", "block_tables"} <= set(s["only_a"])
        assert {"req_indices", "block_table", "token_ids_cpu"} <= set(s["only_b"])
        batch = s["batch"]
        order = [client.get(f"/api/runs/{rid}/steps/{n}").json()["batch"]["req_ids"] for rid in (v2, v1)]
        assert batch["req_ids"] == order and batch["same_order"] == (order[0] == order[1])
        # V2 places each request in a state slot (the trace's), V1 only in a row
        slots = client.get(f"/api/runs/{v2}/steps/{n}").json()["batch"]["slots"]
        assert {r: p["slot"] for r, p in batch["place"][0].items()} == {r: slots[r] for r in order[0]}
        assert all(p["slot"] is None for p in batch["place"][1].values())
        assert batch["has_slots"] == [True, False]
        # the same scheduler and the same blocks: once aligned by request, every token goes to
        # the same KV slot at the same position; what differs entry by entry is only the order
        assert batch["per_request"]["slot_mapping"] == [] and batch["per_request"]["positions"] == []
        if batch["same_order"]:
            assert "slot_mapping" not in s["arrays"]
    # V2 sorts decodes before a prefill chunk; V1 keeps the resumed request in the row it took
    resumed = [n for n, s in steps.items() if not s["batch"]["same_order"]]
    assert resumed and all("slot_mapping" in steps[n]["arrays"] for n in resumed)
    assert runs[v2]["num_steps"] == runs[v1]["num_steps"] == len(steps)


def test_compare_v2_with_v1_says_which_stale_entries_it_ignores(client: TestClient) -> None:
    """Step 8 of demo-v2-slots: d's gathered row on V2 is [3, 6, 1, 4] with num_blocks 3 (its
    slot's 4 was left by an earlier holder): stale, never read, and listed as ignored."""
    v2 = _run_id(client, _fast("demo-v2-slots"))
    v1 = _run_id(client, _fast("demo-v2-slots", model_runner="v1"))
    c = client.get("/api/compare", params={"a": v2, "b": v1}).json()
    t = client.get(f"/api/runs/{v2}/steps/8").json()
    row = t["batch"]["req_ids"].index("d")
    slot = t["arrays"]["idx_mapping"]["data"][row]
    nb = t["arrays"]["num_blocks"]["data"][slot]
    gathered = t["arrays"]["input_block_tables"]["data"][row]
    assert gathered[:4] == [3, 6, 1, 4] and nb == 3
    assert c["steps"][7]["stale"] == [
        [{"array": "input_block_tables", "req": "d", "row": row, "col": 3, "value": 4}],
        [],  # V1 zeroes a row's tail: nothing stale
    ]
    # every listed entry lies past its row's num_blocks and holds a block id (never 0)
    for s in c["steps"]:
        for e in s["stale"][0]:
            tr = client.get(f"/api/runs/{v2}/steps/{s['step']}").json()["arrays"]
            own = tr["num_blocks"]["data"][tr["idx_mapping"]["data"][e["row"]]]
            assert e["col"] >= own and e["value"] == tr["input_block_tables"]["data"][e["row"]][e["col"]] != 0


def test_compare_ignores_a_difference_in_entries_no_kernel_reads() -> None:
    """Two V2 runs that differ only in a stale cell (past num_blocks) do not differ; a cell
    attention reads does. The engine's own traces, one copy with one cell written."""
    import copy

    from pagedviz.core import Scenario, make_engine
    from pagedviz.core.compare import compare_runs
    from pagedviz.core.kernel_reads import read_mask

    a = list(make_engine(Scenario.from_dict(_fast("demo-v2-slots"))).run())
    t = a[7]
    mask = read_mask(t, "input_block_tables")
    assert mask is not None
    idx, nb = t.arrays["idx_mapping"], t.arrays["num_blocks"]
    want = [[c < nb[idx[r]] for c in range(mask.shape[1])] for r in range(len(idx))]
    assert mask.tolist() == want  # the main view's rule: row r up to num_blocks[idx_mapping[r]]
    for name in ("input_block_tables", "block_tables"):
        m = read_mask(t, name)
        assert m is not None
        stale = tuple(int(i) for i in next(iter(zip(*(~m).nonzero(), strict=True))))
        read = tuple(int(i) for i in next(iter(zip(*m.nonzero(), strict=True))))
        for cell, counts in ((stale, False), (read, True)):
            b = copy.deepcopy(a)
            b[7].arrays[name] = b[7].arrays[name].copy()
            b[7].arrays[name][cell] += 100
            got = compare_runs(a, b)["steps"][7]["arrays"]
            assert (name in got) == counts, (name, cell, got)
            if counts:
                assert got[name]["indices"] == [list(cell)]
