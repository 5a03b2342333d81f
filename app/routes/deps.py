"""What the routes share: the run store and settings of the app a request came to, the request's
body read within a bound (as it streams, whole, or as JSON), a run or a step looked up with the
404 that names what is missing, and the error responses the OpenAPI document lists for them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request

from pagedviz.app.errors import ApiError
from pagedviz.app.run import Run
from pagedviz.app.schemas import ErrorOut
from pagedviz.app.settings import Settings
from pagedviz.app.store import RunStore
from pagedviz.core.trace import StepTrace

ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut},
    413: {"model": ErrorOut},
    422: {"model": ErrorOut},
}


def store_of(request: Request) -> RunStore:
    return request.app.state.store


def settings_of(request: Request) -> Settings:
    return request.app.state.settings


async def body_chunks(request: Request, limit: int, too_large: str) -> AsyncIterator[bytes]:
    """The request's body chunk by chunk as it comes; once past `limit` bytes, a 413 whose message
    is `too_large` (it names the setting that raises the limit)."""
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "body_too_large", "body", too_large)
        yield chunk


async def read_body(request: Request, limit: int, too_large: str) -> bytes:
    """The request's body, whole, within `limit` bytes (body_chunks)."""
    return b"".join([chunk async for chunk in body_chunks(request, limit, too_large)])


async def read_json(request: Request) -> Any:
    """The request's body as JSON: a 413 past the settings' max_body_bytes, a 422 when it is not
    JSON (or nested too deeply)."""
    limit = settings_of(request).max_body_bytes
    body = await read_body(
        request, limit, f"the body is over the limit of {limit} bytes (PAGEDVIZ_MAX_BODY_KB raises it)"
    )
    try:
        return json.loads(body)
    except RecursionError:
        raise ApiError(422, "invalid_json", "body", "the JSON is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(422, "invalid_json", "body", f"not valid JSON: {str(e)[:120]}") from None


def unknown_run(run_id: str) -> ApiError:
    return ApiError(404, "not_found", "run_id", f"unknown run {run_id[:40]!r} (post its scenario again)")


async def known_run(request: Request, run_id: str) -> Run:
    """The computed run (computed now if need be); a 404 for a run this server does not know."""
    run = await store_of(request).get(run_id)
    if run is None:
        raise unknown_run(run_id)
    return run


def step_of(run: Run, n: int) -> StepTrace:
    """Step n (from 1) of the run; a 404 naming the run's steps when it has none such."""
    if not 1 <= n <= len(run.steps):
        raise ApiError(404, "not_found", "n", f"step {n} is outside 1..{len(run.steps)}")
    return run.steps[n - 1]


def before_first(store: RunStore, run_id: str, n: int) -> None:
    """Step n < 1 answers 404 at once, without waiting for a run still computing."""
    if n < 1:
        if not store.knows(run_id):
            raise unknown_run(run_id)
        raise ApiError(404, "not_found", "n", f"step {n} is before the first: steps are numbered from 1")


async def streamed_step(request: Request, run_id: str, n: int) -> StepTrace:
    """Step n as soon as the engine has made it: a big run's first steps answer while its
    later steps still compute."""
    store = store_of(request)
    before_first(store, run_id, n)
    t, run = await store.get_step(run_id, n)
    if t is not None:
        return t
    if run is None:
        raise unknown_run(run_id)
    return step_of(run, n)
