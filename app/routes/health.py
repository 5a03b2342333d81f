"""GET /healthz: readiness, version and the device runs use. Not ready (503, with the reason)
when the run store's database cannot be written (or its file was removed or replaced), since no
new run id could then be kept, and
while the compute processes are starting (a second or two after the server starts)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from pagedviz.app.schemas import ErrorOut, Health
from pagedviz.core import __version__
from pagedviz.core.device import resolve_device
from pagedviz.core.upstream import describe

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, responses={503: {"model": ErrorOut}})
def healthz(request: Request) -> JSONResponse:
    store = request.app.state.store
    problem = store.db_problem()
    if problem is not None:
        return JSONResponse(
            {"error": "not_ready", "detail": [{"field": "store", "message": problem}]},
            status_code=503,
        )
    if store.pool is not None and store.pool.starting():
        msg = "the compute processes are starting (importing the engine); ask again in a moment"
        return JSONResponse(
            {"error": "not_ready", "detail": [{"field": "compute", "message": msg}]},
            status_code=503,
            headers={"Retry-After": "1"},
        )
    return JSONResponse(
        Health(
            status="ok", version=__version__, device=str(resolve_device("auto")), upstream=describe()
        ).model_dump()
    )
