"""The upstream code each flavour mirrors, by version or commit (README "Fidelity").

The vllm flavour (and the scheduling under ascend) follows vLLM 0.33.0, checked step by step
against that release's own code by tests/fidelity; nanovllm follows nano-vllm at the commit below
and ascend's attention state and mask follow vllm-ascend at the commit below.
"""

from __future__ import annotations

from typing import Protocol

from pagedviz.core.scenario_parts import EngineConfig

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

# vLLM 0.33.0 has two GPU model runners; every view says which one it shows
RUNNERS = {
    "v1": "V1 runner (gpu_model_runner.py)",
    "v2": "Model Runner V2 (vllm/v1/worker/gpu/)",
}


def describe(flavor: str | None = None, runner: str | None = None) -> str:
    """In words, what a flavour mirrors ("vLLM 0.33.0 · V1 runner (gpu_model_runner.py)",
    "vLLM 0.33.0 · V1 runner (gpu_model_runner.py) · vllm-ascend 182b75e": the ascend flavour
    prepares its inputs with vLLM's V1 runner, core/engine.py), or every flavour and both of
    vLLM's runners."""
    keys = {"vllm": ["vllm"], "ascend": ["vllm", "ascend"], "nanovllm": ["nanovllm"]}.get(
        flavor or "", list(UPSTREAM)
    )
    parts = [f"{NAMES[k]} {UPSTREAM[k].get('version') or UPSTREAM[k]['commit'][:7]}" for k in keys]
    if flavor == "vllm" and runner in RUNNERS:
        parts.insert(1, RUNNERS[runner])
    elif flavor == "ascend":
        parts.insert(1, RUNNERS["v1"])
    elif flavor is None:
        parts.insert(1, f"{RUNNERS['v2']} by default, {RUNNERS['v1']} on request")
    return " · ".join(parts)


class _Flavoured(Protocol):
    """What upstream_of reads of a scenario (core/scenario.py's Scenario)."""

    flavor: str
    config: EngineConfig


def upstream_of(scenario: _Flavoured) -> dict[str, dict[str, str]]:
    """UPSTREAM, with the runner a vllm-flavour scenario runs named under "vllm"."""
    out = {k: dict(v) for k, v in UPSTREAM.items()}
    if scenario.flavor == "vllm":
        out["vllm"]["runner"] = RUNNERS[scenario.config.model_runner]
    return out
