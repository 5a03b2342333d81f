"""Runs: create from a scenario (or a packed link), read the overview, a step, or one array
as JSON, CSV or NPY. Engine stage sources for the page's code panel."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import numpy as np
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import iterate_in_threadpool

from pagedviz.app.errors import ApiError, clean_text
from pagedviz.app.import_runs import is_import
from pagedviz.app.links import LinkError, pack, unpack
from pagedviz.app.schemas import (
    ArrayNamed,
    ErrorItem,
    ErrorOut,
    RunCreated,
    RunOverview,
    RunProgress,
    ScenarioCheck,
    StageSource,
    StepOut,
    StepSummary,
)
from pagedviz.app.settings import Settings
from pagedviz.app.store import Run, RunStore, run_id_of
from pagedviz.app.summaries import blocks_in_use, cached_at_admission, step_kind, step_summary  # noqa: F401 (re-exported)
from pagedviz.core import Scenario, ScenarioError
from pagedviz.core.device import DeviceUnavailableError, pick_device_type
from pagedviz.core.field_bounds import accepted_maxima
from pagedviz.core.presets import list_presets, preset_dict
from pagedviz.core.registry import engine_class
from pagedviz.core.runners.stages import stage_source
from pagedviz.core.runners.v2 import FINISH_STAGE, ModelRunnerV2
from pagedviz.core.trace import StepTrace
from pagedviz.core.upstream import describe

router = APIRouter(prefix="/api", tags=["runs"])

ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut},
    413: {"model": ErrorOut},
    422: {"model": ErrorOut},
}
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


def _store(request: Request) -> RunStore:
    return request.app.state.store


def _settings(request: Request) -> Settings:
    return request.app.state.settings


async def read_json(request: Request) -> Any:
    limit = _settings(request).max_body_bytes
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            msg = f"the body is over the limit of {limit} bytes (PAGEDVIZ_MAX_BODY_KB raises it)"
            raise ApiError(413, "body_too_large", "body", msg)
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except RecursionError:
        raise ApiError(422, "invalid_json", "body", "the JSON is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(422, "invalid_json", "body", f"not valid JSON: {str(e)[:120]}") from None


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
    scenario = Scenario.from_dict(data, _settings(request).limits)
    pick_device_type(scenario.config.device)
    return scenario


def _unknown_run(run_id: str) -> ApiError:
    return ApiError(404, "not_found", "run_id", f"unknown run {run_id[:40]!r} (post its scenario again)")


async def _run(request: Request, run_id: str) -> Run:
    run = await _store(request).get(run_id)
    if run is None:
        raise _unknown_run(run_id)
    return run


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
    store = _store(request)
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
            store.encode_soon(run_id, 1, first)
            return JSONResponse(partial.model_dump(), status_code=202, headers=location)
    run = await _run(request, run_id)
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
        maxima=accepted_maxima(scenario, _settings(request).limits),
    )


@router.get("/runs/from-link", response_model=RunCreated, responses=ERRORS)
async def from_link(request: Request, s: str = Query(..., description="scenario packed by the page")) -> dict:
    """Open a run from a scenario packed into a link: works on any server."""
    settings = _settings(request)
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
    run = await _run(request, _store(request).remember(_scenario(data, request)))
    return _created(run)


@router.get("/runs/{run_id}/progress", response_model=RunProgress, responses=ERRORS)
async def progress(request: Request, run_id: str) -> dict:
    """How far the run's computation has come; answers at once, computes nothing. A page polls it
    while its request for the run is still waiting."""
    status = _store(request).status(run_id)
    if status is None:
        raise _unknown_run(run_id)
    return RunProgress(run_id=run_id, max_seconds=_store(request).max_seconds, **status).model_dump()


@router.get("/runs/{run_id}", response_model=RunOverview, responses=ERRORS)
async def overview(request: Request, run_id: str) -> Any:
    """The run's scenario and a line per step. An imported recording answers while it is replayed
    too (`complete: false`, the steps so far), its lines read from the store as they are sent."""
    if is_import(run_id):
        return await _import_overview(request, run_id)
    run = await _run(request, run_id)
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
    imports = _store(request).imports
    where = await imports.wait_for(run_id, 1)
    scenario = imports.scenario(run_id)
    if where is None or scenario is None:
        raise _unknown_run(run_id)
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
    chunks = imports.overview_chunks(run_id, head, count)
    return StreamingResponse(iterate_in_threadpool(chunks), media_type="application/json")


def _before_first(store: RunStore, run_id: str, n: int) -> None:
    """Step n < 1 answers 404 at once, without waiting for a run still computing."""
    if n < 1:
        if not store.knows(run_id):
            raise _unknown_run(run_id)
        raise ApiError(404, "not_found", "n", f"step {n} is before the first: steps are numbered from 1")


def _step(run: Run, n: int) -> StepTrace:
    if not 1 <= n <= len(run.steps):
        raise ApiError(404, "not_found", "n", f"step {n} is outside 1..{len(run.steps)}")
    return run.steps[n - 1]


async def _streamed_step(request: Request, run_id: str, n: int) -> StepTrace:
    """Step n as soon as the engine has made it: a big run's first steps answer while its
    later steps still compute."""
    store = _store(request)
    _before_first(store, run_id, n)
    t, run = await store.get_step(run_id, n)
    if t is not None:
        return t
    if run is None:
        raise _unknown_run(run_id)
    return _step(run, n)


# a step of a complete run never changes (the run id names the scenario and the engine version)
IMMUTABLE = "public, max-age=31536000, immutable"


def _etag_matches(if_none_match: str, etag: str) -> bool:
    """If-None-Match against a weak ETag: weak comparison, `*` matches any."""
    tags = [tag.strip().removeprefix("W/") for tag in if_none_match.split(",")]
    return "*" in tags or etag.removeprefix("W/") in tags


@router.get(
    "/runs/{run_id}/steps/{n}",
    response_model=StepOut,
    responses={**ERRORS, 304: {"description": "the step is unchanged since the ETag given in If-None-Match"}},
)
async def step(request: Request, run_id: str, n: int) -> Response:
    """One step in the trace contract; [every array in it](/docs-md/arrays.md). Answers as soon
    as the step is computed, while later steps of the run may still compute. The step is encoded
    once (gzip too) and carries an ETag (`If-None-Match` answers 304); a step of a complete run
    may be cached for good (Cache-Control: immutable), one of a run still computing revalidates."""
    store = _store(request)
    _before_first(store, run_id, n)
    stored = await store.stored_step(run_id, n)  # a run not in memory: as the database keeps it
    if stored is not None:
        return _encoded_response(request, *stored)
    t, run = await store.get_step(run_id, n)
    if t is None:
        if run is None:
            raise _unknown_run(run_id)
        t = _step(run, n)
    enc = await store.encoded_step(run_id, n, t)
    return _encoded_response(request, enc.body, enc.gzipped, enc.etag, run is not None)


def _encoded_response(
    request: Request, body: bytes, gzipped: bytes | None, etag: str, complete: bool
) -> Response:
    """An encoded step with its ETag (304 when If-None-Match has it), gzipped when asked for."""
    headers = {"ETag": etag, "Cache-Control": IMMUTABLE if complete else "no-cache"}
    headers["Vary"] = "Accept-Encoding"
    inm = request.headers.get("if-none-match")
    if inm is not None and _etag_matches(inm, etag):
        return Response(status_code=304, headers=headers)
    if gzipped is not None and "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"
        return Response(gzipped, media_type="application/json", headers=headers)
    return Response(body, media_type="application/json", headers=headers)


def _csv(name: str, arr: np.ndarray) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    if arr.ndim <= 1:
        w.writerow(["index", name])
        w.writerows(enumerate(np.atleast_1d(arr).tolist()))
    else:
        flat = arr.reshape(arr.shape[0], -1)
        w.writerow(["row", *(f"col{j}" for j in range(flat.shape[1]))])
        w.writerows([i, *row] for i, row in enumerate(flat.tolist()))
    return buf.getvalue()


@router.get(
    "/runs/{run_id}/steps/{n}/arrays/{name}",
    response_model=ArrayNamed,
    responses={**ERRORS, 200: {"content": {"text/csv": {}, "application/octet-stream": {}}}},
)
async def array(
    request: Request, run_id: str, n: int, name: str, format: str = Query("json", pattern="^(json|csv|npy)$")
) -> Response:
    """One array of a step as JSON, CSV (opens in a spreadsheet) or NPY (loads with numpy.load)."""
    t = await _streamed_step(request, run_id, n)
    entry = t.array_entries.get(name)
    if entry is None:
        known = ", ".join(sorted(t.array_entries)) or "none (idle step)"
        raise ApiError(404, "not_found", "name", f"step {n} has no array {name[:60]!r}; it has {known}")
    arr = entry.value
    stem = f"{run_id[:12]}-step{n}-{name}"
    if format == "npy":
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        return Response(
            buf.getvalue(),
            media_type="application/octet-stream",
            headers={"Content-Disposition": f'attachment; filename="{stem}.npy"'},
        )
    if format == "csv":
        return Response(
            _csv(name, arr),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{stem}.csv"'},
        )
    return JSONResponse({"name": name, **entry.to_dict()})


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
