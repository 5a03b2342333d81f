"""Golden traces: the presets' whole runs, as committed in tests/golden (regen.py rewrites them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.golden.regen import GOLDEN, stable_trace

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"


@pytest.mark.parametrize("preset", GOLDEN)
def test_preset_trace_matches_its_golden_file(preset: str) -> None:
    golden = json.loads((GOLDEN_DIR / f"{preset}.json").read_text())
    fresh = stable_trace(preset)
    assert len(fresh) == len(golden)
    for got, want in zip(fresh, golden):
        assert got == want, f"{preset} step {want['step']} differs from its golden trace"
