"""Scenario presets shipped with the package: the seed-* presets follow the seed documents, the
demo-* ones show what the documents mention but do not work through (prefix caching, preemption).
Titles and summaries come in English (in each preset) and 简体中文 (zh.json)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from pagedviz.core.scenario import Scenario


@cache
def _all() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    # the document presets first, then the demos
    files = sorted(
        resources.files(__name__).iterdir(), key=lambda p: (not p.name.startswith("seed-"), p.name)
    )
    for entry in files:
        if entry.name.endswith(".json") and entry.name != "zh.json":
            out[entry.name[:-5]] = json.loads(entry.read_text(encoding="utf-8"))
    return out


@cache
def _zh() -> dict[str, dict[str, Any]]:
    return json.loads(resources.files(__name__).joinpath("zh.json").read_text(encoding="utf-8"))


def list_presets(lang: str = "en") -> list[dict[str, Any]]:
    """id, title, summary, document, flavour and notes of every preset; title, summary and notes
    in `lang`."""
    out = []
    for pid, d in _all().items():
        text = _zh().get(pid, {}) if lang == "zh" else {}
        out.append(
            {
                "id": pid,
                "title": text.get("title", d.get("title", pid)),
                "summary": text.get("summary", d.get("summary", "")),
                "document": d.get("document", ""),
                "flavor": d.get("flavor", "vllm"),
                "notes": text.get("notes", d.get("notes", [])),
            }
        )
    return out


def preset_dict(preset_id: str) -> dict[str, Any]:
    """The preset's scenario JSON (a fresh copy); KeyError for an unknown id."""
    return json.loads(json.dumps(_all()[preset_id]))


def load_preset(preset_id: str) -> Scenario:
    return Scenario.from_dict(preset_dict(preset_id))
