"""Drives vLLM 0.33.0's own scheduler, block pool and persistent batch on the CPU.

Everything that decides a number is vLLM's: `Scheduler` (with its `KVCacheManager`, `BlockPool`
and `FreeKVCacheBlockQueue`), `InputBatch` and its `MultiGroupBlockTable`, and the model runner's
`_update_states` / `_prepare_inputs`, called on a runner object that holds only the fields those
two methods read. This module builds vLLM's scheduler (from its configs: config.py), feeds requests
in at their arrival steps, hands the sampled tokens (taken from pagedviz, so both sides see the
same sequences) back to `Scheduler.update_from_output`, and reads the results out.

What is stubbed, and why:
- `ModelConfig`: building one needs a Hugging Face config and tokenizer (files or a download).
  The scheduler and the runner read a dozen plain attributes of it; `env.TinyModelConfig` holds them
  (a text-only decoder, no M-RoPE, `max_model_len`, the vocabulary size). No weights anywhere.
- The KV cache specs: one `FullAttentionSpec` or `SlidingWindowSpec` per layer (1 KV head of size
  8, float32), grouped by vLLM's own planner (groups.py): the smallest configuration that gives
  each KV cache group its block table with the scenario's block size.
- The pipeline-parallel group (`get_pp_group`): `_update_states` asks whether this is the last
  rank; without `torch.distributed` initialised the answer is fixed to yes (a single process).
- `_to_list`: vLLM's copies the sampled ids through pinned memory and waits on a device event;
  on the CPU it is `tolist()`.
- `compute_slot_mapping`: in 0.33 it is only a Triton kernel on the device block table
  (`ComputeSlotMappingKernel`, vllm/v1/worker/block_table.py). Where Triton is installed it runs
  under Triton's interpreter (env.py), once per KV cache group, as `_prepare_inputs` calls it
  (`MultiGroupBlockTable.compute_slot_mapping`), and each group's slot_mapping is the kernel's
  output. Without Triton (or with Triton imported before the engine, without its interpreter)
  the kernel is skipped and slot_mapping is read off vLLM's own block table of each group with
  the kernel's formula (`block_table[req, pos // block_size] * block_size + pos % block_size`).

With several KV cache groups (`config.layer_types`, groups.py) the `InputBatch` holds one
`BlockTable` per group in its `MultiGroupBlockTable`, sized as `may_reinitialize_input_batch`
sizes them; the arrays of group g >= 1 carry `_g<g>` after vLLM's name (`block_table_g1`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedviz.core.vllm_engine import env as vllm_env

vllm_env.prepare()  # before vLLM: Triton usable, V1 pinned by default (env.py)
import torch  # noqa: E402
from vllm.config import VllmConfig  # noqa: E402
from vllm.triton_utils import HAS_TRITON  # noqa: E402
from vllm.utils.hashing import sha256_cbor  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import KVCacheConfig  # noqa: E402
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput, SamplerOutput  # noqa: E402
from vllm.v1.pool.late_interaction_runner import LateInteractionRunner  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402
from vllm.v1.worker import gpu_model_runner  # noqa: E402
from vllm.v1.worker.gpu_input_batch import InputBatch  # noqa: E402
from vllm.v1.worker.gpu_model_runner import GPUModelRunner  # noqa: E402

from pagedviz.core.scenario import Scenario  # noqa: E402
from pagedviz.core.vllm_engine import groups  # noqa: E402
from pagedviz.core.vllm_engine.arrivals import ArrivalFeed  # noqa: E402
from pagedviz.core.vllm_engine.config import scheduler_config  # noqa: E402
from pagedviz.core.vllm_engine.loop import EngineCoreLoop, LoopStep  # noqa: E402
from pagedviz.core.vllm_engine.take import group_name  # noqa: E402


def kv_cache_config(scenario: Scenario, vc: VllmConfig | None = None) -> KVCacheConfig:
    """vLLM's KV cache groups for the scenario's layers, planned by vLLM (groups.py)."""
    return groups.plan(vc if vc is not None else scheduler_config(scenario), scenario.config)


class VllmSide(ArrivalFeed):
    """vLLM's Scheduler for a scenario, stepped with externally chosen sampled tokens."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.config = scheduler_config(scenario)
        cfg = scenario.config
        init_none_hash(sha256_cbor)
        self.block_hasher = get_request_block_hasher(cfg.block_size, sha256_cbor)
        scheduler_cls = AsyncScheduler if cfg.async_scheduling else Scheduler
        self.kv_cache_config = kv_cache_config(scenario, self.config)
        self.scheduler = scheduler_cls(
            vllm_config=self.config,
            kv_cache_config=self.kv_cache_config,
            structured_output_manager=StructuredOutputManager(self.config),
            block_size=cfg.block_size,
        )
        self.feed(scenario)
        self.loop: EngineCoreLoop | None = None
        self.runner = _Runner(self.config, scenario, self.kv_cache_config)
        if not self.runner.slot_kernel:
            # the kernel cannot run here: read slot_mapping off the block table (module docstring)
            self.runner.input_batch.block_table.compute_slot_mapping = lambda *a, **k: None  # type: ignore[method-assign]

    def async_step(self, sampled: dict[str, int]) -> tuple[LoopStep, dict[str, Any]]:
        """One `step_with_batch_queue` (loop.py): the batch, if one is scheduled, runs
        through the runner at once with `sampled` (pagedviz's tokens of the same step); its output
        reaches `update_from_output` when the loop pops it. Returns what the loop did and, for a
        scheduled batch, what `step` returns."""
        self.step_no += 1
        self.add_arrivals()
        got: dict[str, Any] = {}

        def execute(out: Any) -> ModelRunnerOutput:
            got["block_ids"] = self.block_ids(out)
            got["arrays"] = self.runner.step(out)
            got["free_block_queue"] = self.free_queue()
            got["sampled"] = {}
            if not out.total_num_scheduled_tokens:
                return EMPTY_MODEL_RUNNER_OUTPUT
            result = self.runner.sampled(out, sampled)
            got["sampled"] = {r: t[0] for r, t in zip(result.req_ids, result.sampled_token_ids) if t}
            return result

        if self.loop is None:
            self.loop = EngineCoreLoop(self.scheduler, execute)
        self.loop.execute = execute
        return self.loop.step(self.step_no), got

    @property
    def has_work(self) -> bool:
        return bool(self.arrivals) or (self.loop is not None and self.loop.has_work())

    def block_ids(self, out: Any) -> dict[str, list[list[int]]]:
        """Every scheduled request's blocks, one list per KV cache group, right after `schedule()`
        (`KVCacheManager.get_block_ids`)."""
        km = self.scheduler.kv_cache_manager
        return {rid: [list(g) for g in km.get_block_ids(rid)] for rid in out.num_scheduled_tokens}

    def free_queue(self) -> list[int]:
        q = self.scheduler.kv_cache_manager.block_pool.free_block_queue
        return [b.block_id for b in q.get_all_free_blocks()]

    def step(self, sampled: dict[str, int]) -> tuple[Any, dict[str, Any]]:
        """One engine step: schedule, update the batch and prepare inputs, then take `sampled`
        (pagedviz's tokens) through the runner's bookkeeping into `update_from_output`. Returns
        the scheduler output, the arrays, the free queue as the step saw it, what vLLM kept and
        each scheduled request's blocks per group."""
        out = self.schedule()
        block_ids = self.block_ids(out)
        arrays = self.runner.step(out)
        free_queue = self.free_queue()
        kept: dict[str, int] = {}
        if out.total_num_scheduled_tokens:
            result = self.runner.sampled(out, sampled)
            kept = {r: t[0] for r, t in zip(result.req_ids, result.sampled_token_ids) if t}
            self.scheduler.update_from_output(out, result)
        got = {"arrays": arrays, "free_block_queue": free_queue, "sampled": kept, "block_ids": block_ids}
        return out, got


class _Runner(GPUModelRunner):
    """vLLM's GPUModelRunner with only the fields `_update_states` and `_prepare_inputs` read,
    on the CPU (its __init__ would load a model and size the KV cache on a GPU)."""

    def __init__(self, vc: VllmConfig, scenario: Scenario, kv: KVCacheConfig) -> None:  # noqa: D107
        cfg = scenario.config
        self.vllm_config = vc
        self.model_config = vc.model_config
        self.cache_config = vc.cache_config
        self.scheduler_config = vc.scheduler_config
        self.lora_config = None
        self.speculative_config = None
        self.device = torch.device("cpu")
        self.is_pooling_model = False
        self.enable_prompt_embeds = False
        self.uses_mrope = False
        self.use_async_scheduling = False
        self.use_async_spec_decode = False
        self.num_spec_tokens = 0
        self._pp_recv_work = None
        self.valid_sampled_token_count_gpu = None
        self.num_accepted_tokens_event = None
        self.requests = {}
        self.num_prompt_logprobs = {}
        self.late_interaction_runner = LateInteractionRunner()
        self.kv_cache_config = kv
        # vLLM's slot-mapping kernel runs under Triton's interpreter where Triton works (env.py)
        self.slot_kernel = HAS_TRITON and vllm_env.triton_problem() is None
        # FlashAttention's metadata builder asks for no reordering of the batch
        self.reorder_batch_threshold = None
        self.max_num_reqs = cfg.max_num_reqs
        self.max_num_tokens = cfg.max_num_batched_tokens
        self.max_model_len = cfg.max_model_len
        self.input_batch = InputBatch(
            max_num_reqs=cfg.max_num_reqs,
            max_model_len=cfg.max_model_len,
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            device=self.device,
            vocab_size=cfg.vocab_size,
            # one BlockTable per KV cache group, sized as may_reinitialize_input_batch sizes them
            block_sizes=groups.group_block_sizes(kv),
            max_num_blocks_per_req=[
                g.kv_cache_spec.max_num_blocks_per_req(vc, cfg.max_model_len) for g in kv.kv_cache_groups
            ],
        )
        n, T = cfg.max_num_reqs, cfg.max_num_batched_tokens
        self.input_ids = self._make_buffer(T, dtype=torch.int32)
        self.positions = torch.zeros(T, dtype=torch.int64)
        self.query_start_loc = self._make_buffer(n + 1, dtype=torch.int32)
        self.seq_lens = torch.zeros(n, dtype=torch.int32)
        self.optimistic_seq_lens_cpu = torch.zeros(n, dtype=torch.int32)
        self.num_computed_tokens = torch.zeros(n, dtype=torch.int32)
        self.prev_num_draft_tokens = self._make_buffer(n, dtype=torch.int32)
        self.req_indices = self._make_buffer(T, dtype=torch.int64)
        self.prev_positions = self._make_buffer(n, dtype=torch.int64)
        self.num_scheduled_tokens = self._make_buffer(n, dtype=torch.int32)
        self.discard_request_mask = self._make_buffer(n, dtype=torch.bool)
        self.num_accepted_tokens = self._make_buffer(n, dtype=torch.int32)
        self.is_token_ids = self._make_buffer(T, dtype=torch.bool)
        size = max(n + 1, T)
        self.arange_np = np.arange(size, dtype=np.int64)
        self.query_pos = self._make_buffer(size, dtype=torch.int64)

    def step(self, out: Any) -> dict[str, np.ndarray]:
        """`_update_states` then `_prepare_inputs` on vLLM's scheduler output; the arrays they made."""
        self._update_states(out)
        ib = self.input_batch
        num_reqs = ib.num_reqs
        arrays: dict[str, np.ndarray] = {
            "req_ids": np.array(ib.req_ids[:num_reqs], dtype=object),
            "token_ids_cpu": ib.token_ids_cpu.copy(),
        }
        G = len(self.kv_cache_config.kv_cache_groups)
        for g in range(G):  # MultiGroupBlockTable: one BlockTable per group
            arrays[group_name("block_table", g)] = ib.block_table[g].get_numpy_array().copy()
        if not out.total_num_scheduled_tokens:
            return arrays
        num_scheduled = np.array([out.num_scheduled_tokens[r] for r in ib.req_ids[:num_reqs]], dtype=np.int32)
        arrays["num_computed_tokens_cpu"] = ib.num_computed_tokens_cpu[:num_reqs].copy()
        logits_indices, _, _ = self._prepare_inputs(out, num_scheduled)
        T = out.total_num_scheduled_tokens
        positions = self.positions[:T].numpy().copy()
        req_indices = self.req_indices.np[:T].copy()
        arrays.update(
            num_scheduled_tokens=num_scheduled,
            req_indices=req_indices,
            positions=positions,
            input_ids=self.input_ids.cpu[:T].numpy().copy(),
            query_start_loc=self.query_start_loc.np[: num_reqs + 1].copy(),
            seq_lens=self.seq_lens[:num_reqs].numpy().copy(),
            discard_request_mask=self.discard_request_mask.np[:num_reqs].copy(),
            logits_indices=logits_indices.numpy().copy(),
        )
        for g in range(G):
            table = ib.block_table[g]
            if self.slot_kernel:  # vLLM's kernel wrote it (under Triton's interpreter)
                slots = table.slot_mapping.gpu[:T].numpy().copy()
            else:  # the kernel's formula on vLLM's own block table of the group (module docstring)
                bs, bt = table.block_size, arrays[group_name("block_table", g)]
                slots = bt[req_indices, positions // bs].astype(np.int64) * bs + positions % bs
            arrays[group_name("slot_mapping", g)] = slots
        return arrays

    def _to_list(self, sampled_token_ids: torch.Tensor) -> list[list[int]]:
        # vLLM's copies through pinned memory and waits on a device event; on the CPU, tolist
        return sampled_token_ids.tolist()

    def sampled(self, out: Any, tokens: dict[str, int]) -> ModelRunnerOutput:
        """vLLM's `_bookkeeping_sync` with the tokens pagedviz sampled (0 in the rows pagedviz
        did not sample: vLLM's own discard mask must clear exactly those)."""
        ib = self.input_batch
        ids = [[tokens.get(rid, 0)] for rid in ib.req_ids[: ib.num_reqs]]
        sampler_output = SamplerOutput(torch.tensor(ids, dtype=torch.int32), None)
        T = out.total_num_scheduled_tokens
        _, _, _, valid, _, req_ids, index, _ = self._bookkeeping_sync(
            out, sampler_output, None, torch.zeros(T, 1), T
        )
        return ModelRunnerOutput(req_ids=req_ids, req_id_to_index=index, sampled_token_ids=valid)


class _SingleRank:
    is_last_rank = True
    is_first_rank = True
    world_size = 1
    rank_in_group = 0


gpu_model_runner.get_pp_group = _SingleRank  # type: ignore[assignment]
