"""The scenario format as a JSON Schema, generated from the same field declarations the validator
reads (core/fields.py); bounds that are limits are the server's."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict
from typing import Any

from pagedviz.core.fields import FieldSpec, fields_of
from pagedviz.core.limits import Limits
from pagedviz.core.scenario import PROMPT_FIELDS, REQUEST_FIELDS, SCENARIO_FIELDS, EngineConfig, ModelConfig


def _json_default(value: Any) -> Any:
    if isinstance(value, ModelConfig):
        return asdict(value)
    return list(value) if isinstance(value, tuple) else value


def _property(spec: FieldSpec, limits: Limits, default: Any) -> dict[str, Any]:
    """The JSON Schema of one field, from its spec."""
    doc = spec.doc
    out: dict[str, Any]
    if spec.kind == "custom":
        out = dict(spec.schema or {})
    elif spec.kind == "bool":
        out = {"type": "boolean"}
    elif spec.kind == "str":
        out = {"type": "string", "maxLength": spec.max_len}
    elif spec.kind == "enum":
        out = {"enum": list(spec.choices)}
    else:
        out = {
            "type": "number" if spec.kind == "float" else "integer",
            "minimum": spec.lo if spec.lo is not None else 0,
        }
        if isinstance(spec.hi, int | float):
            out["maximum"] = spec.hi
        elif isinstance(spec.hi, str) and hasattr(limits, spec.hi):
            out["maximum"] = getattr(limits, spec.hi)
            doc += f" (at most the server's {spec.hi})"
        elif spec.hi is not None:
            doc += f" (at most config.{spec.hi})"
    out["description"] = doc
    if default is not dataclasses.MISSING:
        out["default"] = _json_default(default)
    return out


def _object(props: dict[str, dict[str, Any]], doc: str) -> dict[str, Any]:
    return {"type": "object", "description": doc, "properties": props, "additionalProperties": False}


def _dataclass_object(cls: Any, limits: Limits, doc: str) -> dict[str, Any]:
    defaults = {
        f.name: f.default_factory() if callable(f.default_factory) else f.default
        for f in dataclasses.fields(cls)
    }
    return _object({s.name: _property(s, limits, defaults[s.name]) for s in fields_of(cls)}, doc)


def scenario_schema(limits: Limits | None = None) -> dict[str, Any]:
    """The scenario format as a JSON Schema (draft 2020-12), generated from the same field tables
    that the validator reads; bounds that are limits are this server's (`limits`). Rules that
    relate fields to each other are checked by the validator alone; the description lists them."""
    limits = limits or Limits.from_env()
    model = _dataclass_object(ModelConfig, limits, "the tiny transformer's sizes")
    config = _dataclass_object(
        EngineConfig, limits, "the engine configuration; absent fields take their default"
    )
    model_prop = config["properties"]["model"]
    model_prop.pop("type", None)
    model_prop["oneOf"] = [{"type": "null"}, model]
    request = _object(
        {
            s.name: _property(s, limits, s.default if s.default is not None else dataclasses.MISSING)
            for s in REQUEST_FIELDS
        },
        "one request; give exactly one of prompt_token_ids, prompt, prompt_len",
    )
    request["oneOf"] = [{"required": [k]} for k in PROMPT_FIELDS]
    top = {
        s.name: _property(s, limits, s.default if s.kind != "custom" else dataclasses.MISSING)
        for s in SCENARIO_FIELDS
    }
    top["config"] = {**config, "description": SCENARIO_FIELDS[3].doc}
    top["requests"] = {
        "type": "array",
        "description": SCENARIO_FIELDS[4].doc,
        "minItems": 1,
        "maxItems": limits.max_requests,
        "items": request,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "/api/schema/scenario",
        "title": "pagedviz scenario",
        "description": (
            "A scenario for pagedviz (docs/scenario-format.md). Rules across fields, checked when "
            "the scenario is validated: prompt length + max_tokens <= max_model_len; a request's "
            "blocks fit the pool; without chunked prefill (and always for nanovllm) a request fits "
            "max_num_batched_tokens whole; request ids are unique; num_kv_heads divides num_heads; "
            f"prompt + output tokens over all requests <= {limits.max_total_tokens}; "
            f"max_num_reqs * max_model_len <= {limits.max_cells}."
        ),
        "type": "object",
        "properties": top,
        "required": ["requests"],
        "additionalProperties": False,
    }
