"""The engine `vllm`: a pagedviz `Engine` whose scheduler is vLLM 0.33.0's and whose final arrays
are vLLM's, in the trace format of pagedviz's own engine (the page, the REST API and the
narration read it unchanged).

Each step:
1. vLLM's `Scheduler.schedule()` decides (v1.py / v2.py build it for the scenario); its
   `SchedulerOutput` becomes pagedviz's (`LiveScheduler`, the same conversion an import makes of a
   recorded step: core/replay.py), with the token ids and block ids vLLM's requests hold.
2. pagedviz's runner updates its batch and prepares the inputs stage by stage from that output
   (the intermediates the page teaches with), its tiny model runs the forward (or its synthetic
   sampler, without a model) and samples.
3. vLLM's runner takes the same output: V1's `_update_states` / `_prepare_inputs`, or V2's state
   updates, `prepare_inputs`, `prepare_attn` and `postprocess_sampled` with Triton's interpreter;
   pagedviz's sampled tokens go through vLLM's own bookkeeping into `update_from_output`.
4. The trace's final arrays (input ids, positions, slot_mapping, query_start_loc, seq_lens, the
   block table, logits indices, ...) are replaced by vLLM's. Where pagedviz's replay had computed
   something else, the step says so (`forward["vllm_differences"]`: the array and its first
   difference). The KV cache view is vLLM's block pool (free queue order, ref counts, which blocks
   hold a hash; the hash is vLLM's, shortened to 16 hex digits).

Every step carries `forward["engine"] = "vllm 0.33.0"` and `forward["vllm_arrays"]` (the arrays
that are vLLM's); what stays pagedviz's: the stage-by-stage intermediates (block_table_indices,
block_numbers, ...), the tiny model's K/V and its forward, the sampled tokens, the timings.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pagedviz.core.config import Scenario
from pagedviz.core.engine import Engine
from pagedviz.core.scheduler import ScheduledRequest, SchedulerOutput
from pagedviz.core.trace import StepTrace
from pagedviz.core.vllm_engine import ENGINE_LABEL

# V1: the arrays of vLLM's `_prepare_inputs` (v1.py, `_Runner.step`), request or token level
V1_ARRAYS = (
    "num_scheduled_tokens",
    "num_computed_tokens_cpu",
    "req_indices",
    "positions",
    "input_ids",
    "query_start_loc",
    "seq_lens",
    "discard_request_mask",
    "logits_indices",
    "slot_mapping",
)
# V2: the input buffers of vLLM's `prepare_inputs` / `prepare_attn` (v2.py, `V2Step.arrays`)
V2_ARRAYS = (
    "idx_mapping",
    "num_scheduled_tokens",
    "query_start_loc",
    "seq_lens",
    "positions",
    "input_ids",
    "cu_num_logits",
    "logits_indices",
    "slot_mapping",
)
# V2's per-slot state after its state updates (compared and taken on the occupied slots)
V2_SLOT_ARRAYS = ("num_computed_tokens", "prefill_len", "total_len", "num_blocks")


def _first_difference(ours: np.ndarray, theirs: np.ndarray) -> str:
    if ours.shape != theirs.shape:
        return f"shape {list(theirs.shape)} (vLLM) vs {list(ours.shape)} (pagedviz)"
    where = np.argwhere(ours != theirs)[0]
    at = tuple(int(i) for i in where)
    return f"at {list(at) if len(at) > 1 else at[0]}: vLLM {theirs[at].item()}, pagedviz {ours[at].item()}"


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
        self.seen: set[str] = set()  # requests scheduled before (V2 sends resumed ones as new)
        self.current: Any = None  # vLLM's SchedulerOutput of this step
        self.got: dict[str, Any] = {}  # what vLLM's runner made of it (arrays, V2Step, samples)
        self.kv = _VllmBlocks(self.vllm)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.side.arrivals) or self.vllm.get_num_unfinished_requests() > 0

    def schedule(self, step_no: int) -> SchedulerOutput:
        vout = self.side.schedule()
        self.current, self.got = vout, {}
        out = SchedulerOutput(step=step_no, runner="v2" if self.v2 else "v1")
        new = {n.req_id: n for n in vout.scheduled_new_reqs}
        cached = vout.scheduled_cached_reqs
        computed = dict(zip(cached.req_ids, cached.num_computed_tokens))
        added = dict(zip(cached.req_ids, cached.new_block_ids))
        resumed = set(cached.resumed_req_ids)
        for rid, num in vout.num_scheduled_tokens.items():
            req = self.vllm.requests[rid]
            if rid in new:
                kind = "resumed" if rid in self.seen else "new"
                start = new[rid].num_computed_tokens
                new_blocks = list(new[rid].block_ids[0])
            else:
                kind = "resumed" if rid in resumed else "running"
                start = computed[rid]
                new_blocks = list(added[rid][0]) if added.get(rid) is not None else []
            out.scheduled.append(
                ScheduledRequest(
                    rid,
                    kind,
                    int(start),
                    int(num),
                    int(req.num_prompt_tokens),
                    np.asarray(req.all_token_ids, dtype=np.int32),
                    list(self.kv.blocks_of(rid)),
                    new_blocks,
                )
            )
            self.seen.add(rid)
        out.preempted_req_ids = sorted(vout.preempted_req_ids or ())
        out.finished_req_ids = sorted(vout.finished_req_ids)
        out.waiting_req_ids = [r.request_id for r in self.vllm.waiting]
        return out

    def update_from_output(self, out: SchedulerOutput, sampled: dict[str, int]) -> list[str]:
        vout, side = self.current, self.side
        if self.v2:
            step, result = side.execute(vout, sampled)
            self.got = {"v2": step, "sampled": step.sampled}
            if result is not None:
                self.vllm.update_from_output(vout, result)
            return []
        arrays = side.runner.step(vout)
        kept: dict[str, int] = {}
        if vout.total_num_scheduled_tokens:
            result = side.runner.sampled(vout, sampled)
            kept = {r: t[0] for r, t in zip(result.req_ids, result.sampled_token_ids) if t}
            self.vllm.update_from_output(vout, result)
        self.got = {"arrays": arrays, "sampled": kept}
        return []


class _VllmBlocks:
    """vLLM's block pool seen as pagedviz's KV view reads it: each request's blocks, the free
    queue in vLLM's order, ref counts and the blocks that hold a hash."""

    def __init__(self, scheduler: Any) -> None:
        self.manager = scheduler.kv_cache_manager
        self.block_pool = self.manager.block_pool
        self.num_blocks = self.block_pool.num_gpu_blocks

    @property
    def req_blocks(self) -> dict[str, list[int]]:
        single = self.manager.coordinator.single_type_managers[0]
        return {rid: [b.block_id for b in blocks] for rid, blocks in single.req_to_blocks.items() if blocks}

    def blocks_of(self, req_id: str) -> list[int]:
        single = self.manager.coordinator.single_type_managers[0]
        return [b.block_id for b in single.req_to_blocks.get(req_id, ())]

    def snapshot(self) -> dict[str, object]:
        blocks = self.block_pool.blocks
        return {
            "free_block_queue": [b.block_id for b in self.block_pool.free_block_queue.get_all_free_blocks()],
            "ref_cnt": [int(b.ref_cnt) for b in blocks],
            "block_hash": {
                str(b.block_id): bytes(b.block_hash).hex()[:16] for b in blocks if b.block_hash is not None
            },
        }


class LiveEngine(Engine):
    """pagedviz's engine driven by vLLM's scheduler, with vLLM's final arrays (module docstring)."""

    def __init__(self, scenario: Scenario, capture: bool = True, stage_timing: bool = False) -> None:
        if scenario.config.device == "auto":  # vLLM's side runs on the CPU; so does the replay
            scenario = dataclasses.replace(
                scenario, config=dataclasses.replace(scenario.config, device="cpu")
            )
        super().__init__(scenario, capture, stage_timing)

    def _setup(self) -> None:
        cfg = self.scenario.config
        self.engine_core = None
        self.scheduler = LiveScheduler(self.scenario)  # type: ignore[assignment]
        runner_cls: type[Any] = self.runner_cls
        if cfg.model_runner == "v2":
            from pagedviz.core.runners.v2 import ModelRunnerV2

            runner_cls = ModelRunnerV2
        self.runner = runner_cls(cfg, self.device, mrope={})

    def _kv_view(self) -> dict[str, Any]:
        kv = self.scheduler.kv
        return self.kv_view(kv.snapshot(), kv.req_blocks, kv.num_blocks)

    def step(self) -> StepTrace:
        trace = super().step()
        live: LiveScheduler = self.scheduler  # type: ignore[assignment]
        diffs: dict[str, str] = {}
        taken: list[str] = []
        if self.capture:
            if live.v2:
                self._take_v2(trace, live.got.get("v2"), taken, diffs)
            else:
                self._take_v1(trace, live.got.get("arrays") or {}, taken, diffs)
        if live.got.get("sampled", {}) != trace.sampled_token_ids:
            diffs["sampled_token_ids"] = (
                f"vLLM's bookkeeping keeps {sorted(live.got.get('sampled', {}))}, "
                f"pagedviz's runner {sorted(trace.sampled_token_ids)}"
            )
        trace.forward["engine"] = ENGINE_LABEL
        trace.forward["vllm_arrays"] = taken
        if diffs:
            trace.forward["vllm_differences"] = diffs
        return trace

    # ------------------------------------------------------------------ vLLM's arrays into the trace
    @staticmethod
    def _take(
        trace: StepTrace, name: str, theirs: np.ndarray, taken: list[str], diffs: dict[str, str]
    ) -> None:
        """Put vLLM's `theirs` into the trace's array `name` over its leading entries (rows, and
        columns for a table), noting the first difference from what pagedviz computed."""
        entry = trace.array_entries.get(name)
        if entry is None:
            diffs[name] = "vLLM computed it, pagedviz's trace has no such array"
            return
        data = np.array(entry.data, copy=True)
        theirs = np.asarray(theirs)
        if data.ndim != theirs.ndim or data.ndim > 2:
            diffs[name] = _first_difference(data, theirs)
            return
        region = tuple(slice(0, min(a, b)) for a, b in zip(data.shape, theirs.shape))
        longer = theirs.shape[0] > data.shape[0]
        shorter = data.ndim == 1 and theirs.shape[0] < data.shape[0]
        if (longer or shorter) and theirs.shape[0] != entry.valid:  # (not a padded array's real part)
            diffs[name] = _first_difference(data, theirs)
        ours = data[region]
        want = theirs[region].astype(data.dtype)
        if not np.array_equal(ours, want):
            diffs.setdefault(name, _first_difference(ours, want))
        data[region] = want
        entry.data = data
        if entry.buffer is not None and data.ndim == 1:
            buffer = entry.buffer.copy()
            n = min(len(buffer), len(want))
            buffer[:n] = want[:n]
            entry.buffer = buffer
        taken.append(name)

    def _take_v1(
        self, trace: StepTrace, arrays: dict[str, np.ndarray], taken: list[str], diffs: dict[str, str]
    ) -> None:
        for name in V1_ARRAYS:
            if name in arrays:
                self._take(trace, name, arrays[name], taken, diffs)
        if "block_table" in arrays and trace.batch.get("req_ids"):
            rows = len(trace.batch["req_ids"])
            self._take(trace, "block_table", arrays["block_table"][:rows], taken, diffs)
        rows_vllm = [str(r) for r in arrays.get("req_ids", [])]
        if rows_vllm != list(trace.batch.get("req_ids", [])):
            diffs["req_ids"] = f"vLLM's batch rows {rows_vllm}, pagedviz's {trace.batch.get('req_ids')}"
        if "token_ids_cpu" in arrays and "num_tokens" in trace.array_entries:
            # the live part of each row (vLLM leaves stale ids past a request's tokens and in
            # vacated rows, where pagedviz writes zeros): compared, then shown as vLLM's
            ours = trace.array_entries["token_ids_cpu"]
            n_tok = trace.arrays["num_tokens"]
            for row, k in enumerate(n_tok.tolist()):
                theirs = arrays["token_ids_cpu"][row, :k]
                if ours.data[row, :k].tolist() != theirs.tolist():
                    diffs.setdefault(
                        "token_ids_cpu", f"row {row}: {_first_difference(ours.data[row, :k], theirs)}"
                    )
            taken.append("token_ids_cpu")

    def _take_v2(self, trace: StepTrace, got: Any, taken: list[str], diffs: dict[str, str]) -> None:
        if got is None:
            return
        b = trace.batch
        if got.slots != b.get("slots"):
            diffs["slots"] = f"vLLM's RequestState slots {got.slots}, pagedviz's {b.get('slots')}"
        if got.free_slots != b.get("free_slots"):
            diffs["free_slots"] = f"vLLM's free slots {got.free_slots}, pagedviz's {b.get('free_slots')}"
        for name in V2_SLOT_ARRAYS:
            entry = trace.array_entries.get(name)
            if entry is None:
                continue
            data = np.array(entry.data, copy=True)
            for rid, j in got.slots.items():
                theirs = int(got.slot_state[name][j])
                if int(data[j]) != theirs:
                    diffs.setdefault(name, f"slot {j} ({rid}): vLLM {theirs}, pagedviz {int(data[j])}")
                data[j] = theirs
            entry.data = data
            taken.append(name)
        if not got.req_ids:
            return
        if got.req_ids != b.get("req_ids"):
            diffs["req_ids"] = f"vLLM's batch order {got.req_ids}, pagedviz's {b.get('req_ids')}"
        for name in V2_ARRAYS:
            theirs = got.arrays[name]
            if name == "slot_mapping" and len(got.padded.get("slot_mapping", ())) > len(theirs):
                theirs = got.padded["slot_mapping"]  # up to the CUDA-graph size, -1 past the tokens
            self._take(trace, name, theirs, taken, diffs)
        table = trace.array_entries.get("input_block_tables")
        if table is not None:
            data = np.array(table.data, copy=True)
            for i, row in enumerate(got.block_rows):
                if data[i, : len(row)].tolist() != row:
                    diffs.setdefault(
                        "input_block_tables", f"row {i}: vLLM {row}, pagedviz {data[i, : len(row)].tolist()}"
                    )
                data[i, : len(row)] = row
            table.data = data
            taken.append("input_block_tables")
        mode = got.padded.get("cudagraph_mode")
        ours = (trace.scalars.get("cudagraph_mode"), trace.scalars.get("num_tokens_after_padding"))
        if mode is not None and (mode, got.padded["num_tokens_after_padding"]) != ours:
            n = got.padded["num_tokens_after_padding"]
            diffs["cudagraph_mode"] = f"vLLM dispatches {mode} with {n} tokens, pagedviz {ours}"
        for key, value in got.scalars.items():
            if trace.scalars.get(key) != value:
                diffs.setdefault(key, f"vLLM {value}, pagedviz {trace.scalars.get(key)}")
            trace.scalars[key] = value
