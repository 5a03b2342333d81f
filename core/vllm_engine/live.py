"""The engine `vllm`, `VllmEngine`: pagedviz's engine (`PagedvizEngine`) whose scheduler is vLLM
0.33.0's and whose final arrays are vLLM's, in the trace format of pagedviz's own engine (the page,
the REST API and the narration read it unchanged).

Each step:
1. vLLM's `Scheduler.schedule()` decides (v1.py / v2.py build it for the scenario); its
   `SchedulerOutput` becomes pagedviz's (`LiveScheduler`, with the adapter an import converts a
   recorded step with: core/vllm_output.py), with the token ids and block ids vLLM's requests hold: with
   several KV cache groups (a hybrid model, groups.py) every group's, as
   `KVCacheManager.get_block_ids` gives them (`scheduler.block_ids`), and the new ones per group
   as vLLM's tuple carries them (`scheduler.new_block_ids`).
2. pagedviz's runner updates its batch and prepares the inputs stage by stage from that output
   (the intermediates the page teaches with), its tiny model runs the forward (or its synthetic
   sampler, without a model) and samples.
3. vLLM's runner takes the same output: V1's `_update_states` / `_prepare_inputs`, or V2's state
   updates, `prepare_inputs`, `prepare_attn` and `postprocess_sampled` with Triton's interpreter;
   pagedviz's sampled tokens go through vLLM's own bookkeeping into `update_from_output`.
4. The step's causes (`scheduler.waiting_causes`, `scheduler.preemption_causes`) are vLLM's own
   answer, not pagedviz's rules: the causes oracle (causes.py) watches vLLM's `schedule()` and
   runs its counterfactual copies. Where it cannot name a cause, that request's cause is
   `unknown` with the step's numbers, and `forward["vllm_differences"]["waiting_causes"]` says
   why.
5. The trace's final arrays (input ids, positions, slot_mapping, query_start_loc, seq_lens, the
   block table, logits indices, ...) are replaced by vLLM's. Where pagedviz's replay had computed
   something else, the step says so (`forward["vllm_differences"]`: the array and its first
   difference). The KV cache view is vLLM's block pool (free queue order, ref counts, which blocks
   hold a hash; the hash is vLLM's, shortened to 16 hex digits).

With async scheduling vLLM's `AsyncScheduler` runs under the engine core's batch-queue loop
(loop.py, `LiveLoop`): vLLM's loop decides whether a step schedules and whose output
`update_from_output` takes (the trace's `engine_core`); vLLM's runner runs each batch at once.

Every step carries `forward["engine"] = "vllm 0.33.0"` and `forward["vllm_arrays"]` (the arrays
that are vLLM's); what stays pagedviz's: the stage-by-stage intermediates (block_table_indices,
block_numbers, ...), the tiny model's K/V and its forward, the sampled tokens, the timings.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pagedviz.core.engine import PagedvizEngine
from pagedviz.core.scenario import Scenario
from pagedviz.core.scheduler_output import SchedulerOutput
from pagedviz.core.trace import StepTrace
from pagedviz.core.vllm_engine.take import take_v1, take_v2
from pagedviz.core.vllm_output import OutputAdapter, Scheduled, from_vllm, per_group
from pagedviz.core.vllm_support import ENGINE_LABEL


class LiveScheduler:
    """Stands in for pagedviz's scheduler: `schedule()` is vLLM's, converted; `update_from_output`
    runs vLLM's runner on the same output with pagedviz's sampled tokens, then vLLM's
    `update_from_output`."""

    def __init__(self, scenario: Scenario) -> None:
        cfg = scenario.config
        self.v2 = cfg.model_runner == "v2"
        if self.v2:
            from pagedviz.core.vllm_engine.v2 import VllmV2Side

            self.side: Any = VllmV2Side(scenario)
        else:
            from pagedviz.core.vllm_engine.v1 import VllmSide

            self.side = VllmSide(scenario)
        self.vllm = self.side.scheduler
        from pagedviz.core.vllm_engine.causes import CausesOracle

        # why requests wait and for whom each was preempted, from vLLM's own scheduler (causes.py)
        self.oracle = CausesOracle(self.vllm)
        self.cause_problem: str | None = None  # the oracle could not name a cause this step
        self.current: Any = None  # vLLM's SchedulerOutput of this step
        self.got: dict[str, Any] = {}  # what vLLM's runner made of it (arrays, V2Step, samples)
        self.kv = _VllmBlocks(self.vllm)
        # vLLM's outputs as pagedviz's (core/vllm_output.py, as the import converts a recorded step)
        self.adapter = OutputAdapter("v2" if self.v2 else "v1", self.kv.num_groups)
        self.admitted = 0  # the last step whose arrivals reached vLLM's scheduler
        # speculative decoding (V2): pagedviz's target token at each logits row, by request
        self.targets: dict[str, list[int]] | None = None

    @property
    def has_unfinished(self) -> bool:
        return bool(self.side.arrivals) or self.vllm.get_num_unfinished_requests() > 0

    def admit(self, step_no: int) -> None:
        """The requests arriving at `step_no` reach vLLM's `add_request`, in listed order (once)."""
        if self.admitted == step_no:
            return
        self.admitted = self.side.step_no = step_no
        self.side.add_arrivals()

    def schedule(self, step_no: int) -> SchedulerOutput:
        self.admit(step_no)
        with _DropWatch(self.kv.managers) as drops:
            vout = self.vllm.schedule()
        self.current, self.got = vout, {}
        out = self.adapter.convert(from_vllm(vout), step_no, self)
        out.window_drops = drops.drops
        out.waiting_req_ids = [r.request_id for r in self.vllm.waiting]
        causes = self.oracle.last
        if causes is not None:
            out.waiting_causes = dict(causes.waiting)
            out.preemption_causes = dict(causes.preemption)
            self.cause_problem = causes.problem
        return out

    def blocks_of(self, s: Scheduled, kind: str) -> tuple[list[list[int]], list[list[int]]]:
        """Every group's blocks as vLLM's `KVCacheManager.get_block_ids` gives them, and the new
        ones as vLLM's tuple carries them."""
        return self.kv.group_blocks_of(s.req_id), per_group(s.new_block_ids, self.kv.num_groups)

    def tokens_of(self, s: Scheduled) -> tuple[np.ndarray, int]:
        req = self.vllm.requests[s.req_id]
        return np.asarray(req.all_token_ids, dtype=np.int32), int(req.num_prompt_tokens)

    def execute(self, sampled: dict[str, int]) -> Any:
        """vLLM's runner on this step's output with pagedviz's sampled tokens (its bookkeeping
        decides which rows keep one); the ModelRunnerOutput that update_from_output takes (None:
        nothing was scheduled, no forward)."""
        vout, side = self.current, self.side
        if self.v2:
            step, result = side.execute(vout, sampled, self.targets)
            self.got = {"v2": step, "sampled": step.sampled}
            return result
        arrays = side.runner.step(vout)
        result, kept = None, {}
        if vout.total_num_scheduled_tokens:
            result = side.runner.sampled(vout, sampled)
            kept = {r: t[0] for r, t in zip(result.req_ids, result.sampled_token_ids) if t}
        self.got = {"arrays": arrays, "sampled": kept}
        return result

    def update_from_output(self, out: SchedulerOutput, sampled: dict[str, int]) -> list[str]:
        """Synchronous scheduling: vLLM's runner, then vLLM's update_from_output at once."""
        result = self.execute(sampled)
        if result is not None:
            self.vllm.update_from_output(self.current, result)
        return []

    def update_from_spec_output(
        self, out: SchedulerOutput, generated: dict[str, list[int]], rejected: dict[str, int]
    ) -> list[str]:
        """Synchronous V2 with drafts: vLLM's rejection sampling over pagedviz's targets, its
        post_update and n-gram speculator, update_from_output, then the drafts' count
        (`update_draft_token_ids` with -1 placeholders: EngineCore.post_step without structured
        outputs)."""
        result = self.execute({rid: toks[-1] for rid, toks in generated.items()})
        if result is not None:
            from vllm.v1.outputs import DraftTokenIds

            self.vllm.update_from_output(self.current, result)
            k = self.side.runner.num_speculative_steps
            ids = self.got["v2"].req_ids
            self.vllm.update_draft_token_ids(DraftTokenIds(ids, [[-1] * k for _ in ids]))
        return []

    @property
    def requests(self) -> dict[str, Any]:
        """What pagedviz's V2 draft step reads of each request after the update: None for one vLLM
        has finished, and whether this step was a partial prefill (its row sampled nothing)."""
        sampled = self.got.get("sampled", {})
        return {
            rid: _DraftView(rid not in sampled)
            for rid in self.current.num_scheduled_tokens
            if rid in self.vllm.requests
        }


@dataclasses.dataclass
class _DraftView:
    is_prefill_chunk: bool
    status: Any = None
    spec_token_ids: list[int] = dataclasses.field(default_factory=list)


class LiveLoop:
    """Async scheduling: stands in for pagedviz's batch queue (core/engine_core.py) with vLLM's
    AsyncScheduler under the engine core's loop (loop.py), split where pagedviz's runner runs:
    `schedules` says whether the step schedules, `end_step` runs vLLM's runner on the batch and
    finishes the loop's step (queue, or hand the oldest batch to vLLM's update_from_output)."""

    def __init__(self, live: LiveScheduler) -> None:
        from pagedviz.core.vllm_engine.loop import EngineCoreLoop

        self.live = live
        self.loop = EngineCoreLoop(live.vllm, lambda out: None, batch_queue_size=2)

    def schedules(self, step: int) -> bool:
        assert len(self.loop.queue) < self.loop.size
        self.live.admit(step)
        return bool(self.live.vllm.has_requests())

    def end_step(self, step: int, batch: Any) -> dict[str, Any]:
        from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT

        out = result = None
        if batch is not None:
            out = self.live.current
            result = self.live.execute(batch.sampled)
            if result is None:
                result = EMPTY_MODEL_RUNNER_OUTPUT
        else:
            self.live.got = {}
        done = self.loop.finish(step, out, result)
        finished = [
            o.request_id
            for outputs in (done.engine_core_outputs or {}).values()
            for o in outputs.outputs
            if o.finish_reason is not None
        ]
        return {
            "scheduled": batch is not None,
            "consumed_step": done.consumed_step,
            "finished_req_ids": finished,
            "batch_queue": done.batch_queue,
            "batch_queue_size": self.loop.size,
        }

    @property
    def done(self) -> bool:
        return not (self.live.side.arrivals or self.live.vllm.has_requests() or self.loop.queue)


class _DropWatch:
    """The blocks vLLM's sliding-window managers drop during one `schedule()`, in the order vLLM
    frees them: `SingleTypeKVCacheManager.remove_skipped_blocks` watched on each sliding group's
    manager (the instance's attribute, removed on exit; sched_copy.py leaves it out of a copy).
    `drops`: request -> one entry per call that dropped blocks, in the format of pagedviz's
    `scheduler.window_drops` (docs/arrays.md): the group, the blocks and their indices as vLLM's
    `_remove_blocks_in_range` freed them (last first), the processed tokens the window was placed
    on, the window and the first token kept."""

    def __init__(self, managers: list[Any]) -> None:
        self.managers = managers
        self.drops: dict[str, list[dict[str, object]]] = {}
        self._set: list[Any] = []

    def __enter__(self) -> _DropWatch:
        for g, m in enumerate(self.managers):
            if hasattr(m, "sliding_window"):  # vLLM's SlidingWindowManager
                m.remove_skipped_blocks = self._watched(g, m, m.remove_skipped_blocks)
                self._set.append(m)
        return self

    def _watched(self, g: int, m: Any, remove: Any) -> Any:
        def remove_skipped_blocks(request_id: str, processed: int, *args: Any, **kwargs: Any) -> Any:
            before = list(m.req_to_blocks.get(request_id, ()))
            result = remove(request_id, processed, *args, **kwargs)
            after = m.req_to_blocks.get(request_id, ())
            dropped = [
                i
                for i in range(min(len(before), len(after)) - 1, -1, -1)
                if not before[i].is_null and after[i].is_null
            ]
            if dropped:
                self.drops.setdefault(request_id, []).append(
                    {
                        "group": g,
                        "block_ids": [before[i].block_id for i in dropped],
                        "block_indices": dropped,
                        "num_computed_tokens": int(processed),
                        "sliding_window": int(m.sliding_window),
                        "first_kept_token": int(m.get_num_skipped_tokens(processed)),
                    }
                )
            return result

        return remove_skipped_blocks

    def __exit__(self, *exc: Any) -> None:
        for m in self._set:
            del m.remove_skipped_blocks
        self._set.clear()


class _VllmBlocks:
    """vLLM's block pool seen as pagedviz's KV view reads it: each request's blocks (per KV cache
    group: one SingleTypeKVCacheManager each), the free queue in vLLM's order, ref counts and the
    blocks that hold a hash."""

    def __init__(self, scheduler: Any) -> None:
        self.manager = scheduler.kv_cache_manager
        self.block_pool = self.manager.block_pool
        self.num_blocks = self.block_pool.num_gpu_blocks
        self.managers = list(self.manager.coordinator.single_type_managers)
        self.num_groups = len(self.managers)

    def _group(self, g: int) -> dict[str, list[int]]:
        return {
            rid: [b.block_id for b in blocks]
            for rid, blocks in self.managers[g].req_to_blocks.items()
            if blocks
        }

    @property
    def req_blocks(self) -> dict[str, list[int]]:
        """The first group's blocks per request (the only group of a model without sliding layers)."""
        return self._group(0)

    def blocks_of(self, req_id: str) -> list[int]:
        return self.group_blocks_of(req_id)[0]

    def group_blocks_of(self, req_id: str) -> list[list[int]]:
        """One list per group, in vLLM's group order: `KVCacheManager.get_block_ids`."""
        if req_id not in self.managers[0].req_to_blocks:
            return [[] for _ in self.managers]
        return [list(ids) for ids in self.manager.get_block_ids(req_id)]

    def owners(self) -> dict[str, list[str]]:
        """Block id -> the requests holding it, over every group (the null block is nobody's)."""
        owners: dict[str, list[str]] = {}
        for g in range(self.num_groups):
            for rid, blocks in self._group(g).items():
                for b in blocks:
                    if b != 0:
                        owners.setdefault(str(b), []).append(rid)
        return owners

    def block_groups(self) -> dict[str, int]:
        """Block id -> the group whose table holds it."""
        return {
            str(b): g
            for g in range(self.num_groups)
            for blocks in self._group(g).values()
            for b in blocks
            if b != 0
        }

    def snapshot(self) -> dict[str, object]:
        blocks = self.block_pool.blocks
        return {
            "free_block_queue": [b.block_id for b in self.block_pool.free_block_queue.get_all_free_blocks()],
            "ref_cnt": [int(b.ref_cnt) for b in blocks],
            "block_hash": {
                str(b.block_id): bytes(b.block_hash).hex()[:16] for b in blocks if b.block_hash is not None
            },
        }


class VllmEngine(PagedvizEngine):
    """pagedviz's engine driven by vLLM's scheduler, with vLLM's final arrays (module docstring)."""

    def __init__(self, scenario: Scenario, capture: bool = True, stage_timing: bool = False) -> None:
        if scenario.config.device == "auto":  # vLLM's side runs on the CPU; so does the replay
            scenario = dataclasses.replace(
                scenario, config=dataclasses.replace(scenario.config, device="cpu")
            )
        super().__init__(scenario, capture, stage_timing)

    def _setup(self) -> None:
        cfg = self.scenario.config
        live = LiveScheduler(self.scenario)
        self.scheduler = live  # type: ignore[assignment]
        self.engine_core = LiveLoop(live) if cfg.async_scheduling else None  # type: ignore[assignment]
        runner_cls: type[Any] = self.runner_cls
        if cfg.model_runner == "v2":
            from pagedviz.core.runners.v2 import ModelRunnerV2

            runner_cls = ModelRunnerV2
        self.runner = runner_cls(cfg, self.device, mrope={})

    def _v2_targets(self) -> dict[str, list[int]]:
        tokens = self.v2_result[0].tolist()
        cu = self.runner.v["cu_num_logits"].tolist()
        return {rid: tokens[cu[i] : cu[i + 1]] for i, rid in enumerate(self.runner.row_req_ids)}

    def _update_with_drafts_v2(
        self, out: SchedulerOutput, generated: dict[str, list[int]], trace: StepTrace
    ) -> None:
        self.scheduler.targets = self._v2_targets()  # type: ignore[attr-defined]
        super()._update_with_drafts_v2(out, generated, trace)

    def _worker_drafts_v2(
        self, out: SchedulerOutput, generated: dict[str, list[int]], trace: StepTrace
    ) -> Any:
        self.scheduler.targets = self._v2_targets()  # type: ignore[attr-defined]
        return super()._worker_drafts_v2(out, generated, trace)

    def _kv_view(self) -> dict[str, Any]:
        kv: _VllmBlocks = self.scheduler.kv  # type: ignore[assignment]
        view = self.kv_view(kv.snapshot(), kv.req_blocks, kv.num_blocks)
        if kv.num_groups > 1:  # as pagedviz's own engine shows several groups (core/engine.py)
            from pagedviz.core.vllm_engine.groups import describe

            view["owners"] = kv.owners()
            view["kv_cache_groups"] = describe(self.scheduler.side.kv_cache_config)  # type: ignore[attr-defined]
            view["block_group"] = kv.block_groups()
        return view

    def step(self) -> StepTrace:
        live: LiveScheduler = self.scheduler  # type: ignore[assignment]
        live.cause_problem = None
        trace = super().step()
        diffs: dict[str, str] = {}
        taken: list[str] = []
        if self.capture:
            if live.v2:
                take_v2(trace, live.got.get("v2"), taken, diffs)
            else:
                take_v1(trace, live.got.get("arrays") or {}, taken, diffs)
        if live.got.get("sampled", {}) != trace.sampled_token_ids:
            diffs["sampled_token_ids"] = (
                f"vLLM's bookkeeping keeps {sorted(live.got.get('sampled', {}))}, "
                f"pagedviz's runner {sorted(trace.sampled_token_ids)}"
            )
        if live.cause_problem:
            diffs["waiting_causes"] = f"vLLM's scheduler leaves a cause unnamed: {live.cause_problem}"
        trace.forward["engine"] = ENGINE_LABEL
        trace.forward["vllm_arrays"] = taken
        if diffs:
            trace.forward["vllm_differences"] = diffs
        return trace
