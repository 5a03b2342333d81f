"""Recordings shipped with pagedviz: made with pagedviz.record on vLLM 0.33.0's own Scheduler,
driven on the CPU as the differential suite drives it (tests/fidelity/test_record.py rebuilds
each and checks the shipped file is what the recorder writes today).

- real-vllm-preemption.jsonl: the demo-preemption preset's requests on vLLM's synchronous
  Scheduler (V1 runner): a tight KV pool, a preemption and its recompute.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

EXAMPLES: dict[str, dict[str, Any]] = {
    "real-vllm-preemption": {
        "file": "real-vllm-preemption.jsonl",
        "preset": "demo-preemption",
        "title": "a real vLLM schedule: vLLM 0.33.0's own Scheduler, recorded (preemption)",
        "title_zh": "真实的 vLLM 调度：vLLM 0.33.0 自己的 Scheduler 录制的运行（含抢占）",
    },
}


def example_bytes(name: str) -> bytes:
    """The shipped recording's bytes (KeyError: no such example)."""
    return files(__name__).joinpath(EXAMPLES[name]["file"]).read_bytes()
