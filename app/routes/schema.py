"""GET /api/schema/scenario: the scenario format as a JSON Schema, generated from the field
tables the validator reads (docs/scenario-format.md), with this server's limits as bounds."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from pagedviz.core.schema import scenario_schema

router = APIRouter(prefix="/api/schema", tags=["schema"])


@router.get("/scenario")
def scenario(request: Request) -> dict[str, Any]:
    """The scenario format (JSON Schema draft 2020-12): every field with its type, default,
    bounds and description. Rules that relate fields to each other are listed in its description
    and checked by `POST /api/scenarios/validate`."""
    return scenario_schema(request.app.state.settings.limits)
