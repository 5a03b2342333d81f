"""Presets' notes (e.g. on a document's typo) reach the preset list in both languages, and a
scenario's notes must be a short list of strings."""

from __future__ import annotations

import pytest

from pagedviz.core import Scenario, ScenarioError, load_preset
from pagedviz.core.presets import list_presets


def test_document_typo_notes_reach_the_preset_list_in_both_languages() -> None:
    en = {p["id"]: p for p in list_presets()}
    zh = {p["id"]: p for p in list_presets("zh")}
    assert "[0, 1, 1, 2, 95, 170, 200]" in en["seed-000"]["notes"][0]
    assert "T_0_2" in en["seed-001-ascend"]["notes"][0] and "T_0_3" in en["seed-001-ascend"]["notes"][0]
    assert "T_0_3" in zh["seed-001"]["notes"][0] and zh["seed-001"]["notes"] != en["seed-001"]["notes"]
    # a preset without a typo carries only the note that pins the V1 runner
    assert [n for n in en["seed-002"]["notes"] if not n.startswith("Pinned to vLLM 0.33's V1 runner")] == []


def test_notes_must_be_a_short_list_of_strings() -> None:
    base = load_preset("seed-001").to_dict()
    with pytest.raises(ScenarioError) as e:
        Scenario.from_dict({**base, "notes": "one"})
    assert e.value.errors[0][0] == "notes"
    assert Scenario.from_dict({**base, "notes": ["a"]}).notes == ("a",)
