"""Lessons: prose bound to views of the engine, a section at a time.

A lesson is a JSON file (`core/lessons/*.json` ships with the package; a lecturer can write their
own): a title in English and 简体中文, and a list of sections. Each section names a scenario (a
preset id or an inline scenario), the step and the stage of prepare_inputs to show, an optional
selection (a request, block, token or row to light up, as narration refs do), the views its text
talks about (`views`: panels such as "queue" or "slots", or arrays; the page brings them onto the
first screen), a paragraph in both languages and, optionally, a checkpoint `{array, indices}`: the
entries a student predicts before the page reveals them (checked by core/answers.py). A paragraph's
numbers that the engine computes are placeholders (`{{batch.slots.c}}`, core/lesson_text.py) that
`fill_lesson` fills in from the section's run before the lesson is served.

`validate_lesson` checks the shape and every field, and collects every problem as (field, message)
pairs in one LessonError, as core/scenario_parts.py's ScenarioError does; `check_lesson_against_runs` then
checks what only a run can tell (the step exists, the checkpoint's entries exist in that step,
each placeholder names a value of the run and none gives the checkpoint away).
Text is kept as written: whoever shows it escapes it (the page sets textContent).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any

from pagedviz.core.lesson_text import PlaceholderError, fill, has_placeholders, syntax_errors
from pagedviz.core.limits import Limits
from pagedviz.core.presets import list_presets, preset_dict
from pagedviz.core.registry import engine_class
from pagedviz.core.runners.v2 import FINISH_STAGE, ModelRunnerV2
from pagedviz.core.scenario import Scenario
from pagedviz.core.scenario_parts import ScenarioError
from pagedviz.core.trace import StepTrace

LANGS = ("en", "zh")
SELECTION_KINDS = ("request", "block", "token", "row")
MAX_SECTIONS = 200
MAX_TITLE = 200
MAX_PARAGRAPH = 4000
MAX_CHECKPOINT = 256
SECTION_KEYS = {"title", "scenario", "step", "stage", "selection", "paragraph", "checkpoint", "views"}
# the views a section's text talks about, brought onto the student's first screen with its
# checkpoint's array (static/lesson.js): a panel of the run page by name, or an array (its
# token-table row, request-table column or card)
PANEL_VIEWS = ("queue", "block_table", "kv", "attn_mask", "slots", "requests", "tokens")
MAX_VIEWS = 4
LESSON_KEYS = {"id", "title", "summary", "minutes", "sections"}
# update_states writes these (the runner records them; flavours without a persistent batch lack it)
UPDATE_STATES_WRITES = (
    "token_ids_cpu",
    "block_table",
    "num_computed_tokens_cpu",
    "num_tokens",
    "num_scheduled_tokens",
)
MAX_SCENARIOS = 16  # distinct inline scenarios in one lesson (each may be run to check it)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class LessonError(ValueError):
    """A lesson broke one or more rules; `errors` holds (field path, message) pairs."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{loc}: {msg}" for loc, msg in errors))


@cache
def flavor_stages(flavor: str, runner: str = "v1") -> dict[str, tuple[str, ...]]:
    """Stage name -> the arrays it writes, in order, for one flavour and model runner (the vllm
    flavour's Model Runner V2 starts with finish_and_add and has its own stages and arrays)."""
    out: dict[str, tuple[str, ...]] = {}
    cls: Any
    if flavor == "vllm" and runner == "v2":
        cls = ModelRunnerV2
        out[FINISH_STAGE.name] = tuple(FINISH_STAGE.writes)
    else:
        cls = engine_class(flavor).stages_from()
        if hasattr(cls, "update_states"):
            out["update_states"] = UPDATE_STATES_WRITES
    for method in cls.STAGES:
        spec = getattr(cls, method).stage_spec
        out[spec.name] = tuple(spec.writes)
    return out


class _Checker:
    def __init__(self, limits: Limits | None) -> None:
        self.errors: list[tuple[str, str]] = []
        self.limits = limits
        self.inline: set[str] = set()

    def err(self, loc: str, msg: str) -> None:
        self.errors.append((loc, msg))

    def text(self, v: Any, loc: str, max_len: int, required: bool = True) -> dict[str, str] | None:
        """{"en": ..., "zh": ...}: at least one language; a missing one falls back to the other."""
        if v is None and not required:
            return None
        if not isinstance(v, dict):
            self.err(loc, 'must be an object {"en": "...", "zh": "..."}')
            return None
        extra = sorted(set(v) - set(LANGS))
        if extra:
            self.err(loc, f"unknown language {extra[0][:20]!r} (languages: en, zh)")
        out: dict[str, str] = {}
        for lang in LANGS:
            s = v.get(lang)
            if s is None:
                continue
            if not isinstance(s, str) or not s.strip():
                self.err(f"{loc}.{lang}", "must be a non-empty string")
            elif len(s) > max_len:
                self.err(f"{loc}.{lang}", f"must be at most {max_len} characters (got {len(s)})")
            elif _CONTROL.search(s):
                self.err(f"{loc}.{lang}", "must not hold control characters")
            else:
                out[lang] = s
        if not out:
            if not any(loc2.startswith(loc) for loc2, _ in self.errors):
                self.err(loc, "needs the text in at least one language (en or zh)")
            return None
        for lang in LANGS:
            out.setdefault(lang, out["en"] if "en" in out else out["zh"])
        return out

    def scenario(self, v: Any, loc: str) -> tuple[Any, Scenario | None]:
        if isinstance(v, str):
            try:
                data = preset_dict(v)
            except KeyError:
                ids = ", ".join(p["id"] for p in list_presets())
                self.err(loc, f"unknown preset {v[:40]!r} (presets: {ids}); or give a scenario object")
                return v, None
            return v, Scenario.from_dict(data)
        if isinstance(v, dict):
            self.inline.add(json.dumps(v, sort_keys=True, default=str))
            if len(self.inline) > MAX_SCENARIOS:
                self.err(loc, f"a lesson may hold at most {MAX_SCENARIOS} distinct inline scenarios")
                return v, None
            try:
                return v, Scenario.from_dict(v, self.limits)
            except ScenarioError as e:
                for sub, msg in e.errors:
                    sub = sub.removeprefix("scenario").lstrip(".")  # its fields, under this section's
                    self.err(f"{loc}.{sub}" if sub else loc, msg)
                return v, None
        self.err(loc, "must be a preset id or a scenario object")
        return v, None

    def section(self, s: Any, loc: str) -> dict[str, Any] | None:
        if not isinstance(s, dict):
            self.err(loc, "must be an object")
            return None
        for k in sorted(set(s) - SECTION_KEYS):
            self.err(f"{loc}.{k[:40]}", f"unknown field (fields: {', '.join(sorted(SECTION_KEYS))})")
        scenario_ref, scenario = self.scenario(s.get("scenario"), f"{loc}.scenario")
        step = s.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            self.err(f"{loc}.step", f"must be an integer >= 1 (got {str(step)[:20]})")
        elif scenario is not None and step > scenario.max_steps:
            self.err(f"{loc}.step", f"must be <= the scenario's max_steps ({scenario.max_steps})")
        runner = scenario.config.model_runner if scenario is not None else "v1"
        stages = flavor_stages(scenario.flavor, runner) if scenario is not None else None
        stage = s.get("stage")
        if not isinstance(stage, str):
            self.err(f"{loc}.stage", "must be a stage name")
        elif stages is not None and stage not in stages:
            self.err(f"{loc}.stage", f"unknown stage {stage[:40]!r} (stages: {', '.join(stages)})")
        selection = s.get("selection")
        if selection is not None:
            if not isinstance(selection, dict) or set(selection) != {"kind", "id"}:
                self.err(f"{loc}.selection", 'must be {"kind": ..., "id": ...} or null')
            elif selection["kind"] not in SELECTION_KINDS:
                self.err(f"{loc}.selection.kind", f"must be one of {', '.join(SELECTION_KINDS)}")
            elif isinstance(selection["id"], bool) or not isinstance(selection["id"], str | int):
                self.err(f"{loc}.selection.id", "must be a string or an integer")
            elif selection["kind"] != "request" and not isinstance(selection["id"], int):
                self.err(f"{loc}.selection.id", f"a {selection['kind']} is numbered: give an integer")
        checkpoint = s.get("checkpoint")
        if checkpoint is not None:
            self.checkpoint(checkpoint, f"{loc}.checkpoint", stages)
        views = self.views(s.get("views"), f"{loc}.views", stages)
        paragraph = self.text(s.get("paragraph"), f"{loc}.paragraph", MAX_PARAGRAPH)
        raw = s.get("paragraph") if paragraph is not None else None
        for lang, text in raw.items() if isinstance(raw, dict) else ():
            for msg in syntax_errors(text) if isinstance(text, str) else ():
                self.err(f"{loc}.paragraph.{lang}", msg)
        return {
            "title": self.text(s.get("title"), f"{loc}.title", MAX_TITLE, required=False),
            "scenario": scenario_ref,
            "step": step,
            "stage": stage,
            "selection": selection,
            "paragraph": paragraph,
            "checkpoint": checkpoint,
            "views": views,
        }

    def views(self, v: Any, loc: str, stages: dict[str, tuple[str, ...]] | None) -> list[str]:
        if v is None:
            return []
        if not isinstance(v, list) or len(v) > MAX_VIEWS:
            self.err(loc, f"must be a list of at most {MAX_VIEWS} view names")
            return []
        arrays = {a for w in stages.values() for a in w} if stages is not None else None
        for k, name in enumerate(v):
            if not isinstance(name, str):
                self.err(f"{loc}[{k}]", "must be a view name")
            elif name not in PANEL_VIEWS and arrays is not None and name not in arrays:
                panels = ", ".join(PANEL_VIEWS)
                msg = f"unknown view {name[:40]!r} (views: {panels}, or an array of the stages)"
                self.err(f"{loc}[{k}]", msg)
        return [x for x in v if isinstance(x, str)]

    def checkpoint(self, c: Any, loc: str, stages: dict[str, tuple[str, ...]] | None) -> None:
        if not isinstance(c, dict) or set(c) != {"array", "indices"}:
            self.err(loc, 'must be {"array": name, "indices": [...]} or absent')
            return
        if not isinstance(c["array"], str):
            self.err(f"{loc}.array", "must be an array name")
        elif stages is not None and not any(c["array"] in w for w in stages.values()):
            names = sorted({a for w in stages.values() for a in w})
            self.err(f"{loc}.array", f"unknown array {c['array'][:40]!r} (arrays: {', '.join(names)})")
        idx = c["indices"]
        if not isinstance(idx, list) or not idx or len(idx) > MAX_CHECKPOINT:
            self.err(f"{loc}.indices", f"must be a list of 1..{MAX_CHECKPOINT} entry indices")
            return
        for k, i in enumerate(idx):
            if isinstance(i, bool) or not isinstance(i, int) or i < 0:
                self.err(f"{loc}.indices[{k}]", f"must be an integer >= 0 (got {str(i)[:20]})")


def validate_lesson(data: Any, lesson_id: str | None = None, limits: Limits | None = None) -> dict[str, Any]:
    """The lesson in its canonical form (both languages filled in); LessonError otherwise.
    Inline scenarios are held to `limits` (a server's), presets always pass."""
    c = _Checker(limits)
    if not isinstance(data, dict):
        raise LessonError([("lesson", "must be a JSON object with a title and sections")])
    for k in sorted(set(data) - LESSON_KEYS):
        c.err(k[:40], f"unknown field (fields: {', '.join(sorted(LESSON_KEYS))})")
    title = c.text(data.get("title"), "title", MAX_TITLE)
    summary = c.text(data.get("summary"), "summary", MAX_PARAGRAPH, required=False)
    minutes = data.get("minutes")
    if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, int) or minutes < 1):
        c.err("minutes", "must be a positive integer")
    sections_in = data.get("sections")
    sections: list[dict[str, Any] | None] = []
    if not isinstance(sections_in, list) or not sections_in:
        c.err("sections", "must be a non-empty list of sections")
    elif len(sections_in) > MAX_SECTIONS:
        c.err("sections", f"must hold at most {MAX_SECTIONS} sections (got {len(sections_in)})")
    else:
        sections = [c.section(s, f"sections[{i}]") for i, s in enumerate(sections_in)]
    lid = lesson_id if lesson_id is not None else data.get("id", "custom")
    if not isinstance(lid, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", lid):
        c.err("id", "must be 1-64 letters, digits, '-' or '_'")
    if c.errors:
        raise LessonError(c.errors)
    return {"id": lid, "title": title, "summary": summary, "minutes": minutes, "sections": sections}


def scenario_of(section: dict[str, Any]) -> Scenario:
    """The scenario a (validated) section names."""
    ref = section["scenario"]
    return Scenario.from_dict(preset_dict(ref) if isinstance(ref, str) else ref)


def check_lesson_against_runs(lesson: dict[str, Any], run: Callable[[Scenario], list[StepTrace]]) -> None:
    """What only a run tells: each section's step exists and its checkpoint's entries exist in
    that step. `run` gives a scenario's steps (a cache, the server's run store)."""
    errors: list[tuple[str, str]] = []
    for i, s in enumerate(lesson["sections"]):
        steps = run(scenario_of(s))
        loc = f"sections[{i}]"
        if s["step"] > len(steps):
            errors.append((f"{loc}.step", f"the run has only {len(steps)} steps (got {s['step']})"))
            continue
        t = steps[s["step"] - 1]
        if s["stage"] not in {st.name for st in t.stages} | {"update_states"} and not t.idle:
            errors.append((f"{loc}.stage", f"step {s['step']} has no stage {s['stage']!r}"))
        cp = s["checkpoint"]
        if cp is None:
            continue
        entry = t.array_entries.get(cp["array"])
        if entry is None:
            errors.append((f"{loc}.checkpoint.array", f"step {s['step']} has no array {cp['array']!r}"))
            continue
        size = entry.value.size
        for k, idx in enumerate(cp["indices"]):
            if idx >= size:
                errors.append((f"{loc}.checkpoint.indices[{k}]", f"must be < {size} in step {s['step']}"))
    try:
        fill_lesson(lesson, run)
    except LessonError as e:
        errors.extend(e.errors)
    if errors:
        raise LessonError(errors)


def fill_lesson(lesson: dict[str, Any], run: Callable[[Scenario], list[StepTrace]]) -> dict[str, Any]:
    """The (validated) lesson with each paragraph's placeholders filled in from its section's
    run; only sections with placeholders are run. LessonError names each paragraph whose
    placeholder names nothing in the run or gives the checkpoint away."""
    errors: list[tuple[str, str]] = []
    sections = []
    for i, s in enumerate(lesson["sections"]):
        if not has_placeholders(s["paragraph"]):
            sections.append(s)
            continue
        sc = scenario_of(s)
        steps = run(sc)
        para: dict[str, str] = {}
        done: dict[str, str | None] = {}  # a text both languages share is filled (and named) once
        for lang, text in s["paragraph"].items():
            if text not in done:
                try:
                    done[text] = fill(text, steps, s["step"], sc, s["checkpoint"])
                except PlaceholderError as e:
                    errors.append((f"sections[{i}].paragraph.{lang}", str(e)))
                    done[text] = None
            para[lang] = done[text] or text
        sections.append({**s, "paragraph": para})
    if errors:
        raise LessonError(errors)
    return {**lesson, "sections": sections}


@cache
def _files() -> dict[str, str]:
    out = {}
    for entry in sorted(resources.files("pagedviz.core.lessons").iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".json"):
            out[entry.name[:-5]] = entry.read_text(encoding="utf-8")
    return out


def load_lesson(lesson_id: str) -> dict[str, Any]:
    """A shipped lesson, validated; KeyError for an unknown id."""
    return validate_lesson(json.loads(_files()[lesson_id]), lesson_id)


def list_lessons(lang: str = "en") -> list[dict[str, Any]]:
    """id, title, summary, minutes and the number of sections of each shipped lesson."""
    out = []
    for lid in _files():
        lesson = load_lesson(lid)
        pick = lang if lang in LANGS else "en"
        out.append(
            {
                "id": lid,
                "title": lesson["title"][pick],
                "summary": (lesson["summary"] or {}).get(pick, ""),
                "minutes": lesson["minutes"],
                "num_sections": len(lesson["sections"]),
            }
        )
    return out
