"""The scenario format, the server's limits and validation, under their former single name.

The concepts live in their own modules: the format in core/scenario.py (field declarations in
core/fields.py, the byte tokenizer in core/text.py), the limits and the cost model in
core/limits.py, validation in core/validate.py and the JSON Schema in core/schema.py. This module
re-exports them so `pagedviz.core.config` keeps working for every caller.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pagedviz.core.fields import FieldSpec, fields_of, setting
from pagedviz.core.limits import (
    DENSE_CHECK_MAX_TOKENS,
    Limits,
    SettingError,
    cost_problems,
    env_int,
    step_costs,
)
from pagedviz.core.scenario import (
    DEVICES,
    FLAVORS,
    PROMPT_FIELDS,
    REQUEST_FIELDS,
    RUNNERS,
    SCENARIO_FIELDS,
    EngineConfig,
    ModelConfig,
    RequestSpec,
    Scenario,
    ScenarioError,
    default_capture_sizes,
)
from pagedviz.core.text import BOS_ID, EOS_ID, NUM_SPECIAL_IDS, PAD_ID, SPECIAL_NAMES, decode_ids, encode_text

if TYPE_CHECKING:
    from pagedviz.core.schema import scenario_schema
    from pagedviz.core.validate import parse_scenario, precheck

# validation and the schema need pydantic: imported when first asked for, so that the engine
# (which only reads the dataclasses) imports without it
_LAZY = {
    "scenario_schema": "pagedviz.core.schema",
    "parse_scenario": "pagedviz.core.validate",
    "precheck": "pagedviz.core.validate",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BOS_ID",
    "DENSE_CHECK_MAX_TOKENS",
    "DEVICES",
    "EOS_ID",
    "FLAVORS",
    "NUM_SPECIAL_IDS",
    "PAD_ID",
    "PROMPT_FIELDS",
    "REQUEST_FIELDS",
    "RUNNERS",
    "SCENARIO_FIELDS",
    "SPECIAL_NAMES",
    "EngineConfig",
    "FieldSpec",
    "Limits",
    "ModelConfig",
    "RequestSpec",
    "Scenario",
    "ScenarioError",
    "SettingError",
    "cost_problems",
    "decode_ids",
    "default_capture_sizes",
    "encode_text",
    "env_int",
    "fields_of",
    "parse_scenario",
    "precheck",
    "scenario_schema",
    "setting",
    "step_costs",
]
