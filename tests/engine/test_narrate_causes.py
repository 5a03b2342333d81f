"""The words about why requests wait and for whom one was preempted come only from the trace's
cause objects (core/narrate_causes.py): the issue's example through the API, and every sentence
of every preset (and its compare variants, and an imported recording) read back and held to the
step's waiting_causes / preemption_causes, in English and 中文."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pagedviz.app.compute import compute_pool
from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core import Scenario, make_engine
from pagedviz.core.narrate import narrate
from pagedviz.core.narrate_causes import MANY, stated_causes
from pagedviz.core.presets import list_presets, preset_dict
from pagedviz.core.recording import read_recording
from pagedviz.core.replay import import_recording
from tests.support.recording_cases import LINES

# the compare page's contrasts (static/compare.js CONTRASTS) that change what waits
CHUNKED_OFF = {"enable_chunked_prefill": False, "max_num_batched_tokens": 240}
BECAUSE = re.compile(r"\bbecause\b|因为", re.IGNORECASE)


@pytest.fixture(scope="module")
def client() -> TestClient:
    c = TestClient(create_app(Settings(max_runs=8)))
    assert compute_pool().wait_ready(), "the compute processes did not start"
    return c


def _scenario(preset: str, flavor: str | None = None, **config: Any) -> dict[str, Any]:
    d = preset_dict(preset)
    d["config"].update(config)
    if flavor:
        d["flavor"] = flavor
    return d


def _run(client: TestClient, d: dict[str, Any]) -> str:
    r = client.post("/api/runs", json=d)
    assert r.status_code == 201, r.text
    return str(r.json()["run_id"])


def test_chunked_prefill_off_step_2_says_request_4_waits_for_the_token_budget(client: TestClient) -> None:
    """The issue's example: "Chunked prefill on vs off", step 2, B side, en and zh."""
    a = _run(client, _scenario("seed-000"))
    b = _run(client, _scenario("seed-000", **CHUNKED_OFF))
    step = client.get(f"/api/runs/{b}/steps/2").json()
    assert step["scheduler"]["waiting_causes"] == {
        "4": {"cause": "token_budget", "tokens_needed": 120, "tokens_left": 70}
    }
    assert step["scheduler"]["preemption_causes"] == {}
    cmp = client.get("/api/compare", params={"a": a, "b": b}).json()
    assert "waiting" in cmp["steps"][1]["narration"]["only_b"]  # the compare line's B sentence
    items = client.get(f"/api/runs/{b}/steps/2/narration").json()["items"]
    text = next(it for it in items if it["key"] == "waiting")["text"]
    assert "Request 4 waits for the token budget: it needs 120 tokens and 70 are left" in text["en"]
    assert "请求 4 在等 token 预算：它需要 120 个 token，预算只剩 70 个" in text["zh"]
    for words in text.values():
        assert "free blocks" not in words and "空闲块" not in words and not BECAUSE.search(words)
    # the pool sentence beside it still says the pool had room
    pool = next(it for it in items if it["key"] == "pool")["text"]["en"]
    assert int(re.search(r"has (\d+) free block", pool).group(1)) > 0


def test_vllm_vs_nano_step_1_names_nano_vllms_first_sequence_rule(client: TestClient) -> None:
    b = _run(client, _scenario("seed-001", flavor="nanovllm"))
    items = client.get(f"/api/runs/{b}/steps/1/narration").json()["items"]
    text = next(it for it in items if it["key"] == "waiting")["text"]
    assert "Request 2 waits for the token budget: it needs 8 tokens and 5 are left" in text["en"]
    assert "only a step's first sequence take a chunk" in text["en"]
    assert "请求 2 在等 token 预算" in text["zh"] and "nano-vllm 每一步只允许第一个序列分块" in text["zh"]


# ------------------------------------------------------------------ every sentence held to the trace
def expected(causes: dict[str, dict[str, Any]]) -> set[tuple[str, str, str | None]]:
    """What the words must state for these waiting_causes, as stated_causes reads them."""
    out: set[tuple[str, str, str | None]] = set()
    waiting = list(causes)
    behind: dict[str, list[str]] = {}
    for rid, c in causes.items():
        if c["cause"] == "behind":
            behind.setdefault(c["behind"], []).append(rid)
        else:
            out.add((c["cause"], rid, None))
    for h, rs in behind.items():
        if len(rs) > MANY and rs == waiting[waiting.index(h) + 1 :]:
            out.add(("behind_rest", str(len(rs)), h))
        else:
            out |= {("behind", r, h) for r in rs}
    return out


def problems(steps: list[Any], config: Any, narrator: Any = narrate) -> list[str]:
    """Every disagreement between a step's words and its cause objects."""
    bad: list[str] = []
    prev = None
    for t in steps:
        s = t.scheduler
        want = expected(s["waiting_causes"])
        items = narrator(t, prev, config)
        for lang in ("en", "zh"):
            stated: set[tuple[str, str, str | None]] = set()
            for it in items:
                words = it["text"][lang]
                if it["key"] == "waiting" and BECAUSE.search(words):
                    bad.append(f"step {t.step} {lang}: a 'because' not rendered from a cause: {words}")
                stated |= set(stated_causes(words, lang))
                for victim, who in re.findall(
                    r"request (\S+) was preempted for (?:request (\S+?):|itself)", words
                ):
                    c = s["preemption_causes"].get(victim)
                    if c is None or c["for"] != (who or victim):
                        bad.append(f"step {t.step}: {victim} said preempted for {who or victim}, trace {c}")
            if stated != want:
                said, held = sorted(stated, key=str), sorted(want, key=str)
                bad.append(f"step {t.step} {lang}: words state {said}, trace {held}")
        prev = t
    return bad


def _variants() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for p in list_presets():
        d = preset_dict(p["id"])
        d["config"]["model"] = None
        out.append((p["id"], d))
    for label, d in [
        ("seed-000 chunking off", _scenario("seed-000", **CHUNKED_OFF)),
        ("seed-001 nanovllm", _scenario("seed-001", flavor="nanovllm")),
        ("seed-001 ascend", _scenario("seed-001", flavor="ascend")),
        ("demo-preemption nanovllm", _scenario("demo-preemption", flavor="nanovllm")),
        ("demo-preemption async v2", _scenario("demo-preemption", model_runner="v2", async_scheduling=True)),
        ("demo-prefix-cache max_num_reqs 1", _scenario("demo-prefix-cache", max_num_reqs=1)),
    ]:
        d["config"]["model"] = None
        out.append((label, d))
    return out


@pytest.mark.parametrize("label,scenario", _variants(), ids=[v[0] for v in _variants()])
def test_every_sentence_about_waiting_states_the_traces_causes(label: str, scenario: dict[str, Any]) -> None:
    sc = Scenario.from_dict(scenario)
    assert problems(list(make_engine(sc).run()), sc.config) == []


def test_an_imported_recordings_words_state_its_derived_causes() -> None:
    imported = import_recording(*read_recording(LINES))
    assert problems(imported.traces, imported.scenario.config) == []
    words = [it["text"]["en"] for t in imported.traces for it in narrate(t) if it["key"] == "preempt:c"]
    assert words and all("(derived from the recorded numbers)" in w for w in words)


def test_the_check_rejects_a_cause_the_trace_does_not_hold() -> None:
    """The issue's false sentence, put back in place of the rendered one, is caught."""
    sc = Scenario.from_dict(_scenario("seed-000", **CHUNKED_OFF))
    steps = list(make_engine(sc).run())[:2]
    false = "Still waiting: 4, because the free blocks cannot hold the next one (admission checks the pool)."
    t = steps[1]

    def lying(*args: Any) -> list[Any]:
        items = narrate(*args)
        for it in items:
            if it["key"] == "waiting":
                it["text"] = {"en": false, "zh": "仍在等待：4，因为空闲块放不下下一个请求。"}
        return items

    found = problems(steps, sc.config, lying)
    assert any("because" in p for p in found) and any("words state []" in p for p in found)
    assert problems(steps, sc.config) == []
    # a kv_pool phrase where the trace holds token_budget is read as kv_pool, which it does not hold
    assert ("kv_pool", "4", None) not in expected(t.scheduler["waiting_causes"])
    assert stated_causes("Request 4 waits for KV blocks: it needs 8 blocks and 2 are free.", "en") == [
        ("kv_pool", "4", None)
    ]
