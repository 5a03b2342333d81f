"""The scenario format as pydantic models, built from the field declarations (core/fields.py and
the tables in core/scenario_parts.py) with one server's limits as bounds.

The models check what each field alone must be: its type (strictly: no "3" for 3, no true for 1),
its bounds, its choices, and that no unknown field is given; and they publish the JSON Schema
(core/schema.py). Rules that relate fields to each other, or to the flavour, are core/rules.py's.
A field's own refusal that pydantic has no error type for is raised as a `refusal`, whose message
the validator passes on as it is.
"""

from __future__ import annotations

import functools
from dataclasses import asdict
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    WithJsonSchema,
    create_model,
)
from pydantic import model_validator as _model_validator
from pydantic_core import PydanticCustomError

from pagedviz.core.fields import FieldSpec, fields_of
from pagedviz.core.kv_groups import LAYER_TYPES
from pagedviz.core.limits import FIXED_BOUND, Limits, raised_by
from pagedviz.core.scenario_parts import (
    PROMPT_FIELDS,
    REQUEST_FIELDS,
    SCENARIO_FIELDS,
    EngineConfig,
    ModelConfig,
)

IMAGE_KEYS = ("offset", "t", "h", "w")
STRICT = ConfigDict(strict=True, extra="forbid")


def refusal(message: str, *, too_large: bool = False) -> PydanticCustomError:
    """A field's refusal in our own words (the validator shows `message` as it is)."""
    return PydanticCustomError("pagedviz", "{message}", {"message": message, "too_large": too_large})


def _object(message: str, *, null: str = "keep") -> BeforeValidator:
    """Refuses anything but an object with `message`; null is kept ("keep"), taken as {}
    ("empty") or refused too ("refuse")."""

    def check(v: Any) -> Any:
        if v is None and null != "refuse":
            return {} if null == "empty" else None
        if not isinstance(v, dict):
            raise refusal(message)
        return v

    return BeforeValidator(check)


def _capture_sizes(v: Any) -> Any:
    if v is None or (isinstance(v, str) and v == "default"):
        return v
    if not isinstance(v, list) or not v or not all(type(s) is int and s > 0 for s in v):
        raise refusal('must be null, "default" or a non-empty list of positive integers')
    if len(v) > 1024:
        raise refusal(f"at most 1024 sizes ({FIXED_BOUND})", too_large=True)
    return tuple(sorted(set(v)))


def _layer_types(v: Any) -> Any:
    if v is None:
        return v
    if not isinstance(v, list) or not v or not all(isinstance(t, str) and t in LAYER_TYPES for t in v):
        raise refusal(f"must be null or a non-empty list of {' / '.join(map(repr, LAYER_TYPES))}")
    if len(v) > 8:
        raise refusal(f"at most 8 layers ({FIXED_BOUND})", too_large=True)
    return tuple(v)


def _sliding_window(v: Any) -> Any:
    if v is None:
        return v
    if type(v) is not int or v < 1:
        raise refusal("must be null or a positive integer (tokens)")
    if v > 1 << 20:
        raise refusal(f"at most {1 << 20} tokens ({FIXED_BOUND})", too_large=True)
    return v


def _request_id(v: Any) -> str | None:
    if type(v) is int:
        v = str(v)
    if v is None or not isinstance(v, str) or not v or len(v) > 64:
        raise refusal(f"must be a non-empty string of at most 64 characters ({FIXED_BOUND})")
    return v


def _prompt(v: Any) -> str:
    if not isinstance(v, str):
        raise refusal(f"must be a string (got {type(v).__name__})")
    return v


def _prompt_token_ids(v: Any) -> list[Any]:
    # the ids themselves are checked against vocab_size and max_model_len by the rules
    if not isinstance(v, list) or not v:
        raise refusal("must be a non-empty list of integers")
    return v


def _notes(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or len(v) > 8 or not all(isinstance(n, str) for n in v):
        raise refusal("must be a list of at most 8 strings")
    if any(len(n) > 400 for n in v):
        raise refusal(f"each note must be at most 400 characters ({FIXED_BOUND})", too_large=True)
    return tuple(v)


def _custom(check: Any, spec: FieldSpec) -> Any:
    """A field checked by its own function and published with its spec's schema."""
    return Annotated[Any, PlainValidator(check), WithJsonSchema(dict(spec.schema or {}))]


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def field_of(spec: FieldSpec, limits: Limits, annotation: Any = None, **extra: Any) -> tuple[Any, Any]:
    """The pydantic (type, FieldInfo) of one declared field. `hi` names a `Limits` field (this
    server's limit) or a config field (checked by the rules, which know the config)."""
    doc, lo, hi = spec.doc, spec.lo, spec.hi
    if isinstance(hi, str):
        if hasattr(limits, hi):
            doc, hi = f"{doc} (at most the server's {hi})", getattr(limits, hi)
        else:
            doc, hi = f"{doc} (at most config.{hi})", None
    kw: dict[str, Any] = {"description": doc, **extra}
    if annotation is not None:
        return annotation, Field(spec.default, **kw)
    if spec.kind == "bool":
        return bool, Field(spec.default, **kw)
    if spec.kind == "str":
        return str, Field(spec.default, max_length=spec.max_len, **kw)
    if spec.kind == "enum":
        return Literal[spec.choices], Field(spec.default, **kw)
    bounds = {"ge": lo if lo is not None else 0, "le": hi}
    if spec.kind == "float":
        return float, Field(spec.default, allow_inf_nan=False, **bounds, **kw)
    return int, Field(spec.default, **bounds, **kw)


def model_of(
    name: str,
    specs: tuple[FieldSpec, ...],
    limits: Limits,
    doc: str,
    base: type[BaseModel] | None = None,
    **custom: Any,
) -> type[BaseModel]:
    """A strict model of the declared fields, in their order; `custom` gives a field's (type,
    FieldInfo) outright; `base` (strict itself) adds rules of the model's own."""
    fields: dict[str, Any] = {s.name: custom.get(s.name) or field_of(s, limits) for s in specs}
    if base is not None:
        return create_model(name, __base__=base, __doc__=doc, **fields)
    return create_model(name, __config__=STRICT, __doc__=doc, **fields)


class _Request(BaseModel):
    """A request's rule of its own: exactly one prompt form."""

    model_config = ConfigDict(
        strict=True, extra="forbid", json_schema_extra={"oneOf": [{"required": [k]} for k in PROMPT_FIELDS]}
    )

    @_model_validator(mode="after")
    def _one_prompt_form(self) -> _Request:
        if sum(k in self.model_fields_set for k in PROMPT_FIELDS) != 1:
            raise refusal("give exactly one of prompt_token_ids, prompt, prompt_len")
        return self


@functools.lru_cache(maxsize=16)
def scenario_model(limits: Limits) -> type[BaseModel]:
    """The scenario's model with `limits` as bounds (built once per Limits; a server has one)."""
    model_specs = fields_of(ModelConfig)
    model = model_of("ModelConfig", model_specs, limits, "the tiny transformer's sizes")
    config_specs = {s.name: s for s in fields_of(EngineConfig)}
    model_spec = config_specs["model"]
    config = model_of(
        "EngineConfig",
        tuple(config_specs.values()),
        limits,
        "the engine configuration; absent fields take their default",
        cudagraph_capture_sizes=field_of(
            config_specs["cudagraph_capture_sizes"],
            limits,
            _custom(_capture_sizes, config_specs["cudagraph_capture_sizes"]),
        ),
        layer_types=field_of(
            config_specs["layer_types"], limits, _custom(_layer_types, config_specs["layer_types"])
        ),
        sliding_window=field_of(
            config_specs["sliding_window"], limits, _custom(_sliding_window, config_specs["sliding_window"])
        ),
        model=(
            Annotated[model | None, _object("must be an object or null")],  # type: ignore[valid-type]
            Field(
                default_factory=model,
                description=model_spec.doc,
                json_schema_extra={"default": asdict(ModelConfig())},
            ),
        ),
    )
    image_fields: dict[str, Any] = {k: (int, Field(ge=1, le=1 << 10)) for k in IMAGE_KEYS}
    image_fields["offset"] = (int, Field(ge=0, le=1 << 20))
    image = create_model(
        "Image",
        __config__=STRICT,
        __doc__="an image's placeholder tokens in the prompt: t*h*w tokens from offset",
        **image_fields,
    )
    req = {s.name: s for s in REQUEST_FIELDS}
    request = model_of(
        "Request",
        REQUEST_FIELDS,
        limits,
        "one request; give exactly one of prompt_token_ids, prompt, prompt_len",
        base=_Request,
        id=field_of(req["id"], limits, _custom(_request_id, req["id"]), json_schema_extra=_no_default),
        prompt_token_ids=field_of(
            req["prompt_token_ids"],
            limits,
            _custom(_prompt_token_ids, req["prompt_token_ids"]),
            json_schema_extra=_no_default,
        ),
        prompt=field_of(
            req["prompt"], limits, _custom(_prompt, req["prompt"]), json_schema_extra=_no_default
        ),
        prompt_len=field_of(req["prompt_len"], limits, json_schema_extra=_no_default),
        image=(
            Annotated[image | None, _object("must be an object {offset, t, h, w}")],  # type: ignore[valid-type]
            Field(None, description=req["image"].doc, json_schema_extra=_no_default),
        ),
    )
    top = {s.name: s for s in SCENARIO_FIELDS}

    def requests_check(v: Any) -> Any:
        if not isinstance(v, list) or not v:
            raise refusal("must be a non-empty list")
        if len(v) > limits.max_requests:
            raise refusal(
                f"at most {limits.max_requests} requests ({raised_by('max_requests')})", too_large=True
            )
        return v

    return model_of(
        "Scenario",
        SCENARIO_FIELDS,
        limits,
        "a pagedviz scenario",
        config=(
            Annotated[config, _object("must be an object", null="empty")],
            Field(default_factory=config, description=top["config"].doc, json_schema_extra=_no_default),
        ),
        requests=(
            Annotated[
                list[Annotated[request, _object("must be an object", null="refuse")]],  # type: ignore[valid-type]
                BeforeValidator(requests_check),
            ],
            Field(min_length=1, max_length=limits.max_requests, description=top["requests"].doc),
        ),
        notes=field_of(top["notes"], limits, _custom(_notes, top["notes"]), json_schema_extra=_no_default),
    )
