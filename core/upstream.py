"""The upstream code each flavour mirrors, by version or commit (README "Fidelity").

The vllm flavour (and the scheduling under ascend) follows vLLM 0.33.0, checked step by step
against that release's own code by tests/fidelity; nanovllm follows nano-vllm at the commit below
and ascend's attention state and mask follow vllm-ascend at the commit below.
"""

from __future__ import annotations

UPSTREAM: dict[str, dict[str, str]] = {
    "vllm": {"project": "vllm", "version": "0.33.0"},
    "nanovllm": {
        "project": "GeeeekExplorer/nano-vllm",
        "commit": "bb823b3e06983d71485a8e1f23715ebd87d98ef8",
    },
    "ascend": {
        "project": "vllm-project/vllm-ascend",
        "commit": "182b75ea84ff13ece27b57391331ef8935410aea",
    },
}

NAMES = {"vllm": "vLLM", "nanovllm": "nano-vllm", "ascend": "vllm-ascend"}


def describe(flavor: str | None = None) -> str:
    """In words, what a flavour mirrors ("vLLM 0.33.0 · vllm-ascend 182b75e"), or every flavour."""
    keys = {"vllm": ["vllm"], "ascend": ["vllm", "ascend"], "nanovllm": ["nanovllm"]}.get(
        flavor or "", list(UPSTREAM)
    )
    return " · ".join(f"{NAMES[k]} {UPSTREAM[k].get('version') or UPSTREAM[k]['commit'][:7]}" for k in keys)
