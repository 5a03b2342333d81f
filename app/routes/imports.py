"""POST /api/runs/import: a recording of a real vLLM 0.33 server (pagedviz.record's JSONL) replayed
through pagedviz's runner (core/replay.py) into a run the page reads like any other; answered like
POST /api/runs. The shipped recordings (core/recordings/) import by name. Bounds: the body
(PAGEDVIZ_MAX_IMPORT_MB, a 413 naming it), each line (PAGEDVIZ_MAX_RECORD_LINE_MB), the run's
time and bytes (as a computed run's). A bad recording is a 422 naming its line."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from pagedviz.app.errors import ApiError
from pagedviz.app.links import pack
from pagedviz.app.schemas import ErrorOut, RunCreated
from pagedviz.app.settings import Settings
from pagedviz.app.store import Run, RunStore, measured_steps
from pagedviz.core import __version__
from pagedviz.core.recording import RecordingError, iter_recording, split_lines
from pagedviz.core.recordings import EXAMPLES, example_bytes
from pagedviz.core.replay import ReplayError, StreamingImport

router = APIRouter(prefix="/api", tags=["runs"])

MEDIA = ("application/x-ndjson", "text/plain")
IMPORT_BODY = {
    "requestBody": {
        "required": False,
        "description": "the recording: a header line, then one JSON line per step (README: "
        '"Record your own server"); empty with `example`',
        "content": {m: {"schema": {"type": "string"}} for m in MEDIA},
    }
}
ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut},
    413: {"model": ErrorOut},
    415: {"model": ErrorOut},
    422: {"model": ErrorOut},
}


async def _read_body(request: Request, limit: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(
                413,
                "body_too_large",
                "body",
                f"the recording is over {limit >> 20} MB (PAGEDVIZ_MAX_IMPORT_MB raises the limit)",
            )
        chunks.append(chunk)
    return b"".join(chunks)


def _import(body: bytes, run_id: str, settings: Settings) -> Run:
    """Parse, replay and measure (in a worker thread: it is the CPU's work). The body is read
    twice (the arrivals, then the replay), its steps never all parsed at once."""
    limit = settings.max_record_line_bytes
    try:
        header, first = iter_recording(split_lines(body), limit)
        imp = StreamingImport(header, first, iter_recording(split_lines(body), limit)[1])
        traces, nbytes = [], 0
        for t, size in measured_steps(imp.engine, settings.max_run_seconds, settings.max_run_bytes):
            imp.comparer.feed(imp.engine.scheduler.current, t.scheduler)  # type: ignore[attr-defined]
            traces.append(t)
            nbytes += size
        imported = imp.imported(traces)
    except RecordingError as e:
        raise ApiError(422, "invalid_recording", f"line {e.line}" if e.line else "body", e.message) from None
    except ReplayError as e:
        raise ApiError(422, "invalid_recording", "recording", str(e)) from None
    return Run(run_id, imported.scenario, traces, False, "cpu", nbytes)


@router.post(
    "/runs/import", status_code=201, response_model=RunCreated, responses=ERRORS, openapi_extra=IMPORT_BODY
)
async def import_run(
    request: Request,
    example: str | None = Query(
        None, description=f"a shipped recording instead of a body: {', '.join(EXAMPLES)}"
    ),
) -> JSONResponse:
    """Replay a recording of a vLLM 0.33 server (made with `--scheduler-cls
    pagedviz.record.RecordingAsyncScheduler` or `RecordingScheduler`) step by step through pagedviz's
    runner, V1 or V2 as recorded. The run's notes say whether pagedviz's own scheduler agrees with
    the recording and up to which step. The run id is a hash of the recording."""
    settings: Settings = request.app.state.settings
    if example is not None:
        if example not in EXAMPLES:
            raise ApiError(
                404,
                "not_found",
                "example",
                f"unknown example {example[:60]!r} (examples: {', '.join(EXAMPLES)})",
            )
        body = example_bytes(example)
    else:
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media not in MEDIA:
            raise ApiError(
                415, "unsupported_media_type", "content-type", f"send the recording as {' or '.join(MEDIA)}"
            )
        body = await _read_body(request, settings.max_import_bytes)
    run_id = "rec-" + hashlib.sha256(f"pagedviz {__version__}\n".encode() + body).hexdigest()[:16]
    store: RunStore = request.app.state.store
    run = store.runs.get(run_id)
    if run is None:
        run = await asyncio.to_thread(_import, body, run_id, settings)
        store._put(run)
    link = pack(run.scenario.to_dict())
    created = RunCreated(
        run_id=run_id,
        num_steps=len(run.steps),
        device=run.device,
        flavor=run.scenario.flavor,
        url=f"/run?run={run_id}",
        link=link,
    )
    return JSONResponse(created.model_dump(), status_code=201, headers={"Location": f"/api/runs/{run_id}"})


@router.get("/recordings")
async def recordings() -> list[dict[str, str]]:
    """The shipped recordings of vLLM 0.33.0's own scheduler (open one: /run?example=ID)."""
    return [{"id": k, "title": v["title"], "url": f"/run?example={k}"} for k, v in EXAMPLES.items()]
