"""Recordings shipped with pagedviz: made with pagedviz.record on vLLM 0.33.0's own Scheduler,
driven on the CPU as the differential suite drives it (tests/fidelity/test_record.py rebuilds
each and checks the shipped file is what the recorder writes today).

- real-vllm-preemption.jsonl: the demo-preemption preset's requests on vLLM's synchronous
  Scheduler (V1 runner): a tight KV pool, a preemption and its recompute.
- real-vllm-hybrid.jsonl: a hybrid model on vLLM's synchronous Scheduler with its hybrid KV cache
  manager on, as a GPU server runs it (V1 runner): layer 0 full attention, layer 1 a sliding window
  of 8 tokens, two KV cache groups over one pool (the issue's example first); the window drops
  blocks to the null block, the full group takes them, a preemption and its recompute
  (tests/support/hybrid_recording.py makes it; tests/fidelity/test_record_hybrid.py checks it).
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
    "real-vllm-hybrid": {
        "file": "real-vllm-hybrid.jsonl",
        "made_by": "tests/support/hybrid_recording.py",
        "title": "a real vLLM schedule of a hybrid model: a sliding window beside full attention, "
        "two KV cache groups (vLLM 0.33.0's hybrid KV cache manager, recorded)",
        "title_zh": "真实的 vLLM 调度：混合模型，滑动窗口层与全注意力层并存，两个 KV 缓存组"
        "（vLLM 0.33.0 的混合 KV 缓存管理器录制）",
    },
}


def example_bytes(name: str) -> bytes:
    """The shipped recording's bytes (KeyError: no such example)."""
    return files(__name__).joinpath(EXAMPLES[name]["file"]).read_bytes()
