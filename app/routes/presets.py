"""GET /api/presets, GET /api/presets/{id}: the scenarios shipped with the package."""

from __future__ import annotations

from fastapi import APIRouter, Query

from pagedviz.app.errors import ApiError
from pagedviz.app.schemas import ErrorOut, PresetDetail, PresetSummary
from pagedviz.core.presets import list_presets, preset_dict

router = APIRouter(prefix="/api/presets", tags=["presets"])
LANG = Query("en", pattern="^(en|zh)$", description="en or zh: the language of titles and summaries")


@router.get("", response_model=list[PresetSummary])
def presets(lang: str = LANG) -> list[dict[str, str]]:
    return list_presets(lang)


@router.get("/{preset_id}", response_model=PresetDetail, responses={404: {"model": ErrorOut}})
def preset(preset_id: str, lang: str = LANG) -> dict[str, object]:
    for p in list_presets(lang):
        if p["id"] == preset_id:
            return {**p, "scenario": preset_dict(preset_id)}
    raise ApiError(404, "not_found", "preset_id", f"unknown preset {preset_id[:80]!r}")
