"""One array of a run's step, as JSON, CSV (opens in a spreadsheet) or NPY (loads with
numpy.load); answered as soon as the step is computed."""

from __future__ import annotations

import csv
import io

import numpy as np
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from pagedviz.app.errors import ApiError
from pagedviz.app.routes.deps import ERRORS, streamed_step
from pagedviz.app.schemas import ArrayNamed

router = APIRouter()  # included by app/routes/runs.py's router (its /api prefix and tag)


def as_csv(name: str, arr: np.ndarray) -> str:
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
    t = await streamed_step(request, run_id, n)
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
            as_csv(name, arr),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{stem}.csv"'},
        )
    return JSONResponse({"name": name, **entry.to_dict()})
