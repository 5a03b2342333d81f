"""The scenario format's JSON Schema comes from the same field tables as the validator: an outside
JSON Schema validator (jsonschema) and ours agree on the presets, on every bound and on unknown
fields; defaults in the schema are the ones the validator fills in; misspelt fields get a
suggestion."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import jsonschema
import pytest

from pagedviz.core import Limits, Scenario, ScenarioError
from pagedviz.core.fields import fields_of
from pagedviz.core.presets import list_presets, preset_dict
from pagedviz.core.scenario_parts import EngineConfig, ModelConfig
from pagedviz.core.schema import scenario_schema

LIMITS = Limits()
SCHEMA = scenario_schema(LIMITS)
CHECK = jsonschema.Draft202012Validator(SCHEMA)
BASE: dict[str, Any] = {
    "name": "x",
    "config": {"block_size": 4, "max_model_len": 32, "num_kv_blocks": 32, "model": None},
    "requests": [{"id": "a", "prompt_len": 5, "max_tokens": 3}],
}


def errors_of(d: Any) -> list[tuple[str, str]]:
    try:
        Scenario.from_dict(d, LIMITS)
    except ScenarioError as e:
        return e.errors
    return []


def test_the_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("pid", [p["id"] for p in list_presets()])
def test_every_preset_matches_the_schema(pid: str) -> None:
    CHECK.validate(preset_dict(pid))


def _levels() -> list[tuple[str, dict[str, Any], list[str]]]:
    """(where the field lives in BASE, its properties in the schema, the path to it)."""
    config = SCHEMA["properties"]["config"]
    model = next(o for o in config["properties"]["model"]["oneOf"] if o.get("type") == "object")
    request = SCHEMA["properties"]["requests"]["items"]
    return [
        ("top", SCHEMA["properties"], []),
        ("config", config["properties"], ["config"]),
        ("model", model["properties"], ["config", "model"]),
        ("request", request["properties"], ["requests", "0"]),
    ]


def _with(path: list[str], key: str, value: Any) -> dict[str, Any]:
    d = copy.deepcopy(BASE)
    d["config"]["model"] = {}
    obj: Any = d
    for p in path:
        obj = obj[int(p)] if p.isdigit() else obj[p]
    obj[key] = value
    return d


def _integer_bounds() -> list[tuple[list[str], str, int, int | None]]:
    out = []
    for _, props, path in _levels():
        for key, prop in props.items():
            if prop.get("type") == "integer":
                out.append((path, key, prop["minimum"], prop.get("maximum")))
    return out


@pytest.mark.parametrize(("path", "key", "lo", "hi"), _integer_bounds())
def test_integer_bounds_in_the_schema_are_the_validators(
    path: list[str], key: str, lo: int, hi: int | None
) -> None:
    for bad in [lo - 1] + ([hi + 1] if hi is not None else []):
        d = _with(path, key, bad)
        assert not CHECK.is_valid(d)
        assert any(loc.endswith(f".{key}") or loc == key for loc, _ in errors_of(d)), (key, bad)
    # the bound itself is accepted by both, as far as this field goes
    for good in [lo] + ([hi] if hi is not None else []):
        d = _with(path, key, good)
        assert not any(
            loc.endswith(f".{key}") and msg.startswith(("must be >=", "must be <="))
            for loc, msg in errors_of(d)
        ), (key, good)


def test_every_field_of_the_schema_is_read_by_the_validator() -> None:
    for _, props, path in _levels():
        for key in props:
            if key in ("config", "requests", "model", "prompt_token_ids", "prompt", "prompt_len"):
                continue  # objects and the prompt forms: covered by the other tests
            errs = errors_of(_with(path, key, [[]]))
            assert any(loc.split(".")[-1] == key for loc, _ in errs), (path, key, errs)
            assert not CHECK.is_valid(_with(path, key, [[]]))


def test_fields_outside_the_schema_are_unknown_to_both() -> None:
    for _, _, path in _levels():
        d = _with(path, "zzz_not_a_field", 1)
        assert not CHECK.is_valid(d)
        assert any(loc.endswith("zzz_not_a_field") and msg == "unknown field" for loc, msg in errors_of(d))


def test_schema_defaults_are_what_the_validator_fills_in() -> None:
    cfg = Scenario.from_dict({"requests": [{"prompt_len": 4}]}, LIMITS).config
    props = SCHEMA["properties"]["config"]["properties"]
    for key, prop in props.items():
        value = getattr(cfg, key)
        expected = dataclasses.asdict(value) if isinstance(value, ModelConfig) else value
        assert prop["default"] == expected, key
    s = Scenario.from_dict({"requests": [{"prompt_len": 4}]}, LIMITS)
    top = SCHEMA["properties"]
    assert (s.name, s.flavor, s.seed, s.max_steps) == tuple(
        top[k]["default"] for k in ("name", "flavor", "seed", "max_steps")
    )
    req = SCHEMA["properties"]["requests"]["items"]["properties"]
    assert (s.requests[0].max_tokens, s.requests[0].arrival_step) == (
        req["max_tokens"]["default"],
        req["arrival_step"]["default"],
    )


def test_exactly_one_prompt_form() -> None:
    two = copy.deepcopy(BASE)
    two["requests"][0]["prompt"] = "hi"
    none = copy.deepcopy(BASE)
    del none["requests"][0]["prompt_len"]
    for d in (two, none):
        assert not CHECK.is_valid(d)
        assert ("requests[0]", "give exactly one of prompt_token_ids, prompt, prompt_len") in errors_of(d)


def test_limits_shape_the_schema() -> None:
    small = scenario_schema(Limits(max_block_size=8, max_requests=3))
    assert small["properties"]["config"]["properties"]["block_size"]["maximum"] == 8
    assert small["properties"]["requests"]["maxItems"] == 3


@pytest.mark.parametrize(
    ("path", "typo", "suggestion"),
    [
        (["config"], "block_sise", "block_size"),
        ([], "requets", "requests"),
        (["requests", "0"], "max_token", "max_tokens"),
        (["config", "model"], "num_layer", "num_layers"),
    ],
)
def test_misspelt_fields_get_a_suggestion(path: list[str], typo: str, suggestion: str) -> None:
    d = _with(path, typo, 1)
    loc = ".".join(["requests[0]" if p == "0" else p for p in path if p != "requests"] + [typo])
    assert (loc, f"unknown field; did you mean {suggestion!r}?") in errors_of(d)


def test_an_unrelated_unknown_field_gets_no_suggestion() -> None:
    assert ("config.zzz", "unknown field") in errors_of(_with(["config"], "zzz", 1))


@pytest.mark.parametrize("cls", [EngineConfig, ModelConfig])
def test_every_config_field_is_declared_with_a_description(cls: Any) -> None:
    names = {f.name for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    specs = fields_of(cls)
    assert {s.name for s in specs} == names
    assert all(s.doc for s in specs), [s.name for s in specs if not s.doc]


def test_a_field_added_in_one_line_is_validated_and_published() -> None:
    from pydantic import ValidationError

    from pagedviz.core.fields import setting
    from pagedviz.core.models import model_of
    from pagedviz.core.validate import scenario_error

    @dataclasses.dataclass(frozen=True)
    class Extra:
        watermark: float = setting(0.0, "a reserve of the pool", lo=0.0, hi=1.0)
        policy: str = setting("new", "which rule", choices=("old", "new"))

    model = model_of("Extra", fields_of(Extra), LIMITS, "two fields")
    ok = model.model_validate({"watermark": 0.25, "policy": "old"})
    assert (ok.watermark, ok.policy) == (0.25, "old")  # type: ignore[attr-defined]
    with pytest.raises(ValidationError) as bad:
        model.model_validate({"watermark": 2, "policy": "newest"})
    assert scenario_error(bad.value).errors == [
        ("watermark", "must be <= 1 (got 2; a fixed bound of the engine)"),
        ("policy", "must be one of old, new (got 'newest')"),
    ]
    props = model.model_json_schema()["properties"]
    assert {k: props["watermark"][k] for k in ("type", "minimum", "maximum", "description", "default")} == {
        "type": "number",
        "minimum": 0.0,
        "maximum": 1.0,
        "description": "a reserve of the pool",
        "default": 0.0,
    }
    assert props["policy"]["enum"] == ["old", "new"] and props["policy"]["default"] == "new"
