"""Runs: create one from a scenario, a preset with overrides or a packed link; check a scenario
without running it; read a run's progress and its overview. Its steps (app/routes/steps.py), their
arrays (arrays.py) and the engine's stage sources (sources.py) are routers of their own, included
in this one (the /api prefix, the `runs` tag, and their order in the OpenAPI document)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import iterate_in_threadpool

from pagedviz.app.errors import ApiError, clean_text
from pagedviz.app.import_runs import is_import
from pagedviz.app.links import LinkError, pack, unpack
from pagedviz.app.routes import arrays, sources, steps
from pagedviz.app.routes.deps import ERRORS, known_run, read_json, settings_of, store_of, unknown_run
from pagedviz.app.run import Run
from pagedviz.app.schemas import ErrorItem, RunCreated, RunOverview, RunProgress, ScenarioCheck, StepSummary
from pagedviz.app.store import run_id_of
from pagedviz.app.summaries import step_summary
from pagedviz.core import Scenario, ScenarioError
from pagedviz.core.device import DeviceUnavailableError, pick_device_type
from pagedviz.core.field_bounds import accepted_maxima
from pagedviz.core.presets import list_presets, preset_dict
from pagedviz.core.upstream import describe

router = APIRouter(prefix="/api", tags=["runs"])

SCENARIO_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "description": "a scenario (its JSON Schema: GET /api/schema/scenario; "
                    "docs/scenario-format.md), or a preset with overrides: "
                    '{"preset": ID, "overrides": {...}} (the overrides deep-merged into the preset)',
                },
                "examples": {
                    "scenario": {
                        "summary": "a scenario",
                        "value": {
                            "name": "demo",
                            "flavor": "vllm",
                            "seed": 0,
                            "config": {"block_size": 2, "max_model_len": 12, "max_num_batched_tokens": 10},
                            "requests": [
                                {"id": "0", "prompt": "Hi!", "max_tokens": 4},
                                {"id": "1", "prompt_len": 8, "max_tokens": 4, "arrival_step": 2},
                            ],
                        },
                    },
                    "preset": {
                        "summary": "a preset with overrides",
                        "value": {"preset": "seed-001", "overrides": {"config": {"block_size": 4}}},
                    },
                },
            }
        },
    }
}
PRESET_FORM = {"preset", "overrides"}
# with wait=first, how long a run whose first step is done may take to finish and be answered whole
FIRST_STEP_GRACE_S = 0.1
FIRST_STEP_GRACE_MAX_REQUESTS = 64


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` laid over it: objects merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in overrides.items():
        old = out.get(key)
        out[key] = deep_merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return out


def from_preset(data: Any) -> Any:
    """A body of the form {"preset": ID, "overrides": {...}} as the scenario it stands for; any
    other body as it is."""
    if not isinstance(data, dict) or "preset" not in data:
        return data
    for key in data:
        if key not in PRESET_FORM:
            msg = "unknown field beside preset (put scenario fields in overrides)"
            raise ApiError(422, "invalid_request", str(key)[:60], msg)
    pid, overrides = data["preset"], data.get("overrides", {})
    if not isinstance(pid, str):
        raise ApiError(422, "invalid_request", "preset", "must be a preset id (a string)")
    if not isinstance(overrides, dict):
        raise ApiError(422, "invalid_request", "overrides", "must be an object (fields of a scenario)")
    try:
        base = preset_dict(pid)
    except KeyError:
        ids = ", ".join(p["id"] for p in list_presets())
        raise ApiError(404, "not_found", "preset", f"unknown preset {pid[:60]!r} (presets: {ids})") from None
    return deep_merge(base, overrides)


def _scenario(data: Any, request: Request) -> Scenario:
    """A valid scenario that this server can run: an explicit device it lacks is refused here,
    before anything is stored or computed (DeviceUnavailableError, a 422)."""
    scenario = Scenario.from_dict(data, settings_of(request).limits)
    pick_device_type(scenario.config.device)
    return scenario


def _created(run: Run) -> dict[str, Any]:
    link = pack(run.scenario.to_dict())
    return RunCreated(
        run_id=run.run_id,
        num_steps=len(run.steps),
        device=run.device,
        flavor=run.scenario.flavor,
        truncated=run.truncated,
        url=f"/run?s={link}",
        link=link,
        upstream=describe(run.scenario.flavor, run.scenario.config.model_runner),
    ).model_dump()


@router.post(
    "/runs", status_code=201, response_model=RunCreated, responses=ERRORS, openapi_extra=SCENARIO_BODY
)
async def create_run(
    request: Request,
    wait: str = Query(
        "all",
        pattern="^(all|first)$",
        description="all: answer once every step is "
        "computed; first: once step 1 is (202 with complete: false if more follow)",
    ),
) -> JSONResponse:
    """Run a scenario, or a preset with overrides (`{"preset": "seed-001", "overrides": {"config":
    {"block_size": 4}}}`). The run id is a content hash: the same scenario gives the same id.
    With `wait=first` a big run answers as soon as its first step is computed; its steps can be
    read while the later ones compute."""
    scenario = _scenario(from_preset(await read_json(request)), request)
    store = store_of(request)
    run_id = store.remember(scenario)
    location = {"Location": f"/api/runs/{run_id}"}
    if wait == "first":
        first, run = await store.get_step(run_id, 1)
        # a small run done within a moment of its first step is answered whole: its page then
        # draws the timeline once, with no pending marks that change under the reader's pointer
        # (a big run streams at once: the moment would only delay its first step)
        small = len(scenario.requests) <= FIRST_STEP_GRACE_MAX_REQUESTS
        if (
            run is None
            and first is not None
            and not (small and await store.settles_within(run_id, FIRST_STEP_GRACE_S))
        ):
            partial = RunCreated(
                run_id=run_id,
                num_steps=max(1, len(store.partial.get(run_id, ()))),  # computed so far
                device=first.forward.get("device", ""),
                flavor=scenario.flavor,
                complete=False,
                url=f"/run?s={pack(scenario.to_dict())}",
                link=pack(scenario.to_dict()),
                upstream=describe(scenario.flavor, scenario.config.model_runner),
            )
            # the page asks for step 1 next: its encoding starts now, while this answer goes back
            store.step_cache.encode_soon(run_id, 1, first)
            return JSONResponse(partial.model_dump(), status_code=202, headers=location)
    run = await known_run(request, run_id)
    return JSONResponse(_created(run), status_code=201, headers=location)


@router.post(
    "/scenarios/validate", response_model=ScenarioCheck, responses=ERRORS, openapi_extra=SCENARIO_BODY
)
async def validate(request: Request) -> ScenarioCheck:
    """Check a scenario without running it (the editor's live validation). A scenario that breaks
    rules is still a 200: the answer is the list of problems. A body that is not JSON is a 422."""
    data = from_preset(await read_json(request))
    try:
        scenario = _scenario(data, request)
    except ScenarioError as e:
        return ScenarioCheck(
            valid=False,
            error="scenario_too_large" if e.too_large else "invalid_scenario",
            detail=[ErrorItem(field=clean_text(f), message=clean_text(m)) for f, m in e.errors],
        )
    except DeviceUnavailableError as e:
        return ScenarioCheck(
            valid=False, error="device_unavailable", detail=[ErrorItem(field=e.field, message=str(e))]
        )
    return ScenarioCheck(
        valid=True,
        run_id=run_id_of(scenario),
        num_requests=len(scenario.requests),
        maxima=accepted_maxima(scenario, settings_of(request).limits),
    )


@router.get("/runs/from-link", response_model=RunCreated, responses=ERRORS)
async def from_link(request: Request, s: str = Query(..., description="scenario packed by the page")) -> dict:
    """Open a run from a scenario packed into a link: works on any server."""
    settings = settings_of(request)
    if len(s) > settings.max_link_chars:
        raise ApiError(
            413,
            "link_too_large",
            "s",
            f"the packed scenario is over the limit of {settings.max_link_chars} chars"
            " (PAGEDVIZ_MAX_LINK_CHARS raises it)",
        )
    try:
        data = unpack(s, settings.max_body_bytes)
    except LinkError as e:
        raise ApiError(422, "invalid_link", "s", str(e)) from None
    run = await known_run(request, store_of(request).remember(_scenario(data, request)))
    return _created(run)


@router.get("/runs/{run_id}/progress", response_model=RunProgress, responses=ERRORS)
async def progress(request: Request, run_id: str) -> dict:
    """How far the run's computation has come; answers at once, computes nothing. A page polls it
    while its request for the run is still waiting."""
    status = store_of(request).status(run_id)
    if status is None:
        raise unknown_run(run_id)
    return RunProgress(run_id=run_id, max_seconds=store_of(request).max_seconds, **status).model_dump()


@router.get("/runs/{run_id}", response_model=RunOverview, responses=ERRORS)
async def overview(request: Request, run_id: str) -> Any:
    """The run's scenario and a line per step. An imported recording answers while it is replayed
    too (`complete: false`, the steps so far), its lines read from the store as they are sent."""
    if is_import(run_id):
        return await _import_overview(request, run_id)
    run = await known_run(request, run_id)
    steps = [StepSummary(**step_summary(t)) for t in run.steps]
    return RunOverview(
        run_id=run.run_id,
        scenario=run.scenario.to_dict(),
        num_steps=len(run.steps),
        truncated=run.truncated,
        device=run.device,
        flavor=run.scenario.flavor,
        link=pack(run.scenario.to_dict()),
        upstream=describe(run.scenario.flavor, run.scenario.config.model_runner),
        steps=steps,
    ).model_dump()


async def _import_overview(request: Request, run_id: str) -> Response:
    imports = store_of(request).imports
    where = await imports.wait_for(run_id, 1)
    scenario = imports.scenario(run_id)
    if where is None or scenario is None:
        raise unknown_run(run_id)
    count, complete = where
    sc = scenario.to_dict()
    head = RunOverview(
        run_id=run_id,
        scenario=sc,
        num_steps=count,
        truncated=False,
        device="cpu",
        flavor=scenario.flavor,
        link=pack(sc),
        upstream=describe(scenario.flavor, scenario.config.model_runner),
        complete=complete,
        steps=[],
    ).model_dump()
    del head["steps"]
    live = imports.live.flag(run_id) if imports.live is not None else None
    if live is not None:  # a run posted live (POST /api/runs/live): true until it closes
        head["live"] = live
    chunks = imports.overview_chunks(run_id, head, count)
    return StreamingResponse(iterate_in_threadpool(chunks), media_type="application/json")


# the resources of a run, after its own routes (in this order in the OpenAPI document)
for resource in (steps, arrays, sources):
    router.include_router(resource.router)
