"""Field names and values that are not valid Unicode text (a lone surrogate, which JSON's \\u
escapes can spell) are refused with their path, at every level, beside the other problems."""

from __future__ import annotations

import json

import pytest

from pagedviz.core import Limits, Scenario, ScenarioError


def errors_of(body: str) -> list[tuple[str, str]]:
    with pytest.raises(ScenarioError) as info:
        Scenario.from_dict(json.loads(body), Limits())
    return info.value.errors


def test_unreadable_names_are_unknown_fields_at_every_level_beside_other_problems() -> None:
    errs = errors_of(
        '{"config": {"\\udfff": 2, "block_size": "x", "model": {"\\ud802": 1}}, '
        '"requests": [{"id": "a", "prompt_len": 2, "\\ud801": 0}]}'
    )
    assert ("config.\udfff", "unknown field") in errs
    assert ("config.model.\ud802", "unknown field") in errs
    assert ("requests[0].\ud801", "unknown field") in errs
    assert ("config.block_size", "must be an integer (got str)") in errs


def test_an_unreadable_choice_names_its_field() -> None:
    errs = errors_of('{"flavor": "\\ud800", "requests": [{"id": "a", "prompt_len": 2}]}')
    assert errs == [("flavor", "has a lone surrogate: not valid Unicode text")]
