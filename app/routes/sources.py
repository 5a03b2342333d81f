"""The engine's stages for the page's code panel: each stage of prepare_inputs in order, with what
it reads and writes, its formula and the engine's own source (GET /api/stages)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from pagedviz.app.errors import ApiError
from pagedviz.app.routes.deps import ERRORS
from pagedviz.app.schemas import StageSource
from pagedviz.core.registry import engine_class
from pagedviz.core.runners.stages import stage_source
from pagedviz.core.runners.v2 import FINISH_STAGE, ModelRunnerV2

router = APIRouter()  # included by app/routes/runs.py's router (its /api prefix and tag)


@router.get("/stages", response_model=list[StageSource], responses=ERRORS)
def stages(
    flavor: str = Query("vllm", pattern="^(vllm|ascend|nanovllm)$"),
    runner: str | None = Query(None, pattern="^(v1|v2)$", description="vllm's model runner (default v1)"),
) -> list[dict[str, Any]]:
    """Each stage of prepare_inputs in order, with its formula and the engine's own source; with
    runner=v2, Model Runner V2's (its first stage, finish_and_add, is its update_states)."""
    if runner == "v2" and flavor != "vllm":
        raise ApiError(422, "invalid_request", "runner", "v2 (Model Runner V2) is only for flavor vllm")
    cls = ModelRunnerV2 if runner == "v2" else engine_class(flavor).stages_from()
    out = []
    if cls is ModelRunnerV2:
        out.append({**FINISH_STAGE.to_dict(), "source": stage_source(cls, "update_states")})
    elif hasattr(cls, "update_states"):
        out.append(
            {
                "name": "update_states",
                "reads": ["scheduler_output"],
                "writes": [
                    "token_ids_cpu",
                    "block_table",
                    "num_computed_tokens_cpu",
                    "num_tokens",
                    "num_scheduled_tokens",
                ],
                "formula": "remove finished/unscheduled rows; add new rows into the lowest hole; condense",
                "source": stage_source(cls, "update_states"),
            }
        )
    for method_name in cls.STAGES:
        spec = getattr(cls, method_name).stage_spec
        out.append(
            {
                "name": spec.name,
                "reads": list(spec.reads),
                "writes": list(spec.writes),
                "formula": spec.formula,
                "source": stage_source(cls, spec.name),
            }
        )
    return out
