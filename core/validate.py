"""Validation of a scenario dict, in three passes that each report every problem with its field
path: `precheck` (what must hold before prompts are drawn or encoded), the pydantic models (each
field alone: type, bounds, choices, unknown fields; core/models.py), then the rules across fields
(core/rules.py), which build the Scenario. The cost model (core/limits.py) checks the result."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, TypeVar

from pydantic import ValidationError

from pagedviz.core.fields import fields_of
from pagedviz.core.limits import FIXED_BOUND, CostedScenario, Limits, cost_problems, raised_by
from pagedviz.core.models import IMAGE_KEYS, scenario_model
from pagedviz.core.rules import Rules
from pagedviz.core.scenario_parts import (
    MAX_N,
    REQUEST_FIELDS,
    SCENARIO_FIELDS,
    EngineConfig,
    ModelConfig,
    ScenarioError,
)

S = TypeVar("S", bound=CostedScenario)


def parse_scenario(data: Any, build: Callable[..., S], limits: Limits | None = None) -> S:
    """`Scenario.from_dict`: precheck, the fields, the rules across them, then the cost model (a
    ScenarioError marked too_large when a size is over a limit). `build` makes the scenario of
    its fields (the Scenario class itself: this module does not import core/scenario.py, which
    imports it)."""
    limits = limits or Limits.from_env()
    data = precheck(data, limits)
    if not isinstance(data, dict):
        raise ScenarioError([("scenario", "must be a JSON object")])
    try:
        model = scenario_model(limits).model_validate(data)
    except ValidationError as e:
        raise _field_errors(data, limits, e) from None
    scenario = Rules(limits).scenario(model, build)
    problems = cost_problems(scenario, limits)
    if problems:
        raise ScenarioError(problems, too_large=True)
    return scenario


def _field_errors(data: dict[str, Any], limits: Limits, error: ValidationError) -> ScenarioError:
    """The ScenarioError of pydantic's `error`. A field name that is not valid Unicode stops
    pydantic with an error on no field: such names are taken out, each an unknown field, and the
    rest is validated again."""
    if not any(e["type"] == "string_unicode" for e in error.errors()):
        return scenario_error(error)
    data, unreadable = _without_unreadable_keys(data)
    try:
        scenario_model(limits).model_validate(data)
    except ValidationError as e:
        again = scenario_error(e)
        return ScenarioError(unreadable + again.errors, too_large=again.too_large)
    return ScenarioError(unreadable)


def _without_unreadable_keys(data: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """`data` less the keys that are not valid Unicode text (a lone surrogate), which pydantic
    cannot read as field names, and an unknown-field error for each: no field has such a name."""
    errors: list[tuple[str, str]] = []

    def clean(obj: Any, loc: str) -> Any:
        if not isinstance(obj, dict):
            return obj
        bad = [k for k in obj if isinstance(k, str) and not k.isascii() and _SURROGATE.search(k)]
        errors.extend((f"{loc}.{k}" if loc else k, "unknown field") for k in bad)
        return {k: v for k, v in obj.items() if k not in bad} if bad else obj

    data = clean(data, "")
    if isinstance(data.get("config"), dict):
        data = {**data, "config": clean(data["config"], "config")}
        if isinstance(data["config"].get("model"), dict):
            data["config"] = {**data["config"], "model": clean(data["config"]["model"], "config.model")}
    if isinstance(data.get("requests"), list):
        reqs = [clean(r, f"requests[{i}]") for i, r in enumerate(data["requests"])]
        for i, r in enumerate(reqs):
            if isinstance(r, dict) and isinstance(r.get("image"), dict):
                reqs[i] = {**r, "image": clean(r["image"], f"requests[{i}].image")}
        data = {**data, "requests": reqs}
    return data, errors


# ----------------------------------------------------------------------------- pydantic's errors
# fields of each object, for "did you mean" (the level is the path with list indices as "#")
_ALLOWED = {
    (): sorted(s.name for s in SCENARIO_FIELDS),
    ("config",): sorted(s.name for s in fields_of(EngineConfig)),
    ("config", "model"): sorted(s.name for s in fields_of(ModelConfig)),
    ("requests", "#"): sorted(s.name for s in REQUEST_FIELDS),
    ("requests", "#", "image"): sorted(IMAGE_KEYS),
}
# each field's upper bound as declared: a number (fixed), or the name of a Limits field or of a
# config field (the level as in _ALLOWED)
_HI: dict[tuple[str, ...], dict[str, Any]] = {
    (): {s.name: s.hi for s in SCENARIO_FIELDS},
    ("config",): {s.name: s.hi for s in fields_of(EngineConfig)},
    ("config", "model"): {s.name: s.hi for s in fields_of(ModelConfig)},
    ("requests", "#"): {s.name: s.hi for s in REQUEST_FIELDS},
}
# the top level's own scalars are named scenario.<field>
_SCENARIO_SCALARS = {"name", "seed", "max_steps", "title", "summary", "document"}


def where(loc: tuple[int | str, ...]) -> str:
    """The field path of a pydantic location: config.block_size, requests[2].id, scenario.seed."""
    if len(loc) == 1 and loc[0] in _SCENARIO_SCALARS:
        return f"scenario.{loc[0]}"
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def _number(bound: float) -> float:
    """A bound as declared: pydantic keeps a float field's bounds as floats (0 becomes 0.0)."""
    return int(bound) if isinstance(bound, float) and bound.is_integer() else bound


def governing(loc: tuple[int | str, ...]) -> str:
    """What governs the upper bound of the field at pydantic location `loc`: the PAGEDVIZ_*
    variable of the server's limit it is declared with, else a fixed bound of the engine."""
    level = tuple("#" if isinstance(p, int) else p for p in loc[:-1])
    hi = _HI.get(level, {}).get(str(loc[-1]) if loc else "")
    return raised_by(hi) if isinstance(hi, str) and hasattr(Limits, hi) else FIXED_BOUND


def _message(e: Any) -> tuple[str, bool]:
    """One pydantic error in the scenario format's words, and whether it is a size over a bound
    (which then names what governs the bound)."""
    kind, ctx, value = e["type"], e.get("ctx") or {}, e.get("input")
    if kind == "pagedviz":
        return ctx["message"], bool(ctx["too_large"])
    if kind == "extra_forbidden":
        level = tuple("#" if isinstance(p, int) else p for p in e["loc"][:-1])
        close = difflib.get_close_matches(str(e["loc"][-1]), _ALLOWED.get(level, []), n=1)
        return "unknown field" + (f"; did you mean {close[0]!r}?" if close else ""), False
    if kind == "greater_than_equal":
        return f"must be >= {_number(ctx['ge'])} (got {value})", False
    if kind == "less_than_equal":
        return f"must be <= {_number(ctx['le'])} (got {value}; {governing(e['loc'])})", True
    if kind == "string_too_long":
        return f"must be at most {ctx['max_length']} characters ({FIXED_BOUND})", True
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", ctx.get("expected", ""))  # pydantic's "'a', 'b' or 'c'"
        return f"must be one of {', '.join(choices)} (got {value!r:.40})", False
    if kind == "bool_type":
        return f"must be true or false (got {value!r:.40})", False
    if kind == "string_type":
        return f"must be a string (got {type(value).__name__})", False
    if kind in ("float_type", "finite_number"):
        return f"must be a number (got {type(value).__name__})", False
    if kind == "missing":  # requests, or one of an image's integers
        return (
            ("must be a non-empty list", False)
            if e["loc"] == ("requests",)
            else ("must be an integer (got NoneType)", False)
        )
    if kind == "string_unicode":
        return "has a lone surrogate: not valid Unicode text", False
    if kind == "int_type":
        return f"must be an integer (got {type(value).__name__})", False
    return str(e["msg"]), False


def scenario_error(error: ValidationError) -> ScenarioError:
    """Every problem pydantic found, as one ScenarioError with our field paths and messages."""
    problems, too_large = [], False
    for e in error.errors(include_url=False):
        msg, large = _message(e)
        problems.append((where(e["loc"]), msg))
        too_large = too_large or large
    return ScenarioError(problems, too_large=too_large)


# ----------------------------------------------------------------------------- before validation
def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_INT_DEFAULTS = {"seed", "max_steps"}
_CONFIG_INTS = {k for k, v in asdict(EngineConfig()).items() if _is_int(v)}


# a lone surrogate, or a control character (Unicode category Cc: U+0000..U+001F, U+007F..U+009F)
_ODD_CHAR = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_ODD_CHAR_BUT_NEWLINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _text_problem(text: str, newlines: bool) -> str | None:
    """Why `text` cannot be an id or a name: a lone surrogate, or a control character (newlines
    and tabs allowed where `newlines`)."""
    found = (_ODD_CHAR_BUT_NEWLINES if newlines else _ODD_CHAR).search(text)
    if found is None:
        return None
    ch = found.group()
    if "\ud800" <= ch <= "\udfff":
        return f"has a lone surrogate (U+{ord(ch):04X}): not valid Unicode text"
    return f"has a control character (U+{ord(ch):04X})"


def precheck(data: Any, limits: Limits) -> Any:
    """What must hold before the validator draws or encodes prompts: ids and names are printable
    text, prompts valid Unicode, and the requests' token total within the limit (so a huge
    `prompt_len` is refused before any id is drawn). Empty values of integer fields mean their
    default (a form's blank field). Returns the data to validate; raises ScenarioError."""
    if not isinstance(data, dict):
        return data
    data = {k: v for k, v in data.items() if not (k in _INT_DEFAULTS and _blank(v))}
    if isinstance(data.get("config"), dict):
        data["config"] = {k: v for k, v in data["config"].items() if not (k in _CONFIG_INTS and _blank(v))}
    errors: list[tuple[str, str]] = []
    for key in ("name", "title", "summary", "document"):
        v = data.get(key)
        if isinstance(v, str) and (why := _text_problem(v, newlines=key == "summary")):
            errors.append((f"scenario.{key}", why))
    reqs = data.get("requests")
    if isinstance(reqs, list) and len(reqs) <= limits.max_requests:
        total, alone = 0, None  # alone: a field whose tokens alone pass the limit
        for i, r in enumerate(reqs):
            if not isinstance(r, dict):
                continue
            if isinstance(r.get("id"), str) and (why := _text_problem(r["id"], newlines=False)):
                errors.append((f"requests[{i}].id", why))
            mine = 0  # this request's tokens; its n children hold them n times
            prompt = r.get("prompt")
            if isinstance(prompt, str):
                if not prompt.isascii() and _SURROGATE.search(prompt):
                    errors.append((f"requests[{i}].prompt", "has a lone surrogate: not valid Unicode text"))
                mine += len(prompt)
            ids = r.get("prompt_token_ids")
            mine += len(ids) if isinstance(ids, list) else 0
            for key, default in (("prompt_len", 0), ("max_tokens", 8)):
                n = r.get(key, default)
                mine += max(0, int(n)) if _is_int(n) else 0
                if alone is None and _is_int(n) and n > limits.max_total_tokens:
                    alone = (f"requests[{i}].{key}", int(n))
            fan = r.get("n", 1)
            total += mine * (fan if _is_int(fan) and 1 <= fan <= MAX_N else 1)
        if total > limits.max_total_tokens:
            limit = f"the limit of all requests' tokens is {limits.max_total_tokens}"
            raises = raised_by("max_total_tokens")
            if alone is not None:
                errors.append((alone[0], f"{alone[1]} tokens alone; {limit} ({raises})"))
            else:
                errors.append(("requests", f"at least {total} tokens in all; {limit} ({raises})"))
            raise ScenarioError(errors, too_large=True)
    if errors:
        raise ScenarioError(errors)
    return data


def _blank(v: Any) -> bool:
    return isinstance(v, str) and not v.strip()
