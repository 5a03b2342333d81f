"""A trace owns its arrays: recording is cheap (fresh arrays are kept, views of the runner's
persistent buffers are copied once, entries are built when first read), and nothing the engine
does in later steps changes a trace already handed out."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pagedviz.core import load_preset, make_engine
from pagedviz.core.presets import list_presets
from pagedviz.core.trace import POOL_LISTS

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


@pytest.mark.parametrize("preset", PRESETS)
def test_a_compacted_trace_reads_and_serialises_as_before(preset: str) -> None:
    for t in make_engine(load_preset(preset)).run():
        before = json.dumps(t.to_dict(), default=str)
        owners = dict(t.kv_cache.get("owners", {}))
        pool_lists = {k: t.kv_cache[k] for k in POOL_LISTS if k in t.kv_cache}
        t.compact()
        for key, values in pool_lists.items():  # one entry a block: int32 arrays, same values
            assert t.kv_cache[key].dtype == np.int32 and t.kv_cache[key].tolist() == values
        compact = t.kv_cache.get("owners", {})
        assert list(compact.items()) == list(owners.items())  # same keys, order and lists
        for key in [*owners, "999999", "x", "01"]:
            assert (key in compact) == (key in owners) and compact.get(key) == owners.get(key)
        assert json.dumps(t.to_dict(), default=str) == before


def test_block_owners_take_a_fraction_of_the_dict_memory() -> None:
    from pagedviz.app.run import measured_bytes
    from pagedviz.core.trace import BlockOwners

    owners = {str(b): [str(b % 300)] + ([str(b % 7)] if b % 5 == 0 else []) for b in range(4000, 0, -1)}
    compact = BlockOwners(owners)
    assert dict(compact) == owners and list(compact) == list(owners)
    assert measured_bytes(compact) * 5 < measured_bytes(owners)
