"""POST /api/runs/import: a recording of a real vLLM 0.33 server (pagedviz.record's JSONL) replayed
through pagedviz's runner (core/replay.py) into a run the page reads like any other; answered like
POST /api/runs?wait=first: streamed to disk, checked line by line, then replayed in the background
into the run store's database (app/import_runs.py). The shipped recordings (core/recordings/)
import by name. Bounds: the body (PAGEDVIZ_MAX_IMPORT_MB, a 413 naming it), each line
(PAGEDVIZ_MAX_RECORD_LINE_MB), the replayed steps' bytes (PAGEDVIZ_STORE_MB). A bad recording is a
422 naming its line."""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from pagedviz.app.errors import ApiError
from pagedviz.app.import_replay import first_pass, scenario_bytes
from pagedviz.app.links import pack
from pagedviz.app.routes.deps import body_chunks
from pagedviz.app.schemas import ErrorOut, ImportCreated, RecordingCut
from pagedviz.app.settings import Settings
from pagedviz.app.store import RunStore
from pagedviz.core import __version__
from pagedviz.core.recording import Cut, RecordingError
from pagedviz.core.recordings import EXAMPLES, example_bytes
from pagedviz.core.replay import ReplayError, Summary, scenario_from
from pagedviz.core.upstream import describe

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
REPLAYING = (
    "the recording is being replayed: whether pagedviz's scheduler agrees with it is said once it ends"
)
ERRORS: dict[int | str, dict[str, Any]] = {
    202: {"model": ImportCreated, "description": "the first step is stored; the replay goes on"},
    404: {"model": ErrorOut},
    413: {"model": ErrorOut},
    415: {"model": ErrorOut},
    422: {"model": ErrorOut},
}


async def _spool(request: Request, limit: int) -> tuple[Path, str]:
    """The body streamed to a temporary file (never whole in memory), and the run id it gets;
    past `limit` bytes a 413 naming PAGEDVIZ_MAX_IMPORT_MB (the file is removed)."""
    digest = hashlib.sha256(f"pagedviz {__version__}\n".encode())
    fd, name = tempfile.mkstemp(prefix="pagedviz-import-", suffix=".jsonl")
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            too_large = f"the recording is over {limit >> 20} MB (PAGEDVIZ_MAX_IMPORT_MB raises the limit)"
            async for chunk in body_chunks(request, limit, too_large):
                digest.update(chunk)
                f.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path, "rec-" + digest.hexdigest()[:16]


def _example(name: str) -> tuple[Path, str]:
    body = example_bytes(name)
    fd, tmp = tempfile.mkstemp(prefix="pagedviz-import-", suffix=".jsonl")
    with os.fdopen(fd, "wb") as f:
        f.write(body)
    return Path(tmp), "rec-" + hashlib.sha256(f"pagedviz {__version__}\n".encode() + body).hexdigest()[:16]


def _read(path: Path, line_limit: int) -> tuple[Any, Summary]:
    """The recording read once (in a worker thread): every line validated, a 422 naming the
    first bad one."""
    try:
        return first_pass(path, line_limit)
    except RecordingError as e:
        raise ApiError(422, "invalid_recording", f"line {e.line}" if e.line else "body", e.message) from None
    except ReplayError as e:
        raise ApiError(422, "invalid_recording", "recording", str(e)) from None


def _cut_again(path: Path, line_limit: int) -> Cut | None:
    """The cut last line of a recording posted again (read again only when it does not end with
    a newline: one that does has no cut line)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() == 0:
            return None
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return None
    return _read(path, line_limit)[1].cut


def _keep(path: Path, run_id: str, store: RunStore, line_limit: int) -> Summary:
    """Read the recording once (in a worker thread), then keep it in the store's database with the
    scenario it amounts to."""
    header, summary = _read(path, line_limit)
    cut = (summary.cut.text(),) if summary.cut else ()
    scenario = replace(scenario_from(header, summary), notes=(REPLAYING, *cut))
    store.db.put_recording(run_id, scenario_bytes(scenario), path, summary.num_steps)
    return summary


@router.post(
    "/runs/import", status_code=201, response_model=ImportCreated, responses=ERRORS, openapi_extra=IMPORT_BODY
)
async def import_run(
    request: Request,
    example: str | None = Query(
        None, description=f"a shipped recording instead of a body: {', '.join(EXAMPLES)}"
    ),
) -> JSONResponse:
    """Replay a recording of a vLLM 0.33 server (made with `--scheduler-cls
    pagedviz.record.RecordingAsyncScheduler` or `RecordingScheduler`) step by step through pagedviz's
    runner, V1 or V2 as recorded. The body is streamed to disk and read once (a bad line is a 422
    naming it); the answer comes once the replay's first step is stored (202, `complete: false`)
    and the replay goes on in the background, each step stored on disk as it is made: its steps
    are readable as they come, `GET /api/runs/{id}/progress` says how many of the recording's
    steps are done. A last line cut mid-write (a server killed while writing it) is left out and
    `cut` says where the recording stops; every whole line before it is imported. The run's
    notes then say whether pagedviz's own scheduler agrees with the recording and up to which
    step. The run id is a hash of the recording; the run outlives
    eviction and, with `--store`, restarts."""
    settings: Settings = request.app.state.settings
    store: RunStore = request.app.state.store
    if example is not None:
        if example not in EXAMPLES:
            raise ApiError(
                404,
                "not_found",
                "example",
                f"unknown example {example[:60]!r} (examples: {', '.join(EXAMPLES)})",
            )
        path, run_id = _example(example)
    else:
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media not in MEDIA:
            raise ApiError(
                415, "unsupported_media_type", "content-type", f"send the recording as {' or '.join(MEDIA)}"
            )
        path, run_id = await _spool(request, settings.max_import_bytes)
    imports = store.imports
    cut: Cut | None = None
    try:
        if imports.knows(run_id):
            cut = await asyncio.to_thread(_cut_again, path, settings.max_record_line_bytes)
            path.unlink(missing_ok=True)
            if imports.stopped(run_id) is not None:  # posted again: replayed again (under today's bounds)
                await asyncio.to_thread(store.db.set_recording_problem, run_id, None)
            imports.resume(run_id)  # a replay that a restart stopped goes on
        else:
            summary = await asyncio.to_thread(_keep, path, run_id, store, settings.max_record_line_bytes)
            cut = summary.cut
            imports.start(run_id, path, summary, summary.num_steps)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    found = await imports.wait_for(run_id, 1)  # raises when the replay stopped at its first step
    scenario = imports.scenario(run_id)
    if found is None or scenario is None:
        raise ApiError(404, "not_found", "run_id", f"the import {run_id} was dropped from the store")
    count, complete = found
    link = pack(scenario.to_dict())
    created = ImportCreated(
        run_id=run_id,
        num_steps=max(1, count),
        device="cpu",
        flavor=scenario.flavor,
        complete=complete,
        url=f"/run?run={run_id}",
        link=link,
        cut=RecordingCut(**cut.to_dict()) if cut else None,
        upstream=describe(scenario.flavor, scenario.config.model_runner),
    )
    return JSONResponse(
        created.model_dump(),
        status_code=201 if complete else 202,
        headers={"Location": f"/api/runs/{run_id}"},
    )


@router.get("/recordings")
async def recordings(
    lang: str = Query("en", pattern="^(en|zh)$", description="en or zh: the language of the titles"),
) -> list[dict[str, str]]:
    """The shipped recordings of vLLM 0.33.0's own scheduler (open one: /run?example=ID)."""
    key = "title_zh" if lang == "zh" else "title"
    return [
        {"id": k, "title": str(v.get(key) or v["title"]), "url": f"/run?example={k}"}
        for k, v in EXAMPLES.items()
    ]
