"""One error shape for every failure: {"error": ..., "detail": [{"field", "message"}]}."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from pagedviz.app.compute_stream import WorkerError
from pagedviz.app.db import StoreError
from pagedviz.app.import_replay import StepNotKeptError
from pagedviz.app.import_runs import ImportStopped
from pagedviz.app.run import BusyError, RunTooLargeError
from pagedviz.core import ScenarioError
from pagedviz.core.device import DeviceUnavailableError
from pagedviz.core.engine import RunTooLongError

log = logging.getLogger("pagedviz")


class ApiError(Exception):
    def __init__(self, status: int, error: str, field: str, message: str) -> None:
        self.status, self.error, self.field, self.message = status, error, field, message


def clean_text(s: str) -> str:
    """`s` as valid Unicode: a lone surrogate (from a JSON escape such as \\ud800) is escaped."""
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def body(error: str, items: list[tuple[str, str]]) -> dict[str, object]:
    return {"error": error, "detail": [{"field": clean_text(f), "message": clean_text(m)} for f, m in items]}


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(body(e.error, [(e.field, e.message)]), status_code=e.status)

    @app.exception_handler(ImportStopped)
    async def import_stopped(_: Request, e: ImportStopped) -> JSONResponse:
        return JSONResponse(body(e.error, [(e.field, e.message)]), status_code=e.status)

    @app.exception_handler(StepNotKeptError)
    async def step_not_kept(_: Request, e: StepNotKeptError) -> JSONResponse:
        return JSONResponse(
            body("not_found", [("run_id", f"{e} (import the recording again)")]), status_code=404
        )

    @app.exception_handler(ScenarioError)
    async def scenario_error(_: Request, e: ScenarioError) -> JSONResponse:
        status = 413 if e.too_large else 422
        return JSONResponse(
            body("scenario_too_large" if e.too_large else "invalid_scenario", e.errors), status_code=status
        )

    @app.exception_handler(DeviceUnavailableError)
    async def device_error(_: Request, e: DeviceUnavailableError) -> JSONResponse:
        return JSONResponse(body("device_unavailable", [(e.field, str(e))]), status_code=422)

    @app.exception_handler(RunTooLongError)
    async def too_long(_: Request, e: RunTooLongError) -> JSONResponse:
        msg = (
            f"the run would compute longer than {app.state.settings.max_run_seconds} s "
            f"(stopped before step {e.steps_done + 1}; PAGEDVIZ_MAX_RUN_SECONDS raises it): "
            'lower max_steps or the sizes, or set "model": null'
        )
        return JSONResponse(body("run_too_long", [("scenario", msg)]), status_code=413)

    @app.exception_handler(RunTooLargeError)
    async def too_large(_: Request, e: RunTooLargeError) -> JSONResponse:
        msg = (
            f"the run's trace passed {e.max_bytes >> 20} MB after {e.steps_done} steps "
            "(PAGEDVIZ_MAX_RUN_MB raises it): lower max_steps, num_kv_blocks or the sizes"
        )
        return JSONResponse(body("run_too_large", [("scenario", msg)]), status_code=413)

    @app.exception_handler(BusyError)
    async def busy(_: Request, e: BusyError) -> JSONResponse:
        msg = f"{e} (in {e.retry_after} s); PAGEDVIZ_MAX_IN_PROGRESS and PAGEDVIZ_MAX_QUEUED set how many"
        return JSONResponse(
            body("busy", [("", msg)]), status_code=503, headers={"Retry-After": str(e.retry_after)}
        )

    @app.exception_handler(WorkerError)
    async def worker_failed(_: Request, e: WorkerError) -> JSONResponse:
        log.error("%s", e)
        return JSONResponse(body("compute_failed", [("scenario", str(e))]), status_code=500)

    @app.exception_handler(StoreError)
    async def store_unwritable(_: Request, e: StoreError) -> JSONResponse:
        log.error("%s", e)
        return JSONResponse(
            body("store_unwritable", [("store", str(e))]),
            status_code=503,
            headers={"Retry-After": "30"},
        )

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, e: RequestValidationError) -> JSONResponse:
        items = [
            (".".join(str(p) for p in err.get("loc", ())), str(err.get("msg", ""))) for err in e.errors()
        ]
        return JSONResponse(body("invalid_request", items), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(body("http_error", [("", str(e.detail))]), status_code=e.status_code)

    @app.exception_handler(Exception)
    async def internal(_: Request, e: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return JSONResponse(
            body("internal_error", [("", "the server hit an unexpected error")]), status_code=500
        )
