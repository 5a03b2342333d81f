"""GET /api/stages/text: every stage's title and explanation in English and 简体中文, from the engine's
`@stage` text, the one source the run page reads (it carries the same answer in its HTML)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core.registry import engine_class
from pagedviz.core.runners.v2 import FINISH_STAGE, ModelRunnerV2

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Settings(max_runs=4)))


@pytest.fixture(scope="module")
def stages(client: TestClient) -> dict[str, dict[str, Any]]:
    r = client.get("/api/stages/text")
    assert r.status_code == 200
    return {s["key"]: s for s in r.json()["stages"]}


def _names(cls: type) -> list[str]:
    return [getattr(cls, m).stage_spec.name for m in cls.STAGES]  # type: ignore[attr-defined]


def test_every_stage_of_v1_and_v2_has_its_title_and_explanation_in_english_and_chinese(
    stages: dict[str, dict[str, Any]],
) -> None:
    v1 = ["update_states", *_names(engine_class("vllm").stages_from()), "rejection_sampler"]
    ascend = _names(engine_class("ascend").stages_from())
    nano = [f"nanovllm:{n}" for n in _names(engine_class("nanovllm").stages_from())]
    v2 = [f"v2:{n}" for n in (FINISH_STAGE.name, *_names(ModelRunnerV2), "rejection_sampler")]
    assert "req_indices" in v1 and "attn_mask" in ascend and "v2:idx_mapping" in v2
    for key in [*v1, *ascend, *nano, *v2]:
        assert key in stages, f"{key} is missing from /api/stages/text"
        s = stages[key]
        for lang in ("en", "zh"):
            assert s["title"][lang].strip() and s["why"][lang].strip(), (key, lang)
        assert re.search(r"[\u4e00-\u9fff]", s["why"]["zh"]), f"{key}: its zh explanation is not Chinese"
        assert s["name"] == key.split(":")[-1] and s["runner"] == ("v2" if key.startswith("v2:") else "v1")


def test_the_english_explanation_is_the_engines_own_why_that_the_traces_record(
    stages: dict[str, dict[str, Any]],
) -> None:
    # one source: every stage a golden trace explains says the same as /api/stages/text
    seen = 0
    for path in sorted(GOLDEN.glob("*.json")):
        for step in json.loads(path.read_text()):
            for st in step["stages"]:
                if not st.get("why"):
                    continue
                whys = {s["why"]["en"] for s in stages.values() if s["name"] == st["name"]}
                assert st["why"] in whys, f"{path.name}: {st['name']}'s why differs from /api/stages/text"
                seen += 1
    assert seen > 100
    # "batch row", vLLM's own meaning (np.repeat(arange_np[:num_reqs], ...) indexes the persistent batch)
    assert "batch row" in stages["req_indices"]["why"]["en"] and "批次" in stages["req_indices"]["why"]["zh"]


def test_the_openapi_document_declares_the_route_and_its_model(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    ok = doc["paths"]["/api/stages/text"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/StageTextsOut"}
    assert {"key", "title", "why"} <= set(doc["components"]["schemas"]["StageTextOut"]["properties"])


def test_the_run_page_carries_the_same_answer_for_its_first_paint(client: TestClient) -> None:
    page = client.get("/run?preset=seed-001").text
    m = re.search(r'<script type="application/json" id="stage-texts">(.*?)</script>', page, re.S)
    assert m, "the run page lost its embedded stage texts"
    assert json.loads(html.unescape(m.group(1))) == client.get("/api/stages/text").json()
