"""Lessons (core/lesson.py and core/lessons/): the shipped lesson is valid, follows the runs it
points at (its checkpoints' answers are the documents' numbers), and a lecturer's file is checked
field by field, through Python and through the REST routes."""

from __future__ import annotations

import copy
import functools
import json
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core import Scenario, make_engine
from pagedviz.core.lesson import (
    LessonError,
    check_lesson_against_runs,
    fill_lesson,
    list_lessons,
    load_lesson,
    scenario_of,
    validate_lesson,
)
from pagedviz.core.trace import StepTrace

LESSON = "paged-attention-50"


@functools.cache
def _steps(canon: str) -> list[StepTrace]:
    return list(make_engine(Scenario.from_dict(json.loads(canon))).run())


def _run(sc: Scenario) -> list[StepTrace]:
    return _steps(json.dumps(sc.to_dict(), sort_keys=True))


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Settings(max_runs=16)))


def _minimal(**section: Any) -> dict[str, Any]:
    s = {
        "scenario": "seed-001",
        "step": 1,
        "stage": "slot_mapping",
        "selection": {"kind": "token", "id": 7},
        "paragraph": {"en": "Where does token 7 go?", "zh": "第 7 个 token 写到哪里？"},
        "checkpoint": {"array": "slot_mapping", "indices": [7]},
    }
    s.update(section)
    return {"title": {"en": "One question"}, "sections": [s]}


def test_the_shipped_lesson_is_listed_in_both_languages() -> None:
    en, zh = list_lessons("en"), list_lessons("zh")
    assert [x["id"] for x in en] == [x["id"] for x in zh] == [LESSON]
    assert en[0]["title"] == "Paged attention in 50 minutes" and "分页注意力" in zh[0]["title"]
    assert en[0]["minutes"] == 50 and en[0]["num_sections"] >= 10


def test_the_shipped_lesson_is_complete_in_both_languages_and_matches_its_runs() -> None:
    lesson = load_lesson(LESSON)
    for s in lesson["sections"]:
        # both languages written out, not filled in from each other
        assert s["paragraph"]["en"] != s["paragraph"]["zh"]
        assert s["title"] is not None and s["title"]["en"] != s["title"]["zh"]
    check_lesson_against_runs(lesson, _run)


def test_the_lesson_follows_the_documents_order_of_ideas() -> None:
    # contiguous KV -> fragmentation -> blocks, a request arrives, blocks are allocated, slot_mapping,
    # the kernel reads through the block table, then chunked prefill, preemption, prefix caching
    sections = load_lesson(LESSON)["sections"]
    titles = [s["title"]["en"].lower() for s in sections]
    order = ["paging", "arrives", "allocated", "slot_mapping", "block table", "chunked", "preempt", "prefix"]
    at = [next((i for i, t in enumerate(titles) if w in t), -1) for w in order]
    assert -1 not in at and at == sorted(at), dict(zip(order, at))
    assert "fragmentation" in sections[0]["paragraph"]["en"] and "碎片" in sections[0]["paragraph"]["zh"]


# the answers a student should give, from the documents (001, 000, 004) and the demo presets' summaries
ANSWERS = {
    ("seed-001", 1, "block_table"): [4, 5, 6],
    ("seed-001", 1, "positions"): [0, 1, 2, 3, 4],
    ("seed-001", 1, "slot_mapping"): [10],
    ("seed-001", 2, "slot_mapping"): [5, 14, 13, 16, 17],
    ("seed-001", 2, "seq_lens"): [4, 3, 8],
    ("seed-000", 2, "query_start_loc"): [0, 1, 2, 95, 170, 200],
    ("demo-preemption", 4, "num_computed_tokens_cpu"): [0],
    ("demo-prefix-cache", 3, "positions"): [36],
    ("seed-004", 2, "slot_mapping"): [11, 273],
    # c, resumed as a new request, takes slot 3 (a's, freed this step), not its old slot 1
    ("demo-v2-slots", 4, "idx_mapping"): [2, 3],
    # at 20 computed tokens a window of 8 keeps positions 13 on: the scheduler's sliding list of a
    # drops blocks 1-3 to the null block, but the runner hears only of the new block (2, one the
    # window just gave back), so its row [1, 2, 3, 4, 5, 2] keeps the dropped ids (vLLM's
    # CachedRequestData); vLLM 0.33's own scheduler and V1 runner (the engine vllm) give it too
    ("demo-gpt-oss-sliding-window", 2, "block_table"): [1, 2, 3, 2],
}


def test_every_checkpoint_answer_is_the_documents_number() -> None:
    seen = set()
    for s in load_lesson(LESSON)["sections"]:
        cp = s["checkpoint"]
        if cp is None:
            continue
        key = (s["scenario"], s["step"], cp["array"])
        t = _run(scenario_of(s))[s["step"] - 1]
        got = t.array_entries[cp["array"]].value.reshape(-1)[cp["indices"]].tolist()
        assert got == ANSWERS[key], key
        seen.add(key)
    assert seen == set(ANSWERS)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"scenario": "nope"}, "sections[0].scenario"),
        ({"scenario": {"requests": "x"}}, "sections[0].scenario.requests"),
        ({"step": 0}, "sections[0].step"),
        ({"stage": "attn_mask"}, "sections[0].stage"),  # an Ascend stage in a vllm scenario
        ({"selection": {"kind": "cell", "id": 1}}, "sections[0].selection.kind"),
        ({"selection": {"kind": "block", "id": "4"}}, "sections[0].selection.id"),
        ({"paragraph": {"en": ""}}, "sections[0].paragraph.en"),
        ({"paragraph": {"fr": "Bonjour"}}, "sections[0].paragraph"),
        ({"paragraph": {"en": "a\x00b"}}, "sections[0].paragraph.en"),
        ({"checkpoint": {"array": "nope", "indices": [0]}}, "sections[0].checkpoint.array"),
        ({"checkpoint": {"array": "slot_mapping", "indices": [-1]}}, "sections[0].checkpoint.indices[0]"),
        ({"checkpoint": {"array": "slot_mapping"}}, "sections[0].checkpoint"),
        ({"typo": 1}, "sections[0].typo"),
        ({"views": "queue"}, "sections[0].views"),
        ({"views": ["nope"]}, "sections[0].views[0]"),
        ({"views": ["queue", 3]}, "sections[0].views[1]"),
    ],
)
def test_a_bad_section_is_refused_naming_its_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(LessonError) as e:
        validate_lesson(_minimal(**change))
    assert field in [f for f, _ in e.value.errors], e.value.errors


def test_a_sections_views_name_panels_or_arrays_of_its_stages() -> None:
    lesson = validate_lesson(_minimal(views=["queue", "slot_mapping"]))
    assert lesson["sections"][0]["views"] == ["queue", "slot_mapping"]
    assert validate_lesson(_minimal())["sections"][0]["views"] == []  # views are optional


def test_every_problem_is_reported_at_once() -> None:
    data = _minimal(step=0, stage="nope")
    data["title"] = {}
    with pytest.raises(LessonError) as e:
        validate_lesson(data)
    assert {"title", "sections[0].step", "sections[0].stage"} <= {f for f, _ in e.value.errors}


def test_a_lesson_in_one_language_shows_it_in_both() -> None:
    lesson = validate_lesson(_minimal(paragraph={"zh": "只有中文"}))
    assert lesson["title"] == {"en": "One question", "zh": "One question"}
    assert lesson["sections"][0]["paragraph"] == {"en": "只有中文", "zh": "只有中文"}


def test_steps_and_checkpoints_are_checked_against_the_run() -> None:
    lesson = validate_lesson(_minimal(step=40))
    with pytest.raises(LessonError) as e:
        check_lesson_against_runs(lesson, _run)
    assert e.value.errors[0][0] == "sections[0].step"
    lesson = validate_lesson(_minimal(checkpoint={"array": "slot_mapping", "indices": [10]}))
    with pytest.raises(LessonError) as e:
        check_lesson_against_runs(lesson, _run)
    assert e.value.errors[0][0] == "sections[0].checkpoint.indices[0]"


def test_lessons_routes_list_and_serve_the_shipped_lesson(client: TestClient) -> None:
    assert client.get("/api/lessons").json()[0]["id"] == LESSON
    assert "分页" in client.get("/api/lessons", params={"lang": "zh"}).json()[0]["title"]
    r = client.get(f"/api/lessons/{LESSON}")
    assert r.status_code == 200 and r.json()["sections"][0]["scenario"] == "seed-001"
    r = client.get("/api/lessons/nope")
    assert r.status_code == 404 and r.json()["detail"][0]["field"] == "lesson_id"


def test_validate_route_checks_a_lecturers_file_and_gives_a_link(client: TestClient) -> None:
    # user text is kept as written (the page shows it with textContent)
    data = _minimal(paragraph={"en": "<b>bold</b> & slot_mapping"})
    r = client.post("/api/lessons/validate", json=data)
    assert r.status_code == 200 and r.json()["valid"], r.text
    assert r.json()["lesson"]["sections"][0]["paragraph"]["en"] == "<b>bold</b> & slot_mapping"
    link = r.json()["link"]
    back = client.get("/api/lessons/from-link", params={"l": link})
    assert back.status_code == 200 and back.json() == r.json()["lesson"]
    # a problem only the run can see is still a 200 with the field named
    r = client.post("/api/lessons/validate", json=_minimal(step=40))
    assert r.status_code == 200 and not r.json()["valid"]
    assert r.json()["detail"][0]["field"] == "sections[0].step"


def test_inline_scenarios_are_held_to_the_servers_limits(client: TestClient) -> None:
    scenario = {
        "config": {
            "block_size": 2,
            "max_model_len": 8,
            "num_kv_blocks": 8,
            "model": None,
            "model_runner": "v1",
        },
        "requests": [{"id": "x", "prompt_len": 3, "max_tokens": 2}],
        "max_steps": 10_000_000,
    }
    data = _minimal(scenario=scenario, step=1, checkpoint={"array": "slot_mapping", "indices": [2]})
    r = client.post("/api/lessons/validate", json=data)
    assert not r.json()["valid"] and r.json()["detail"][0]["field"] == "sections[0].scenario.max_steps"
    ok = copy.deepcopy(data)
    ok["sections"][0]["scenario"]["max_steps"] = 16
    assert client.post("/api/lessons/validate", json=ok).json()["valid"]


def test_from_link_refuses_garbage(client: TestClient) -> None:
    r = client.get("/api/lessons/from-link", params={"l": "!!!"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "l"


# ------------------------------------------------------------------ Model Runner V2 and placeholders
V2 = "demo-v2-slots"


def _v2_sections() -> list[dict[str, Any]]:
    return [s for s in load_lesson(LESSON)["sections"] if s["scenario"] == V2]


def test_the_v2_sections_say_what_their_run_does() -> None:
    """What the V2 sections say in words, checked against the run (their numbers are placeholders)."""
    secs = _v2_sections()
    assert [s["step"] for s in secs] == [1, 4, 7] and "V2" in secs[0]["title"]["en"]
    steps = _run(scenario_of(secs[0]))
    t = {n: steps[n - 1] for n in range(1, len(steps) + 1)}
    m = scenario_of(secs[0]).config.max_num_reqs
    # step 1: slots from the top of the stack, in arrival order
    assert [t[1].batch["slots"][r] for r in "abc"] == [m - 1, m - 2, m - 3]
    # step 3 preempts c; a finishes in step 4 and c comes back as a new request, in a's slot
    assert t[3].scheduler["preempted_req_ids"] == ["c"] and t[3].batch["slot_events"][0]["req_id"] == "c"
    assert t[4].scheduler["finished_req_ids"] == ["a"] and "c" in t[4].scheduler["new_req_ids"]
    assert t[4].batch["slots"]["c"] == t[1].batch["slots"]["a"] != t[1].batch["slots"]["c"]
    assert t[4].batch["slots"]["b"] == t[1].batch["slots"]["b"]  # b keeps its slot
    assert t[4].batch["req_ids"] == ["b", "c"]  # the decode row first, then c's prefill chunk
    # step 7: b finished at the end of step 6; d (admitted late) and c (preempted twice) come in, d first
    assert t[7].scheduler["finished_req_ids"] == ["b"] and t[7].scheduler["new_req_ids"] == ["d", "c"]
    assert sum(n.scheduler["preempted_req_ids"].count("c") for n in steps) == 2
    assert all("d" not in n.scheduler["num_scheduled_tokens"] for n in steps[:6])
    assert scenario_of(secs[0]).requests[3].arrival_step < 7
    assert t[7].batch["slots"]["d"] == t[7].batch["slot_events"][0]["slot"]  # b's freed slot, first out
    # the scheduler lists c before d; the sort puts d's shorter chunk first
    assert list(t[7].scheduler["num_scheduled_tokens"]) == ["c", "d"] and t[7].batch["req_ids"] == ["d", "c"]


def test_the_v2_paragraphs_type_no_number_the_run_computes() -> None:
    allowed = re.compile(r"0\.33|v1/|[Vv][12]\b|[Ss]tep \d+|第 \d+ 步|\{\{.*?\}\}")
    for s in _v2_sections():
        for lang in ("en", "zh"):
            text = allowed.sub("", s["paragraph"][lang])
            assert not re.search(r"\d", text), (s["step"], lang, re.findall(r".{0,20}\d.{0,20}", text))


# what a paragraph may say in digits: the lesson's own names (steps, requests, tokens, entries it
# asks for), vLLM's constants (the null block 0, a reset to 0, a mask's 1), versions and paths
TYPED_OK = re.compile(
    r"\{\{.*?\}\}|0\.33|v1/|\b[Vv][12]\b|[Ss]teps? \d+|第 \d+ 步"
    r"|[Rr]equests? \d+(?: and \d+)?|请求 \d+(?: 和 \d+)?|[Tt]oken \d+|第 \d+ 个 token|\w\[\d+\]"
    r"|[Bb]lock 0\b|块 0|a 0 in|的 0 表示|to 0\b|from 0\b|从 0 开始|leading 0|加一个 0"
    r"|0\.\.p|a 1 marks|值为 1|1,200 lines|1200 行"
    r"|[Ll]ayer \d+|第 \d+ 层|sliding_window \+ 1"
)


def test_no_paragraph_types_a_number_the_run_computes() -> None:
    """Every number a run computes is a placeholder filled from the run: a typed one could disagree
    with it (section 11 once said c went into blocks (5, 8, 2) while its run put it in [2, 1, 6])."""
    for i, s in enumerate(load_lesson(LESSON)["sections"]):
        for lang in ("en", "zh"):
            text = TYPED_OK.sub("", s["paragraph"][lang])
            assert not re.search(r"\d", text), (i, lang, re.findall(r".{0,25}\d.{0,15}", text))


def test_the_served_lesson_says_what_its_runs_do(client: TestClient) -> None:
    served = client.get(f"/api/lessons/{LESSON}").json()["sections"]
    # the resumed request's blocks are the ones its run gave it, in its run's order
    k, sec = next(
        (i, s) for i, s in enumerate(served) if s["scenario"] == "demo-preemption" and s["step"] == 4
    )
    t = _run(scenario_of(sec))[3]
    blocks = ", ".join(map(str, t.scheduler["new_block_ids"]["c"]))
    assert (
        f"free now ({blocks})" in sec["paragraph"]["en"] and f"空闲的块（{blocks}）" in sec["paragraph"]["zh"]
    ), k
    # the budget and the chunked prefill of the first run
    first = next(
        s for s in served if s["scenario"] == "seed-001" and s["selection"] == {"kind": "request", "id": "2"}
    )
    t1 = _run(scenario_of(first))[0]
    n = t1.scheduler["num_scheduled_tokens"]
    assert (
        f"request 0 takes {n['0']}, request 1 takes {n['1']} and request 2 only the {n['2']}"
        in first["paragraph"]["en"]
    )
    assert "{{" not in json.dumps(served)


def test_the_served_lesson_fills_the_v2_numbers_from_the_run_and_keeps_the_answer_hidden(
    client: TestClient,
) -> None:
    served = client.get(f"/api/lessons/{LESSON}").json()
    filled = [s for s in served["sections"] if s["scenario"] == V2]
    assert filled and all("{{" not in s["paragraph"][lang] for s in filled for lang in ("en", "zh"))
    steps = _run(scenario_of(filled[0]))
    slots = steps[0].batch["slots"]
    assert f"take slots {slots['a']}, {slots['b']} and {slots['c']}" in filled[0]["paragraph"]["en"]
    assert f"拿到槽位 {slots['a']}、{slots['b']}、{slots['c']}" in filled[0]["paragraph"]["zh"]
    idx = steps[6].arrays["idx_mapping"].tolist()
    assert f"idx_mapping [{', '.join(map(str, idx))}]" in filled[2]["paragraph"]["en"]
    # the checkpoint section says the slots it asks about nowhere
    cp = filled[1]["checkpoint"]
    answer = steps[3].arrays[cp["array"]][cp["indices"]].tolist()
    for lang in ("en", "zh"):
        assert ", ".join(map(str, answer)) not in filled[1]["paragraph"][lang]
    # the rest of a section is served as written: only its placeholders are filled in
    written = load_lesson(LESSON)["sections"][0]
    assert {k: v for k, v in served["sections"][0].items() if k != "paragraph"} == {
        k: v for k, v in written.items() if k != "paragraph"
    }


def _v2_minimal(text: str, **section: Any) -> dict[str, Any]:
    fields = {"scenario": V2, "step": 4, "stage": "idx_mapping", "selection": None, "paragraph": {"en": text}}
    return _minimal(**{**fields, **section})


def test_a_lecturers_placeholders_come_back_filled_in() -> None:
    lesson = validate_lesson(
        _v2_minimal(
            "c has {{scheduler.num_scheduled_tokens.c}} tokens in slot "
            "{{batch.slots.c}}; at step 3 [{{@3:arrays.idx_mapping}}]",
            checkpoint=None,
        )
    )
    check_lesson_against_runs(lesson, _run)
    text = fill_lesson(lesson, _run)["sections"][0]["paragraph"]["en"]
    steps = _run(scenario_of(lesson["sections"][0]))
    c = steps[3].scheduler["num_scheduled_tokens"]["c"]
    three = ", ".join(map(str, steps[2].arrays["idx_mapping"].tolist()))
    assert text == f"c has {c} tokens in slot {steps[3].batch['slots']['c']}; at step 3 [{three}]"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{{nope.x}}", "is not a placeholder"),
        ("{{batch}}", "names a whole part"),
        ("{{batch.slots.a", "unclosed"),
        ("{{@0:batch.slots.a}}", "numbered from 1"),
    ],
)
def test_a_malformed_placeholder_is_refused_naming_its_paragraph(text: str, says: str) -> None:
    with pytest.raises(LessonError) as e:
        validate_lesson(_v2_minimal(text, checkpoint=None))
    assert [f for f, _ in e.value.errors] == ["sections[0].paragraph.en"] and says in e.value.errors[0][1]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{{scheduler.num_scheduled_tokens.zz}}", "nothing at 'zz' at step 4"),
        ("{{arrays.nope[0]}}", "no array 'nope'"),
        ("{{@99:batch.req_ids}}", "the run has steps 1 to"),
        ("{{@3:batch.slot_events}}", "a list of groups"),
        ("{{arrays.idx_mapping}}", "gives away the checkpoint"),
        ("{{batch.slots.c}}", "gives away the checkpoint"),
    ],
)
def test_a_placeholder_the_run_cannot_fill_or_that_tells_the_answer_is_refused(text: str, says: str) -> None:
    lesson = validate_lesson(_v2_minimal(text, checkpoint={"array": "idx_mapping", "indices": [1]}))
    with pytest.raises(LessonError) as e:
        check_lesson_against_runs(lesson, _run)
    assert [f for f, _ in e.value.errors] == ["sections[0].paragraph.en"] and says in e.value.errors[0][1]
    # the same value at another step tells nothing about this step's answer
    other = validate_lesson(
        _v2_minimal("{{@1:batch.slots.c}}", checkpoint={"array": "idx_mapping", "indices": [1]})
    )
    check_lesson_against_runs(other, _run)


def test_the_validate_route_fills_placeholders_and_names_a_bad_one(client: TestClient) -> None:
    r = client.post("/api/lessons/validate", json=_v2_minimal("slot {{batch.slots.c}}", checkpoint=None))
    assert r.json()["valid"], r.text
    filled = r.json()["lesson"]["sections"][0]["paragraph"]["en"]
    assert re.fullmatch(r"slot \d+", filled)
    back = client.get("/api/lessons/from-link", params={"l": r.json()["link"]}).json()
    assert back["sections"][0]["paragraph"]["en"] == filled
    r = client.post("/api/lessons/validate", json=_v2_minimal("slot {{batch.slots.zz}}", checkpoint=None))
    assert not r.json()["valid"] and r.json()["detail"][0]["field"] == "sections[0].paragraph.en"


def test_v2_stages_and_arrays_are_checked_for_a_v2_scenario() -> None:
    validate_lesson(_v2_minimal("where?", checkpoint={"array": "idx_mapping", "indices": [0]}))
    with pytest.raises(LessonError) as e:  # V1's stage and array are not V2's
        validate_lesson(
            _v2_minimal("where?", stage="update_states", checkpoint={"array": "req_indices", "indices": [0]})
        )
    assert {f for f, _ in e.value.errors} == {"sections[0].stage", "sections[0].checkpoint.array"}
    with pytest.raises(LessonError):  # and the other way round
        validate_lesson(_minimal(stage="idx_mapping"))
