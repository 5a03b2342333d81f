"""Whether the engine `vllm` can run here and on a scenario: the vLLM release it runs, the pip
command that installs it, and what it refuses (`problems`, which core/rules.py reports at
validation). It imports neither vLLM nor the engine, so validation asks it without importing
core/vllm_engine/ (which holds the engine itself)."""

from __future__ import annotations

import importlib.util
from importlib import metadata
from typing import TYPE_CHECKING

from pagedviz.core.upstream import UPSTREAM

if TYPE_CHECKING:
    from pagedviz.core.scenario_parts import EngineConfig, RequestSpec

VLLM_VERSION = UPSTREAM["vllm"]["version"]
INSTALL = "pip install 'pagedviz[vllm]'"
# the marker every step of a live run carries (trace.forward["engine"]) and the page shows
ENGINE_LABEL = f"vllm {VLLM_VERSION}"


def installed_vllm() -> str | None:
    """The version of the vLLM installed here (None: not installed), found without importing it."""
    try:
        if importlib.util.find_spec("vllm") is None:
            return None
    except (ImportError, ValueError):  # a blocked or half-imported vLLM counts as absent
        return None
    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return "unknown"


def unavailable() -> str | None:
    """Why the engine `vllm` cannot run here (None: it can), with the pip command that enables it."""
    version = installed_vllm()
    if version is None:
        return f"the engine vllm runs vLLM {VLLM_VERSION}'s own code, which is not installed here: {INSTALL}"
    if version.split("+")[0] != VLLM_VERSION:
        return f"the engine vllm runs vLLM {VLLM_VERSION}'s own code; vLLM {version} is installed: {INSTALL}"
    return None


def problems(
    flavor: str, config: EngineConfig, requests: tuple[RequestSpec, ...] | list[RequestSpec]
) -> list[tuple[str, str]]:
    """What the engine `vllm` cannot run in this scenario, as (field, message) pairs; empty when
    it can. Without vLLM installed, only that (naming the field `engine`)."""
    why = unavailable()
    if why:
        return [("engine", why)]
    out: list[tuple[str, str]] = []
    if flavor != "vllm":
        out.append(
            ("flavor", f"the engine vllm runs vLLM's own code: the vllm flavour only (got {flavor!r})")
        )
    if config.device not in ("auto", "cpu"):
        out.append(
            (
                "config.device",
                f"the engine vllm runs in-process on the CPU: cpu or auto (got {config.device!r})",
            )
        )
    if config.num_speculative_tokens and config.model_runner == "v1":
        out.append(
            (
                "config.num_speculative_tokens",
                "the engine vllm runs vLLM's n-gram drafter on Model Runner V2 only: "
                "use model_runner v2, or 0",
            )
        )
    if config.free_queue_order != "lifo":
        out.append(("config.free_queue_order", "vLLM 0.33's free queue is lifo (fifo is an older vLLM's)"))
    if config.long_prefill_cap_lone_request:
        out.append(
            ("config.long_prefill_cap_lone_request", "an older vLLM's policy: vLLM 0.33 has it off (false)")
        )
    for i, r in enumerate(requests):
        if r.image is not None:
            out.append(
                (f"requests[{i}].image", "M-RoPE (an image) is not run by the engine vllm: leave it out")
            )
            break
    if config.model_runner == "v2" and importlib.util.find_spec("triton") is None:
        out.append(
            (
                "config.model_runner",
                f"Model Runner V2 runs its Triton kernels under Triton's interpreter; Triton is not "
                f"installed ({INSTALL} installs it), or use v1",
            )
        )
    return out
