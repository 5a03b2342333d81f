"""Golden traces: the presets' whole runs, as committed in tests/golden (regen.py rewrites them)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "golden"))
from regen import GOLDEN, stable_trace  # noqa: E402


@pytest.mark.parametrize("preset", GOLDEN)
def test_preset_trace_matches_its_golden_file(preset: str) -> None:
    golden = json.loads((Path(__file__).parent / "golden" / f"{preset}.json").read_text())
    fresh = stable_trace(preset)
    assert len(fresh) == len(golden)
    for got, want in zip(fresh, golden):
        assert got == want, f"{preset} step {want['step']} differs from its golden trace"
