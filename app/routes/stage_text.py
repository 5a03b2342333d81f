"""GET /api/stages/text: every stage's title and explanation in English and 简体中文, from the engine's
`@stage` text (core/stage_text.py). The run page carries the same answer in its HTML, so that the
stage panel shows them at first paint. (GET /api/stages, in runs' routes, lists one flavour's
stages with their formulas and source.)"""

from __future__ import annotations

from functools import cache
from typing import Any

from fastapi import APIRouter

from pagedviz.app.schemas import StageTextsOut
from pagedviz.core.stage_text import stage_texts

router = APIRouter(prefix="/api/stages/text", tags=["stages"])


@cache
def stages_payload() -> dict[str, Any]:
    """The answer of GET /api/stages/text (built once: the text is the running engine's)."""
    return {
        "stages": [
            {
                "key": key,
                "name": key.split(":", 1)[-1],
                "runner": runner,
                "flavor": flavor,
                "title": {"en": text.title[0], "zh": text.title[1]},
                "why": {"en": text.why, "zh": text.why_zh},
            }
            for key, runner, flavor, text in stage_texts()
        ]
    }


@router.get("", response_model=StageTextsOut)
def stage_texts_route() -> dict[str, Any]:
    return stages_payload()
