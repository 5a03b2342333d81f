"""The engine `vllm` (`"engine": "vllm"` in a scenario, `pagedviz run --engine vllm`): vLLM 0.33.0's
own code as a pagedviz engine, in-process on the CPU. Needs the `vllm` extra
(`pip install 'pagedviz[vllm]'`); this package imports vLLM only when the engine first runs
(`make_vllm_engine`), so pagedviz imports and runs its own engine without it.

What is vLLM's: the scheduling (vLLM's `Scheduler`, its `KVCacheManager`, `BlockPool` and free
queue: scheduled tokens, block ids, preemptions, the free queue's order), and the final arrays of
each step: V1's `InputBatch` + `GPUModelRunner._update_states` / `_prepare_inputs` (v1.py), or
Model Runner V2's `RequestState` / `BlockTables` / `InputBuffers`, the runner's own methods and its
Triton kernels under Triton's interpreter (v2.py). What is pagedviz's: each vLLM scheduler output
is also replayed through pagedviz's runner (core/replay.py's path), which gives the stage-by-stage
intermediates the page teaches with, the tiny model's forward, K/V and sampled tokens; vLLM's
arrays then replace pagedviz's in the trace, and any difference is written into the step
(live.py).

Modules, one concept each:
- env.py: the process-wide settings vLLM needs, made once when the engine first runs.
- loop.py: the engine core's batch-queue loop (`EngineCore.step_with_batch_queue`).
- config.py: vLLM's `VllmConfig` for a scenario (`scheduler_config`), for V1 and V2 alike; which
  scenario field is which vLLM setting is core/vllm_settings.py's table (the import reads a
  recording's header with it).
- groups.py: vLLM's KV cache groups for the scenario's layers, planned by vLLM.
- v1.py: vLLM's scheduler and V1 runner methods for a scenario.
- v2_worker.py, v2.py: the scheduler built for Model Runner V2, and V2's worker state and kernels.
- causes.py: the causes oracle, why each request waits and for whom each was preempted, from
  vLLM's own scheduler (watched calls and counterfactual copies; sched_copy.py copies a scheduler).
- live.py: the engine itself, `VllmEngine`: pagedviz's engine (`PagedvizEngine`) whose scheduler,
  causes and final arrays are vLLM's.

What is stubbed, and why (each module's docstring has the details):
- `ModelConfig` (env.TinyModelConfig): a real one needs Hugging Face files; the scheduler and the
  runners read a dozen plain attributes (a text-only decoder, no M-RoPE, no tokenizer).
- The KV cache specs: one per layer of `config.layer_types` (a full-attention layer, or a sliding
  window of `config.sliding_window` tokens; null: every layer full attention), each 1 KV head of
  size 8, float32, the scenario's block size: the smallest page that gives each group its block
  table. vLLM's own planner groups them with its hybrid KV cache manager on (groups.py), so a
  hybrid model runs with one block table and one slot_mapping per group, as on a GPU server. No
  weights, no KV tensors on vLLM's side.
- V1 (v1.py): `GPUModelRunner.__init__` (it loads a model): a runner object holding only the
  fields `_update_states` / `_prepare_inputs` read; the pipeline-parallel group (one rank);
  `_to_list` (`tolist()` on the CPU). `compute_slot_mapping`, a Triton kernel in 0.33, runs under
  Triton's interpreter (without Triton: read off vLLM's own block table with the kernel's formula).
- V2 (v2.py, v2_worker.py): `GPUModelRunner.__init__`: a stub with the three state objects and
  `None` for every optional feature; the model and LoRA states (no-ops); CUDA graphs (vLLM's own
  `CudaGraphManager` without its `__init__`, graphs counted as captured, so dispatch and padding
  are vLLM's); vLLM's CPU patch set on torch (undone); Triton's interpreter takes integer masks
  as bool (a GPU treats any nonzero lane as on).
- The sampler: the sampled tokens are pagedviz's (its tiny model's greedy tokens, or its
  synthetic sampler without a model); vLLM's own bookkeeping decides which rows keep one. With
  n-gram drafts (V2 only: the engine does not drive V1's CPU `NgramProposer` yet) V2's own
  rejection sampler verifies the drafts over one-hot logits of pagedviz's target tokens, and V2's
  `NgramGPUSpeculator` proposes.
- The front end: a request with n > 1 fans out through vLLM's own `ParentRequest` as
  `LLMEngine.add_request` does (arrivals.py); arrival times are the step plus a millionth per
  place in the scenario's list, so the priority policy breaks ties as a server receiving them in
  order would.
- The engine core: only its step, or with async scheduling its batch-queue loop (loop.py, a batch
  queue of 2); no executor, no processes. vLLM's runner runs each batch at once, in order (as the
  device does); V1's runner runs synchronously, so under async scheduling its input ids are the
  device's (`input_ids_device`), not the CPU's placeholders.
"""

from __future__ import annotations

import importlib.util
from importlib import metadata
from typing import TYPE_CHECKING, Any

from pagedviz.core.upstream import UPSTREAM

if TYPE_CHECKING:
    from pagedviz.core.engine import PagedvizEngine
    from pagedviz.core.scenario import Scenario
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


def make_vllm_engine(scenario: Scenario, capture: bool = True, **kwargs: Any) -> PagedvizEngine:
    """The engine `vllm` for the scenario (imports vLLM on first use)."""
    from pagedviz.core.vllm_engine.live import VllmEngine

    return VllmEngine(scenario, capture, **kwargs)
