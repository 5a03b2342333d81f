"""Scenario presets shipped with the package: each follows one of the seed documents."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from core.config import Scenario


@cache
def _all() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for entry in sorted(resources.files(__name__).iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".json"):
            out[entry.name[:-5]] = json.loads(entry.read_text(encoding="utf-8"))
    return out


def list_presets() -> list[dict[str, str]]:
    """id, title, summary, document and flavour of every preset."""
    return [
        {
            "id": pid,
            "title": d.get("title", pid),
            "summary": d.get("summary", ""),
            "document": d.get("document", ""),
            "flavor": d.get("flavor", "vllm"),
        }
        for pid, d in _all().items()
    ]


def preset_dict(preset_id: str) -> dict[str, Any]:
    """The preset's scenario JSON (a fresh copy); KeyError for an unknown id."""
    return json.loads(json.dumps(_all()[preset_id]))


def load_preset(preset_id: str) -> Scenario:
    return Scenario.from_dict(preset_dict(preset_id))
