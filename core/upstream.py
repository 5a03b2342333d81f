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
