"""Rewrite the golden traces after an intended engine change: python tests/golden/regen.py"""

from __future__ import annotations

import json
from pathlib import Path

from pagedviz.core import Scenario, make_engine
from pagedviz.core.presets import preset_dict

GOLDEN = [
    "seed-001",
    "seed-001-ascend",
    "seed-002",
    "seed-004",
    "demo-prefix-cache",
    "demo-preemption",
    "nanovllm-block-tables",
    "nanovllm-prefix-cache",
    "nanovllm-chunked-prefill",
    "ascend-prefill-cache-hit",
]
GOLDEN += ["demo-cudagraph-padding", "demo-max-model-len", "demo-ngram-spec-decode", "demo-async-scheduling"]
GOLDEN += ["demo-mrope", "ascend-spec-decoding", "demo-spec-decode-metadata"]


def stable_trace(preset: str) -> list[dict]:
    """The preset's steps on the CPU, without what varies run to run (timings, float error)."""
    d = preset_dict(preset)
    d["config"]["device"] = "cpu"
    steps = []
    for t in make_engine(Scenario.from_dict(d)).run():
        s = t.to_dict()
        s.pop("timing_us")
        diff = s["forward"].pop("paged_vs_dense_max_abs_diff", None)
        s["forward"]["dense_check_passed"] = diff is not None and diff < 1e-4
        steps.append(s)
    return steps


if __name__ == "__main__":
    for preset in GOLDEN:
        path = Path(__file__).with_name(f"{preset}.json")
        path.write_text(json.dumps(stable_trace(preset), indent=None, separators=(",", ":")) + "\n")
        print(f"wrote {path.name}")
