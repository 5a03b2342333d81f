"""The engine `vllm` (core/vllm_engine/live.py) against pagedviz's own engine (tests/fidelity): the
same scenario run by both, and the check that the live trace, made of vLLM 0.33.0's own scheduling
and final arrays, equals pagedviz's own field for field (the timings aside, and the block hashes,
which are vLLM's own hash function's: the same blocks hold one).

Callers check first that vLLM is installed (tests.support.fidelity_env.require_vllm).
"""

from __future__ import annotations

from typing import Any

from pagedviz.core import Scenario, make_engine
from pagedviz.core.vllm_engine import ENGINE_LABEL


def both(d: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """The scenario's trace from pagedviz's own engine and from the engine `vllm`."""
    own = list(make_engine(Scenario.from_dict(d)).run())
    live = list(make_engine(Scenario.from_dict({**d, "engine": "vllm"})).run())
    return own, live


def assert_same_trace(own: list[Any], live: list[Any]) -> None:
    """The live trace is pagedviz's own, step for step, and says no difference from vLLM."""
    assert len(own) == len(live), "the runs have different lengths"
    for a, b in zip(own, live):
        where = f"step {a.step}"
        fa, fb = a.forward, b.forward
        assert fb.pop("engine") == ENGINE_LABEL, where
        taken = fb.pop("vllm_arrays")
        assert "vllm_differences" not in fb, f"{where}: {fb['vllm_differences']}"
        assert fa == fb, where
        if not a.idle:
            assert {"positions", "slot_mapping", "query_start_loc", "seq_lens"} <= set(taken), where
        da, db = a.to_dict(), b.to_dict()
        for key in da:
            if key == "timing_us":
                continue
            if key == "kv_cache":
                ka, kb = dict(da[key]), dict(db[key])
                assert ka.pop("block_hash").keys() == kb.pop("block_hash").keys(), f"{where}: hashed blocks"
                assert ka == kb, f"{where}: kv_cache"
            else:
                assert da[key] == db[key], f"{where}: {key}"
