"""The scenario format's field declarations: a FieldSpec per field, declared once with `setting(...)`
on a config dataclass (or in a table for the top level and the requests); the pydantic models that
validate each field and publish the JSON Schema are built from them (core/models.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class FieldSpec:
    """One field of the scenario format, declared once: its pydantic field (core/models.py)
    validates it and `scenario_schema()` publishes it. `hi` is a number, or the name of a `Limits` field (the
    server's limit) or of a config field the value may not exceed (`max_model_len`)."""

    name: str
    default: Any
    doc: str
    kind: str = "int"  # int, float, bool, str, enum; custom: its own check, `schema` its shape
    lo: float | None = None
    hi: float | str | None = None
    choices: tuple[str, ...] = ()
    max_len: int = 200
    schema: dict[str, Any] | None = None


def setting(
    default: Any,
    doc: str,
    *,
    lo: float | None = None,
    hi: float | str | None = None,
    choices: tuple[str, ...] = (),
    schema: dict[str, Any] | None = None,
    factory: Any = None,
) -> Any:
    """A dataclass field that carries its FieldSpec: adding a config field is this one line."""
    if schema is not None:
        kind = "custom"
    elif choices:
        kind = "enum"
    else:
        kind = _kind_of(default)
    spec = FieldSpec("", default, doc, kind, lo, hi, choices, schema=schema)
    if factory is not None:
        return field(default_factory=factory, metadata={"spec": spec})
    return field(default=default, metadata={"spec": spec})


def _kind_of(default: Any) -> str:
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, int):
        return "int"
    return "float" if isinstance(default, float) else "str"


def fields_of(cls: Any) -> tuple[FieldSpec, ...]:
    """The scenario fields of a config dataclass, in declaration order (internal ones left out;
    a plain field without `setting(...)` is read by the type of its default)."""
    out = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        spec = f.metadata.get("spec") or FieldSpec("", f.default, "", _kind_of(f.default), lo=0)
        out.append(dataclasses.replace(spec, name=f.name))
    return tuple(out)
