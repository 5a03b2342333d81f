"""GET /healthz: readiness, version and the device runs use. Not ready (503, with the reason)
when the folder that workers share cannot be written, since no new run could then be shared."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from pagedviz.app.schemas import ErrorOut, Health
from pagedviz.core import __version__
from pagedviz.core.device import resolve_device

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, responses={503: {"model": ErrorOut}})
def healthz(request: Request) -> JSONResponse:
    shared = request.app.state.store.shared
    problem = shared.problem() if shared is not None else None
    if problem is not None:
        return JSONResponse(
            {"error": "not_ready", "detail": [{"field": "PAGEDVIZ_SHARED_DIR", "message": problem}]},
            status_code=503,
        )
    return JSONResponse(
        Health(status="ok", version=__version__, device=str(resolve_device("auto"))).model_dump()
    )
