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

from typing import TYPE_CHECKING, Any

from pagedviz.core.vllm_support import (
    ENGINE_LABEL,
    INSTALL,
    VLLM_VERSION,
    installed_vllm,
    problems,
    unavailable,
)

if TYPE_CHECKING:
    from pagedviz.core.engine import PagedvizEngine
    from pagedviz.core.scenario import Scenario

__all__ = [
    "ENGINE_LABEL",
    "INSTALL",
    "VLLM_VERSION",
    "installed_vllm",
    "make_vllm_engine",
    "problems",
    "unavailable",
]


def make_vllm_engine(scenario: Scenario, capture: bool = True, **kwargs: Any) -> PagedvizEngine:
    """The engine `vllm` for the scenario (imports vLLM on first use)."""
    from pagedviz.core.vllm_engine.live import VllmEngine

    return VllmEngine(scenario, capture, **kwargs)
