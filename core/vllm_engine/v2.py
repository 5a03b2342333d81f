"""Drives vLLM 0.33.0's scheduler built for Model Runner V2, and V2's own worker state
and Triton kernels, on the CPU.

Everything that decides a number is vLLM's:
- `Scheduler` (with its `KVCacheManager`, `BlockPool`, `FreeKVCacheBlockQueue`), built from a
  `VllmConfig` whose `use_v2_model_runner` is true (config/vllm.py: the env var
  `VLLM_USE_V2_MODEL_RUNNER`, read through vllm.envs, wins over every default). The scheduler
  reads the property once, in `__init__`, so the env var is set to 1 only while the config and
  the scheduler are built (the V1 side in the same process keeps 0, see env.py). With it
  the scheduler sends resumed requests as new ones with `prefill_token_ids` and fills
  `preempted_req_ids`.
- V2's `RequestState` (gpu/states.py), `BlockTables` (gpu/block_table.py) and `InputBuffers`
  (gpu/input_batch.py), sized as `GPUModelRunner.__init__` sizes them.
- `GPUModelRunner`'s own methods (gpu/model_runner.py), called unbound on `RunnerStub`:
  `finish_requests` (with `_remove_request`), `add_requests`, `update_requests`,
  `gather_batch_req_state` (which calls `sort_batch_req_ids`), `prepare_inputs`, `prepare_attn`
  (the block-table gather and the slot-mapping kernel) and `postprocess_sampled` (`post_update`),
  with `get_num_sampled_and_rejected` deciding which rows sample.
- Every Triton kernel those call, run by Triton's interpreter (`TRITON_INTERPRET=1`).

What is stubbed, and why:
- `GPUModelRunner.__init__` loads a model, sizes a KV cache on a GPU and builds samplers,
  speculators, CUDA-graph managers. `RunnerStub` holds only the fields the methods above read:
  the three state objects, `max_num_reqs`, `decode_query_len` (1 + num_speculative_tokens),
  `device`, `use_pp`/`is_last_pp_rank` (a single rank; `is_last_pp_rank=False` skips the
  sampler's and prompt-logprobs worker's bookkeeping, which needs a model), and `None` for every
  optional feature it checks (pooling, pipeline-parallel handler, encoder cache, prompt-logprobs
  worker, adaptive verification, sampler, context parallelism, fast prefill, block zeroer).
- `model_state` and `lora_state`: no-ops. The default model state only keeps M-RoPE positions
  and prompt embeddings (neither is modelled); LoRA is off. `num_new_sampled_tokens_per_step`
  is 1, the default model state's value.
- `ModelConfig`: `env.TinyModelConfig`, shared with the V1 side (building a real one needs
  Hugging Face files); its `rswa_window = None` (no R-SWA) is the one field V2's `prepare_inputs`
  adds to what V1 reads.
- CUDA graphs: nothing is captured. With `cudagraph_capture_sizes` set, vLLM's own
  `CudaGraphManager` (gpu/cudagraph_utils.py) is built without its `__init__` (which asks for a
  device graph pool and the pipeline-parallel group): the fields `_init_candidates` and
  `dispatch` read are set as `__init__` sets them, for FULL_AND_PIECEWISE (the mode pagedviz
  models: FULL uniform-decode graphs and PIECEWISE mixed ones), one rank, no LoRA, no
  microbatching, and the graphs count as captured. `dispatch` then picks the descriptor
  `execute_model` would (eager, no padding, without sizes), and `prepare_inputs` /
  `prepare_attn` pad as vLLM does for it.
- Speculative decoding (n-gram): V2's own `NgramGPUSpeculator` proposes after `post_update`
  into `RequestState.draft_tokens`, as `sample_tokens` does; the scheduler gets what
  `DraftTokenIds` carries without structured outputs (`-1` placeholders, `update_draft_token_ids`).
  Verification is V2's `gather_draft_sampled` and `rejection_sample` (greedy: temperature 0) over
  one-hot logits of pagedviz's target token at each logits row (`target_token_ids` in the trace).
- The sampler: the sampled token of each row comes from pagedviz's trace, so both sides see the
  same sequences. `get_num_sampled_and_rejected` (vLLM's kernel) zeroes the rows of partial
  prefill chunks; this module feeds the tokens to `post_update` and builds the `ModelRunnerOutput`
  the way `AsyncOutput.get_output` does (each row's tokens cut to `num_sampled`).
- vLLM's CPU patch set `vllm.v1.worker.cpu.shm` (its CPU worker's: `UvaBuffer` as a CPU tensor,
  a CPU `async_tensor_h2d`) is imported for the worker classes; the patches it also makes to
  `torch` itself (placeholder CUDA events and streams, a no-op `pin_memory`) are undone at once,
  since the rest of the test process (pagedviz's CUDA timing) needs the real ones and the methods
  driven here do not use them.
- Where each stand-in lives: v2_worker.py (the imports that must come first, the configs, the
  runner's fields, the CUDA-graph manager); this module drives a step with them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pagedviz.core.vllm_engine import v2_worker

# first: Triton made usable and V2's kernels bound to the interpreter before any other vLLM import
v2_worker.check_triton()
import torch  # noqa: E402
from vllm.config.compilation import CUDAGraphMode  # noqa: E402
from vllm.utils.hashing import sha256_cbor  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, DraftTokenIds, ModelRunnerOutput  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor  # noqa: E402
from vllm.v1.worker.gpu.input_batch import get_num_sampled_and_rejected  # noqa: E402
from vllm.v1.worker.gpu.model_runner import GPUModelRunner  # noqa: E402
from vllm.v1.worker.gpu.spec_decode.rejection_sampler import gather_draft_sampled  # noqa: E402
from vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils import rejection_sample  # noqa: E402

from pagedviz.core.scenario import Scenario  # noqa: E402
from pagedviz.core.vllm_engine.arrivals import ArrivalFeed  # noqa: E402
from pagedviz.core.vllm_engine.config import scheduler_config  # noqa: E402
from pagedviz.core.vllm_engine.env import env as _env  # noqa: E402
from pagedviz.core.vllm_engine.loop import EngineCoreLoop  # noqa: E402
from pagedviz.core.vllm_engine.take import group_name  # noqa: E402
from pagedviz.core.vllm_engine.v2_worker import (  # noqa: E402
    RunnerStub,
    graph_manager,
    kv_cache_config,
    kv_cache_spec,
)

__all__ = [
    "AsyncScheduler",
    "EngineCoreLoop",
    "Scheduler",
    "StructuredOutputManager",
    "V2Step",
    "VllmV2Side",
    "kv_cache_config",
    "kv_cache_spec",
    "scheduler_config",
]


@dataclass
class V2Step:
    """What one engine step looked like on vLLM's side (request-level arrays are batch rows)."""

    out: Any  # vLLM's SchedulerOutput
    new_req_ids: list[str]
    new_prefill_token_ids: dict[str, list[int]]  # read before update_from_output appends
    slots: dict[str, int]  # RequestState.req_id_to_index after finish/add
    free_slots: list[int]  # next handed out first
    req_ids: list[str]  # batch order
    arrays: dict[str, np.ndarray]
    block_rows: list[list[int]]  # gathered block table (group 0), row i: its first cdiv(seq_lens[i], bs)
    sampled: dict[str, int]  # the rows vLLM says sample, with pagedviz's tokens
    slot_state: dict[str, np.ndarray]  # per-slot state after finish/add/update (before the forward)
    padded: dict[str, Any] = field(default_factory=dict)  # the arrays up to the padded sizes
    scalars: dict[str, int] = field(default_factory=dict)  # the attention metadata's counts
    # every KV cache group's gathered block table, as block_rows (sliding groups: entries wholly
    # below the window of the first scheduled token are the null block, as gather_block_tables
    # writes them)
    group_block_rows: list[list[list[int]]] = field(default_factory=list)
    # every scheduled request's blocks per group right after schedule() (get_block_ids)
    block_ids: dict[str, list[list[int]]] = field(default_factory=dict)


class VllmV2Side(ArrivalFeed):
    """vLLM's V2 scheduler and V2 worker state for a scenario, stepped with pagedviz's tokens."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        cfg = scenario.config
        with _env(VLLM_USE_V2_MODEL_RUNNER="1"):
            self.config = scheduler_config(scenario, runner="v2")
            assert self.config.use_v2_model_runner, "vLLM did not choose Model Runner V2"
            init_none_hash(sha256_cbor)
            self.block_hasher = get_request_block_hasher(cfg.block_size, sha256_cbor)
            cls = AsyncScheduler if self.config.scheduler_config.async_scheduling else Scheduler
            self.kv_cache_config = kv_cache_config(scenario, self.config)
            self.scheduler = cls(
                vllm_config=self.config,
                kv_cache_config=self.kv_cache_config,
                structured_output_manager=StructuredOutputManager(self.config),
                block_size=cfg.block_size,
            )
        assert self.scheduler.use_v2_model_runner
        self.runner = RunnerStub(self.config, scenario, self.kv_cache_config)
        self.graphs = graph_manager(self.config, cfg.cudagraph_capture_sizes, self.runner.decode_query_len)
        self.feed(scenario)
        self.loop: Any = None

    def step(self, sampled: dict[str, int], targets: dict[str, list[int]] | None = None) -> V2Step:
        """One engine step: schedule, V2's state updates and input preparation, then the sampled
        tokens (pagedviz's, by request id) through `post_update` into `update_from_output`. With
        speculative decoding, `targets` holds pagedviz's target token at each logits row of each
        request; after the update the scheduler takes the drafts' count (EngineCore.post_step)."""
        out = self.schedule()
        step, result = self.execute(out, sampled, targets)
        if result is not None:  # a step without tokens has no forward; so does this side (as V1's)
            self.scheduler.update_from_output(out, result)
            K = self.runner.num_speculative_steps
            if K:  # DraftTokensHandler.get_draft_tokens without structured outputs
                self.scheduler.update_draft_token_ids(
                    DraftTokenIds(step.req_ids, [[-1] * K for _ in step.req_ids])
                )
        return step

    def async_step(
        self, sampled: dict[str, int], targets: dict[str, list[int]] | None = None
    ) -> tuple[Any, V2Step | None]:
        """One `step_with_batch_queue` (loop.py, the engine core's batch queue of 2
        under async scheduling): a batch, if one is scheduled, runs through V2's methods at once
        with `sampled` (pagedviz's tokens of the same step): the worker runs its batches in order,
        each post_update before the next batch's inputs. Its output reaches `update_from_output`
        when the loop pops it. With speculative decoding `targets` are pagedviz's target tokens of
        the same step; the scheduler is never told the drafts (EngineCore.post_step skips
        update_draft_token_ids under async scheduling: its own placeholders of -1 stand in, and
        the worker keeps the real drafts in its slots). Returns what the loop did and the
        scheduled batch's V2Step."""
        self.step_no += 1
        self.add_arrivals()
        got: list[V2Step] = []

        def execute(out: Any) -> Any:
            step, result = self.execute(out, sampled, targets)
            got.append(step)
            return EMPTY_MODEL_RUNNER_OUTPUT if result is None else result

        if self.loop is None:
            self.loop = EngineCoreLoop(self.scheduler, execute, batch_queue_size=2)
        self.loop.execute = execute
        return self.loop.step(self.step_no), (got[0] if got else None)

    @property
    def has_work(self) -> bool:
        return bool(self.arrivals) or (self.loop is not None and self.loop.has_work())

    def execute(
        self, out: Any, sampled: dict[str, int], targets: dict[str, list[int]] | None = None
    ) -> tuple[V2Step, ModelRunnerOutput | None]:
        """The worker's part of a step (execute_model, then sample_tokens' postprocessing) for the
        scheduler output `out`, with `sampled` as the sampler's tokens; None for no forward."""
        r = self.runner
        new_prefill = {n.req_id: list(n.prefill_token_ids) for n in out.scheduled_new_reqs}
        km = self.scheduler.kv_cache_manager
        block_ids = {rid: [list(g) for g in km.get_block_ids(rid)] for rid in out.num_scheduled_tokens}
        # execute_model's state-update prologue (model_runner.py, execute_model)
        GPUModelRunner.finish_requests(r, out)  # type: ignore[arg-type]
        GPUModelRunner.add_requests(r, out)  # type: ignore[arg-type]
        GPUModelRunner.update_requests(r, out)  # type: ignore[arg-type]
        r.block_tables.apply_staged_writes()
        rs, bt = r.req_states, r.block_tables
        slot_state = {
            "num_computed_tokens": rs.num_computed_tokens.gpu.numpy().copy(),
            "prefill_len": rs.prefill_len.np.copy(),
            "total_len": rs.total_len.gpu.numpy().copy(),
            "all_token_ids": rs.all_token_ids.gpu.numpy().copy(),
            "last_sampled_tokens": rs.last_sampled_tokens.view(-1).numpy().copy(),
            "draft_tokens": rs.draft_tokens.numpy().copy(),
        }
        for g in range(bt.num_kv_cache_groups):  # one block table per KV cache group
            slot_state[group_name("num_blocks", g)] = bt.num_blocks.np[g].copy()
            slot_state[group_name("block_tables", g)] = bt.block_tables[g].gpu.numpy().copy()
        step = V2Step(
            out=out,
            new_req_ids=[n.req_id for n in out.scheduled_new_reqs],
            new_prefill_token_ids=new_prefill,
            slots=dict(r.req_states.req_id_to_index),
            free_slots=list(reversed(r.req_states.free_indices)),
            req_ids=[],
            arrays={},
            block_rows=[],
            sampled={},
            slot_state=slot_state,
            block_ids=block_ids,
        )
        if not out.total_num_scheduled_tokens:
            return step, None  # execute_model returns before the forward
        brs, uniform = GPUModelRunner.gather_batch_req_state(r, out, False)  # type: ignore[arg-type]
        assert brs is not None
        R, T = len(brs.req_ids), brs.num_tokens
        desc = BatchExecutionDescriptor(CUDAGraphMode.NONE, T, R)
        if self.graphs is not None:  # as execute_model asks (model_runner.py, execute_model)
            max_query_len = None if brs.has_prefill else int(brs.num_scheduled_tokens.max())
            desc = self.graphs.dispatch(R, T, uniform, 0, max_query_len=max_query_len)
        ib = GPUModelRunner.prepare_inputs(r, out, brs, desc, 0)  # type: ignore[arg-type]
        block_tables, slot_mappings = GPUModelRunner.prepare_attn(r, ib)  # type: ignore[arg-type]
        seq_lens = ib.seq_lens[:R].numpy().copy()
        step.req_ids = list(ib.req_ids)
        for g, bs in enumerate(bt.block_sizes):  # each group's gathered table, its live entries
            gathered = block_tables[g][:R].numpy()
            rows = [gathered[i, : -(-int(seq_lens[i]) // bs)].tolist() for i in range(R)]
            step.group_block_rows.append(rows)
        step.block_rows = step.group_block_rows[0]
        step.arrays = {
            "idx_mapping": ib.idx_mapping.numpy().copy(),
            "num_scheduled_tokens": np.asarray(ib.num_scheduled_tokens).copy(),
            "query_start_loc": ib.query_start_loc[: R + 1].numpy().copy(),
            "seq_lens": seq_lens,
            "positions": ib.positions[:T].numpy().copy(),
            "input_ids": ib.input_ids[:T].numpy().copy(),
            "cu_num_logits": ib.cu_num_logits[: R + 1].numpy().copy(),
            "logits_indices": ib.logits_indices.numpy().copy(),
        }
        for g in range(bt.num_kv_cache_groups):
            step.arrays[group_name("slot_mapping", g)] = slot_mappings[g][:T].numpy().copy()
        # as attn_utils.build_attn_metadata takes them (max_seq_len from the CPU upper bound)
        step.scalars = {
            "num_reqs": ib.num_reqs,
            "total_num_scheduled_tokens": ib.num_tokens,
            "max_query_len": int(np.max(ib.num_scheduled_tokens)),
            "max_seq_len": int(ib.seq_lens_cpu_upper_bound.max()),
        }
        R_pad, T_pad = ib.num_reqs_after_padding, ib.num_tokens_after_padding
        step.padded = {
            "cudagraph_mode": desc.cg_mode.name,
            "num_reqs_padded": R_pad,
            "num_tokens_after_padding": T_pad,
            "query_start_loc": ib.query_start_loc[: R_pad + 1].numpy().copy(),
            "seq_lens": ib.seq_lens[:R_pad].numpy().copy(),
        }
        for g in range(bt.num_kv_cache_groups):
            step.padded[group_name("slot_mapping", g)] = slot_mappings[g][:T_pad].numpy().copy()
            step.padded[group_name("padded_block_rows", g)] = block_tables[g][R:R_pad].numpy().copy()
        if r.speculator is not None:
            assert targets is not None, "speculative decoding needs the target tokens of each logits row"
            return step, self._verify_and_propose(step, ib, targets)
        # sampling: pagedviz's token per row; vLLM's kernel says which rows keep one
        tokens = torch.tensor([[sampled.get(q, 0)] for q in ib.req_ids], dtype=torch.int64)
        num_sampled, num_rejected = get_num_sampled_and_rejected(
            torch.ones(R, dtype=torch.int32),
            ib.seq_lens,
            ib.cu_num_logits,
            ib.idx_mapping,
            r.req_states.prefill_len.gpu,
        )
        ns = num_sampled.tolist()
        missing = [q for q, n in zip(ib.req_ids, ns) if n and q not in sampled]
        if missing:
            raise AssertionError(
                f"step {self.step_no}: vLLM samples {missing}, pagedviz's trace has no token for them"
            )
        GPUModelRunner.postprocess_sampled(  # type: ignore[arg-type]
            r, ib.idx_mapping, tokens, num_sampled, num_rejected, ib.query_start_loc
        )
        step.sampled = {q: sampled[q] for q, n in zip(ib.req_ids, ns) if n}
        result = ModelRunnerOutput(
            req_ids=list(ib.req_ids),
            req_id_to_index={q: i for i, q in enumerate(ib.req_ids)},
            sampled_token_ids=[tokens[i, : ns[i]].tolist() for i in range(R)],
        )
        return step, result

    def _verify_and_propose(self, step: V2Step, ib: Any, targets: dict[str, list[int]]) -> ModelRunnerOutput:
        """V2's greedy rejection sampling over one-hot logits of pagedviz's targets, post_update,
        then the n-gram speculator into draft_tokens (sample_tokens, model_runner.py)."""
        r, rs = self.runner, self.runner.req_states
        R = ib.num_reqs
        cu = ib.cu_num_logits[: R + 1].numpy()
        num_logits = int(cu[-1])
        logits = torch.full((num_logits, self.scenario.config.vocab_size), -1e4, dtype=torch.float32)
        for i, q in enumerate(ib.req_ids):
            row = targets.get(q, [])
            for j in range(int(cu[i + 1] - cu[i])):
                logits[cu[i] + j, row[j] if j < len(row) else 0] = 0.0
        draft_sampled, pos = gather_draft_sampled(
            ib.input_ids,
            ib.positions,
            ib.logits_indices,
            ib.expanded_idx_mapping,
            ib.expanded_local_pos,
            rs.prefill_len.gpu,
        )
        M = self.scenario.config.max_num_reqs
        sampled_t, num_sampled = rejection_sample(
            logits,
            None,
            draft_sampled,
            ib.cu_num_logits,
            pos,
            ib.idx_mapping,
            ib.expanded_idx_mapping,
            ib.expanded_local_pos,
            torch.zeros(M, dtype=torch.float32),
            torch.zeros(M, dtype=torch.int64),
            r.num_speculative_steps,
        )
        num_sampled, num_rejected = get_num_sampled_and_rejected(
            num_sampled, ib.seq_lens, ib.cu_num_logits, ib.idx_mapping, rs.prefill_len.gpu
        )
        GPUModelRunner.postprocess_sampled(  # type: ignore[arg-type]
            r, ib.idx_mapping, sampled_t, num_sampled, num_rejected, ib.query_start_loc
        )
        drafts = r.speculator.propose(
            ib,
            None,
            None,
            None,
            None,
            num_sampled,
            num_rejected,
            rs.last_sampled_tokens,
            rs.next_prefill_tokens,
            None,
            None,
        )
        rs.draft_tokens[ib.idx_mapping] = drafts
        ns = num_sampled.tolist()
        step.arrays.update(
            expanded_idx_mapping=ib.expanded_idx_mapping.numpy().copy(),
            expanded_local_pos=ib.expanded_local_pos.numpy().copy(),
            draft_sampled=draft_sampled.numpy().copy(),
            num_sampled=np.asarray(ns, dtype=np.int32),
            num_rejected=num_rejected.numpy().astype(np.int32),
            proposed=drafts.numpy().copy(),
        )
        rows = [sampled_t[i, : ns[i]].tolist() for i in range(R)]
        step.sampled = {q: t[-1] for q, t in zip(ib.req_ids, rows) if t}
        return ModelRunnerOutput(
            req_ids=list(ib.req_ids),
            req_id_to_index={q: i for i, q in enumerate(ib.req_ids)},
            sampled_token_ids=rows,
        )

    def state(self) -> dict[str, np.ndarray]:
        """The per-slot state after the last step's post_update ([M] each)."""
        rs = self.runner.req_states
        return {
            "num_computed_tokens": rs.num_computed_tokens.gpu.numpy().copy(),
            "prefill_len": rs.prefill_len.np.copy(),
            "total_len": rs.total_len.gpu.numpy().copy(),
            "last_sampled_tokens": rs.last_sampled_tokens.view(-1).numpy().copy(),
        }
