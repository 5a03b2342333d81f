"""GET /healthz: liveness, version and the device runs use."""

from __future__ import annotations

from fastapi import APIRouter

from pagedviz.app.schemas import Health
from pagedviz.core import __version__
from pagedviz.core.device import resolve_device

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    return Health(status="ok", version=__version__, device=str(resolve_device("auto")))
