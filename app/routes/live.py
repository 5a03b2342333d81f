"""POST /api/runs/live and POST /api/runs/{id}/lines: a vLLM server's recorder (pagedviz.record with
PAGEDVIZ_RECORD=http://HOST:PORT) posts its recording as it makes it, and the run is read as it
grows like any imported run (app/import_live.py). Off unless the server has a token
(`pagedviz serve --live-token T`, PAGEDVIZ_LIVE_TOKEN): without one both answer 404 saying how to
turn them on, and a request without the token (`Authorization: Bearer T`) is a 401, so that no
reader of a class server can write runs into it. Bounds: PAGEDVIZ_MAX_LIVE_RUNS,
PAGEDVIZ_MAX_LIVE_LINES, PAGEDVIZ_MAX_LIVE_BODY_MB, PAGEDVIZ_MAX_LIVE_MB."""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, Query, Request

from pagedviz.app.errors import ApiError
from pagedviz.app.import_live import LiveRuns
from pagedviz.app.routes.deps import read_body
from pagedviz.app.schemas import ErrorOut, LinesAccepted, LiveCreated

router = APIRouter(prefix="/api", tags=["runs"])

MEDIA = ("application/x-ndjson", "text/plain")
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorOut} for s in (401, 404, 409, 413, 415, 422, 503)
}
OFF = (
    "live runs are off on this server: start it with `pagedviz serve --live-token T` "
    "(or PAGEDVIZ_LIVE_TOKEN=T) and give the recorder PAGEDVIZ_RECORD_TOKEN=T"
)


def _body_doc(what: str) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "description": what,
            "content": {m: {"schema": {"type": "string"}} for m in MEDIA},
        }
    }


def _live(request: Request) -> LiveRuns:
    """The live runs, once the request has the server's token."""
    live: LiveRuns = request.app.state.live
    if not live.on:
        raise ApiError(404, "not_found", "live", OFF)
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        token.strip().encode(), live.settings.live_token.encode()
    ):
        raise ApiError(
            401, "unauthorized", "authorization", "send the server's live token: Authorization: Bearer T"
        )
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in MEDIA:
        raise ApiError(
            415, "unsupported_media_type", "content-type", f"send the lines as {' or '.join(MEDIA)}"
        )
    return live


def _too_large(limit: int) -> str:
    return f"the batch is over {limit >> 20} MB (PAGEDVIZ_MAX_LIVE_BODY_MB)"


@router.post(
    "/runs/live",
    status_code=201,
    response_model=LiveCreated,
    responses=ERRORS,
    openapi_extra=_body_doc("the recording's header line (pagedviz.record writes it first)"),
)
async def open_live(request: Request) -> LiveCreated:
    """Open a live run: a vLLM 0.33 server's recorder (`PAGEDVIZ_RECORD=http://HOST:PORT`, its token
    in `PAGEDVIZ_RECORD_TOKEN`) posts its header here, then its steps to `lines` as it schedules them.
    The header is checked as an import's is. The run is an imported run (`rec-…`): its steps,
    overview and progress are read as they arrive, and its overview says `live: true` until the
    recorder closes it or it has been quiet for PAGEDVIZ_LIVE_IDLE_S seconds (then it closes as
    cut). Needs the server's live token (`pagedviz serve --live-token T`)."""
    live = _live(request)
    limit, line = live.settings.max_live_body_bytes, live.imports.line_limit
    if line + 2 < limit:  # the header is one line: the per-line limit binds (with its line end)
        too_large = (
            f"the header is longer than the per-line limit of {line} bytes (PAGEDVIZ_MAX_RECORD_LINE_MB)"
        )
        raw = await read_body(request, line + 2, too_large)
    else:
        raw = await read_body(request, limit, _too_large(limit))
    run_id = await live.open(raw)
    return LiveCreated(run_id=run_id, url=f"/run?run={run_id}", lines=f"/api/runs/{run_id}/lines")


@router.post(
    "/runs/{run_id}/lines",
    response_model=LinesAccepted,
    responses=ERRORS,
    openapi_extra=_body_doc("the live run's next lines, one JSON step a line, in order"),
)
async def post_lines(
    request: Request,
    run_id: str,
    end: bool = Query(False, description="the recording ends with this batch: the run closes"),
) -> LinesAccepted:
    """Append lines to a live run. Each line is checked as an import checks it (a bad one is a 422
    naming its line in the recording, and nothing of the batch is kept); the steps are replayed as
    they come. `end=true` closes the run. Bounds: PAGEDVIZ_MAX_LIVE_LINES lines and
    PAGEDVIZ_MAX_LIVE_BODY_MB a batch, PAGEDVIZ_MAX_LIVE_MB a run."""
    live = _live(request)
    limit = live.settings.max_live_body_bytes
    body = await read_body(request, limit, _too_large(limit))
    accepted, steps = await live.append(run_id, body, end)
    return LinesAccepted(run_id=run_id, accepted=accepted, steps=steps, live=not end)
