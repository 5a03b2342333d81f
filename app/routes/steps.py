"""One step of a run in the trace contract, as the engine made it: encoded once (gzip too), with
an ETag (If-None-Match answers 304); a step of a complete run may be cached for good, one of a run
still computing revalidates. A run not in memory answers from the store's database."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from pagedviz.app.routes.deps import ERRORS, before_first, step_of, store_of, unknown_run
from pagedviz.app.schemas import StepOut

router = APIRouter()  # included by app/routes/runs.py's router (its /api prefix and tag)


# a step of a complete run never changes (the run id names the scenario and the engine version)
IMMUTABLE = "public, max-age=31536000, immutable"


def etag_matches(if_none_match: str, etag: str) -> bool:
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
    store = store_of(request)
    before_first(store, run_id, n)
    stored = await store.stored_step(run_id, n)  # a run not in memory: as the database keeps it
    if stored is not None:
        return encoded_response(request, *stored)
    t, run = await store.get_step(run_id, n)
    if t is None:
        if run is None:
            raise unknown_run(run_id)
        t = step_of(run, n)
    enc = await store.step_cache.encoded_step(run_id, n, t)
    return encoded_response(request, enc.body, enc.gzipped, enc.etag, run is not None)


def encoded_response(
    request: Request, body: bytes, gzipped: bytes | None, etag: str, complete: bool
) -> Response:
    """An encoded step with its ETag (304 when If-None-Match has it), gzipped when asked for."""
    headers = {"ETag": etag, "Cache-Control": IMMUTABLE if complete else "no-cache"}
    headers["Vary"] = "Accept-Encoding"
    inm = request.headers.get("if-none-match")
    if inm is not None and etag_matches(inm, etag):
        return Response(status_code=304, headers=headers)
    if gzipped is not None and "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"
        return Response(gzipped, media_type="application/json", headers=headers)
    return Response(body, media_type="application/json", headers=headers)
