"""A trace owns its arrays: recording is cheap (fresh arrays are kept, views of the runner's
persistent buffers are copied once, entries are built when first read), and nothing the engine
does in later steps changes a trace already handed out."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pagedviz.core import load_preset, make_engine
from pagedviz.core.presets import list_presets

PRESETS = [p["id"] for p in list_presets()]


@pytest.mark.parametrize("preset", PRESETS)
def test_a_trace_read_after_the_run_equals_the_trace_read_at_its_step(preset: str) -> None:
    scenario = load_preset(preset)
    at_step = []
    for t in make_engine(scenario).run():
        d = t.to_dict()
        d.pop("timing_us")
        at_step.append(json.dumps(d, sort_keys=True, default=str))
    # the same run, every trace read only once the engine has overwritten its buffers many times
    later = list(make_engine(scenario).run())
    assert len(later) == len(at_step)
    for t, want in zip(later, at_step):
        d = t.to_dict()
        d.pop("timing_us")
        assert json.dumps(d, sort_keys=True, default=str) == want, f"{preset} step {t.step} changed"


@pytest.mark.parametrize("preset", PRESETS)
def test_every_recorded_array_owns_its_memory_or_views_its_own_buffer_copy(preset: str) -> None:
    engine = make_engine(load_preset(preset))
    persistent = [
        a
        for a in vars(getattr(engine, "runner", engine)).values()
        if isinstance(a, np.ndarray) and a.size > 1 and np.issubdtype(a.dtype, np.integer)
    ]
    for t in engine.run():
        for name, entry in t.array_entries.items():
            data = entry.data
            assert data.base is None or data.base is entry.buffer, f"{preset} step {t.step}: {name}"
            assert entry.buffer is None or entry.buffer.base is None
            assert not any(np.shares_memory(data, p) for p in persistent), f"{name} shares a buffer"
