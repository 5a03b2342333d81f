"""Teaching routes: a step's narration, a run's metrics, two runs compared step by step, a
predict-then-reveal check of chosen entries, and lessons (the shipped ones, a lecturer's own
file validated, a lesson packed into a link). The engine side lives in core/narrate.py,
core/metrics.py, core/compare.py, core/answers.py and core/lesson.py."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from pagedviz.app.errors import ApiError, body
from pagedviz.app.links import LinkError, pack, unpack
from pagedviz.app.routes.deps import ERRORS, known_run, read_json, step_of, store_of
from pagedviz.app.schemas import ErrorItem
from pagedviz.core import Scenario
from pagedviz.core.answers import CheckError, check_entries
from pagedviz.core.compare import compare_runs
from pagedviz.core.lesson import (
    LessonError,
    check_lesson_against_runs,
    fill_lesson,
    list_lessons,
    load_lesson,
    scenario_of,
    validate_lesson,
)
from pagedviz.core.lesson_text import has_placeholders
from pagedviz.core.metrics import run_metrics
from pagedviz.core.narrate import narrate
from pagedviz.core.trace import StepTrace

router = APIRouter(prefix="/api", tags=["teach"])
LANG = Query("en", pattern="^(en|zh)$", description="en or zh: the language of titles and summaries")


class Text(BaseModel):
    en: str
    zh: str


class Ref(BaseModel):
    kind: str = Field(examples=["block"], description="request, block, token or row")
    id: str | int = Field(examples=[7])


class NarrationItem(BaseModel):
    key: str = Field(examples=["preempt:c"], description="what the sentence is about; stable across runs")
    text: Text
    refs: list[Ref]
    stage: str | None = Field(examples=["slot_mapping"], description="its stage; null: the whole step")


class Narration(BaseModel):
    run_id: str
    step: int
    items: list[NarrationItem]


class Metrics(BaseModel):
    run_id: str
    steps: list[dict[str, Any]] = Field(description="per step: blocks_used, internal_fragmentation, ...")
    totals: dict[str, Any]


class Comparison(BaseModel):
    a: str
    b: str
    num_steps: list[int]
    totals: list[dict[str, Any]]
    totals_delta: dict[str, Any] = Field(description="b minus a")
    steps: list[dict[str, Any]] = Field(description="per step: differing arrays and where, KV, metric deltas")


class CheckEntry(BaseModel):
    index: int
    given: Any
    expected: Any
    correct: bool
    hint: Text | None = Field(
        None,
        description="for a wrong answer: where this entry looks (its request, block or token), "
        "without the value",
    )
    explanation: Text | None = Field(
        description="for a wrong answer: the cause from the trace, or the formula with this entry's numbers"
    )


class CheckOut(BaseModel):
    array: str
    step: int
    num_correct: int
    total: int
    all_correct: bool
    rule: Text | None = Field(
        None,
        description="for a wrong answer: the array's rule, said once for all its entries "
        "(each has its own hint)",
    )
    entries: list[CheckEntry]


class LessonSummary(BaseModel):
    id: str = Field(examples=["paged-attention-50"])
    title: str
    summary: str
    minutes: int | None
    num_sections: int


class LessonCheck(BaseModel):
    valid: bool
    error: str | None = None
    detail: list[ErrorItem] = []
    lesson: dict[str, Any] | None = None
    link: str | None = Field(None, description="the lesson packed for GET /api/lessons/from-link?l=...")


CHECK_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"type": "object", "description": "the entries a student predicted"},
                "example": {"array": "slot_mapping", "indices": [0, 2], "values": [5, 12]},
            }
        },
    }
}
LESSON_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"type": "object", "description": "a lesson (core/lesson.py)"},
                "example": {
                    "title": {"en": "slot_mapping", "zh": "slot_mapping"},
                    "sections": [
                        {
                            "scenario": "seed-001",
                            "step": 1,
                            "stage": "slot_mapping",
                            "selection": {"kind": "token", "id": 7},
                            "paragraph": {"en": "Where does token 7 go?", "zh": "第 7 个 token 写到哪里？"},
                            "checkpoint": {"array": "slot_mapping", "indices": [7]},
                        }
                    ],
                },
            }
        },
    }
}


@router.get("/runs/{run_id}/steps/{n}/narration", response_model=Narration, responses=ERRORS)
async def narration(request: Request, run_id: str, n: int) -> dict[str, Any]:
    """What happened in the step and why, in English and 简体中文, then one sentence per stage with
    this step's numbers. Each item's refs name the requests, blocks, tokens and rows it mentions."""
    run = await known_run(request, run_id)
    t = step_of(run, n)
    prev = run.steps[n - 2] if n > 1 else None
    last = n == len(run.steps) and not run.truncated
    return {"run_id": run_id, "step": n, "items": narrate(t, prev, run.scenario.config, last)}


@router.get("/runs/{run_id}/metrics", response_model=Metrics, responses=ERRORS)
async def metrics(request: Request, run_id: str) -> dict[str, Any]:
    """Per step and in total: blocks used, internal fragmentation (allocated slots minus tokens
    held), preemptions, padded tokens, tokens scheduled, steps."""
    run = await known_run(request, run_id)
    return {"run_id": run_id, **run_metrics(run.steps)}


@router.get("/compare", response_model=Comparison, responses=ERRORS)
async def compare(
    request: Request,
    a: str = Query(..., description="run id of the baseline"),
    b: str = Query(..., description="run id to compare with it"),
) -> dict[str, Any]:
    """Two runs aligned by step number: per step the arrays that differ (and at which indices),
    the KV cache's differences, metric deltas (b minus a) and narration only one side has."""
    ra, rb = await known_run(request, a), await known_run(request, b)
    out = compare_runs(ra.steps, rb.steps, ra.scenario.config, rb.scenario.config)
    return {"a": a, "b": b, **out}


@router.post(
    "/runs/{run_id}/steps/{n}/check", response_model=CheckOut, responses=ERRORS, openapi_extra=CHECK_BODY
)
async def check(request: Request, run_id: str, n: int) -> dict[str, Any]:
    """Predict, then reveal: which of the given values are right; each wrong one comes back with
    the expected value, a hint without it, and its cause or formula with this entry's numbers.
    `values: null` shows the answers. Indices count into the flattened array (row-major for tables)."""
    run = await known_run(request, run_id)
    t = step_of(run, n)
    data = await read_json(request)
    if not isinstance(data, dict):
        shape = '{"array": ..., "indices": [...], "values": [...]}'
        raise ApiError(422, "invalid_check", "body", f"must be {shape}")
    try:
        # null values ask to be shown the answers; a body without values is still an error
        values = data.get("values", ...)
        return check_entries(t, data.get("array"), data.get("indices"), values, run.steps[: max(0, n - 1)])
    except CheckError as e:
        raise ApiError(422, "invalid_check", e.field, e.message) from None


@router.get("/lessons", response_model=list[LessonSummary])
def lessons(lang: str = LANG) -> list[dict[str, Any]]:
    """The lessons shipped with pagedviz, titles in the language asked for."""
    return list_lessons(lang)


async def _steps_of(request: Request, scenario: Scenario) -> list[StepTrace]:
    store = store_of(request)
    run = await store.get(store.remember(scenario))
    assert run is not None  # just remembered
    return run.steps


async def _runs_of(request: Request, sections: list[dict[str, Any]]) -> dict[str, list[StepTrace]]:
    """The steps of each distinct scenario of `sections`, by run id (through the run store)."""
    runs: dict[str, list[StepTrace]] = {}
    for s in sections:
        sc = scenario_of(s)
        key = store_of(request).remember(sc)
        if key not in runs:
            runs[key] = await _steps_of(request, sc)
    return runs


async def _checked(request: Request, data: Any, lesson_id: str | None = None) -> dict[str, Any]:
    """Validate a lesson, then run its scenarios (through the run store) to check its steps,
    checkpoints and placeholders against them. The lesson with its placeholders filled in;
    LessonError on any problem."""
    lesson = validate_lesson(data, lesson_id, request.app.state.settings.limits)
    runs = await _runs_of(request, lesson["sections"])
    check_lesson_against_runs(lesson, lambda sc: runs[store_of(request).remember(sc)])
    return fill_lesson(lesson, lambda sc: runs[store_of(request).remember(sc)])


@router.post("/lessons/validate", response_model=LessonCheck, responses=ERRORS, openapi_extra=LESSON_BODY)
async def validate(request: Request) -> dict[str, Any]:
    """Check a lecturer's lesson file: its fields, then its steps and checkpoints against the runs
    of its scenarios. Problems are a 200 with the list; a body that is not JSON is a 422."""
    data = await read_json(request)
    try:
        lesson = await _checked(request, data)
    except LessonError as e:
        return LessonCheck(
            valid=False,
            error="invalid_lesson",
            detail=[ErrorItem(field=f, message=m) for f, m in e.errors],
            link=None,
        ).model_dump()
    return LessonCheck(valid=True, lesson=lesson, link=pack(data)).model_dump()


@router.get("/lessons/from-link", response_model=dict[str, Any], responses=ERRORS)
async def from_link(
    request: Request, packed: str = Query(..., alias="l", description="a lesson packed by /lessons/validate")
) -> Any:
    """A lecturer's lesson from a shared link: works on any server."""
    settings = request.app.state.settings
    if len(packed) > settings.max_link_chars:
        msg = (
            f"the packed lesson is over the limit of {settings.max_link_chars} chars"
            " (PAGEDVIZ_MAX_LINK_CHARS raises it)"
        )
        raise ApiError(413, "link_too_large", "l", msg)
    try:
        data = unpack(packed, settings.max_body_bytes)
    except LinkError:
        raise ApiError(422, "invalid_link", "l", "not a packed lesson") from None
    try:
        return await _checked(request, data)
    except LessonError as e:
        return JSONResponse(body("invalid_lesson", e.errors), status_code=422)


@router.get("/lessons/{lesson_id}", response_model=dict[str, Any], responses=ERRORS)
async def lesson(request: Request, lesson_id: str) -> dict[str, Any]:
    """One shipped lesson: title and summary in both languages, and its sections, their
    paragraphs' placeholders filled in from the runs of their scenarios."""
    try:
        data = load_lesson(lesson_id)
    except KeyError:
        ids = ", ".join(x["id"] for x in list_lessons())
        msg = f"unknown lesson {lesson_id[:80]!r} (lessons: {ids})"
        raise ApiError(404, "not_found", "lesson_id", msg) from None
    # only the sections with placeholders are run here; the page runs the others as it opens them
    runs = await _runs_of(request, [s for s in data["sections"] if has_placeholders(s["paragraph"])])
    return fill_lesson(data, lambda sc: runs[store_of(request).remember(sc)])
