"""vLLM 0.33.0's V1 GPU model runner (gpu_model_runner.py): input preparation, stage by stage
(docs/arrays.md).

`update_states` brings the persistent batch up to date with the scheduler's decision. Then each
stage of `prepare_inputs` is one small method that computes vLLM's arrays with vectorised numpy on
views of torch CPU tensors; the runner records what each stage wrote into the step's trace.
Finally the inputs are copied to the device (`non_blocking=True`), where `slot_mapping` is
computed again from the device's block table and must agree with the CPU result.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pagedviz.core.device import StageTimer
from pagedviz.core.input_batch import InputBatch, cpu_tensor
from pagedviz.core.runners.mrope import MRope
from pagedviz.core.runners.stages import StagedRunner, group_device_inputs, group_name
from pagedviz.core.runners.v1_stages import V1Stages
from pagedviz.core.scenario_parts import EngineConfig
from pagedviz.core.scheduler_output import SchedulerOutput
from pagedviz.core.trace import PlanItem, Stage, StepTrace

UPDATE_STATES_STAGE = Stage(
    "update_states",
    ["scheduler_output"],
    ["token_ids_cpu", "block_table", "num_computed_tokens_cpu", "num_tokens", "num_scheduled_tokens"],
    "remove finished/unscheduled rows; add new rows into the lowest hole; condense",
    "The persistent batch catches up with the scheduler (GPUModelRunner._update_states): "
    "finished and unscheduled requests leave and their rows become holes, new ones take "
    "the lowest hole, and the last rows move into the holes (condense). Only what "
    "changed is written; scheduled draft tokens are written after a request's tokens.",
)


class ModelRunner(V1Stages, StagedRunner):
    """The V1 runner: its persistent batch (update_states), the stages of prepare_inputs
    (V1Stages, v1_stages.py) and the copy to the device."""

    flavor = "vllm"
    STAGES: tuple[str, ...] = (
        "_req_indices",
        "_cu_num_tokens",
        "_positions",
        "_mrope_positions",
        "_token_indices",
        "_input_ids",
        "_token_indices_whatif",
        "_block_table_indices",
        "_block_numbers",
        "_block_offsets",
        "_slot_mapping",
        "_query_start_loc",
        "_seq_lens",
        "_prepare_input_ids",
        "_logits_indices",
        "_spec_decode_metadata",
        "_attn_metadata",
    )

    def __init__(
        self, config: EngineConfig, device: torch.device, mrope: dict[str, MRope] | None = None
    ) -> None:
        self.config = config
        self.device = device
        self.kv_cache_groups = config.kv_cache_groups
        G = self.num_groups = len(self.kv_cache_groups)
        self.block_size = config.block_size
        bs = config.block_size
        self.block_shift = bs.bit_length() - 1 if bs & (bs - 1) == 0 else None
        self.max_model_len = config.max_model_len
        self.max_num_blocks_per_req = config.max_num_blocks_per_req
        self.mrope = mrope or {}  # per request, when the model uses M-RoPE
        pin = device.type == "cuda"
        R, T = config.max_num_reqs, config.max_num_batched_tokens
        T_pad = max(T, *(config.cudagraph_capture_sizes or (T,)))
        self.input_batch = InputBatch(R, config.max_model_len, self.max_num_blocks_per_req, pin, G)
        self.arange_np = np.arange(max(R, T_pad) + 1, dtype=np.int64)
        self.row_starts_m = self.arange_np * config.max_model_len
        self.row_starts_k = self.arange_np * self.max_num_blocks_per_req
        self.input_ids_cpu = cpu_tensor((T_pad,), torch.int32, pin)
        self.input_ids_np = self.input_ids_cpu.numpy()
        self.positions_cpu = cpu_tensor((T_pad,), torch.int64, pin)
        self.positions_np = self.positions_cpu.numpy()
        self.query_start_loc_cpu = cpu_tensor((R + 1,), torch.int32, pin)
        self.query_start_loc_np = self.query_start_loc_cpu.numpy()
        self.seq_lens_cpu = cpu_tensor((R,), torch.int32, pin)
        self.seq_lens_np = self.seq_lens_cpu.numpy()
        # one slot_mapping per KV cache group (vLLM's BlockTable.slot_mapping), group 0's first
        self.group_slot_mapping_cpu = [cpu_tensor((T_pad,), torch.int64, pin) for _ in range(G)]
        self.group_slot_mapping_np = [t.numpy() for t in self.group_slot_mapping_cpu]
        self.slot_mapping_cpu = self.group_slot_mapping_cpu[0]
        self.slot_mapping_np = self.group_slot_mapping_np[0]
        self.req_indices_cpu = cpu_tensor((T_pad,), torch.int64, pin)
        self.req_indices_np = self.req_indices_cpu.numpy()
        dev = device
        self.input_ids = torch.zeros(T_pad, dtype=torch.int32, device=dev)
        self.positions = torch.zeros(T_pad, dtype=torch.int64, device=dev)
        self.query_start_loc = torch.zeros(R + 1, dtype=torch.int32, device=dev)
        self.seq_lens = torch.zeros(R, dtype=torch.int32, device=dev)
        self.req_indices = torch.zeros(T_pad, dtype=torch.int64, device=dev)
        # the device's block table and slot_mapping of each KV cache group; group 0's under vLLM's
        # names (the only ones with one group)
        K = self.max_num_blocks_per_req
        self.group_slot_mapping = [torch.zeros(T_pad, dtype=torch.int64, device=dev) for _ in range(G)]
        self.group_block_table = [torch.zeros((R, K), dtype=torch.int32, device=dev) for _ in range(G)]
        self.slot_mapping = self.group_slot_mapping[0]
        self.block_table = self.group_block_table[0]
        # with a sliding-window group, the block ids the runner knows of each request
        # (CachedRequestState.block_ids, one list per group): the window's drops never reach it
        self.window_drops = any(g.sliding for g in self.kv_cache_groups)
        self.req_block_ids: dict[str, list[list[int]]] = {}
        # async scheduling: last step's sampled tokens stay on the device, in last step's row order
        self.prev_sampled_token_ids: torch.Tensor | None = None
        self.prev_req_id_to_index: dict[str, int] = {}
        self.pending_sampled: dict[str, int] = {}  # known to the CPU only after the next gather
        self.v: dict[str, Any] = {}  # the arrays of the step being prepared, by vLLM name
        # name -> (valid, the whole persistent buffer whose head is the array, or None)
        self.pad: dict[str, tuple[int, np.ndarray | None]] = {}
        self.build_stage_plan()
        ib = self.input_batch
        self.batch_plan: list[PlanItem] = [
            ("num_scheduled_tokens", "request", "update_states", "cpu", None),
            ("num_computed_tokens_cpu", "request", "update_states", "cpu", None),
            ("num_tokens", "request", "update_states", "cpu", None),
            ("token_ids_cpu", "system", "update_states", "cpu", ib.token_ids_cpu.shape),
            ("block_table", "system", "update_states", "cpu", ib.block_table.block_table_np.shape),
        ]
        update_stage = UPDATE_STATES_STAGE
        if G > 1:
            # every group's block table: group g >= 1 as block_table_g{g}
            names = [group_name("block_table", g) for g in range(1, G)]
            self.batch_plan += [
                (n, "system", "update_states", "cpu", ib.block_table.block_table_np.shape) for n in names
            ]
            update_stage = Stage(
                UPDATE_STATES_STAGE.name,
                UPDATE_STATES_STAGE.reads,
                [*UPDATE_STATES_STAGE.writes, *names],
                UPDATE_STATES_STAGE.formula + "; every KV cache group's block table alike "
                "(MultiGroupBlockTable: block_table_g{g} from the group's block ids)",
                UPDATE_STATES_STAGE.why,
            )
            self.DEVICE_INPUTS = group_device_inputs(self.DEVICE_INPUTS, self.kv_cache_groups, "block_table")
        # the batch after update_states is recorded with the stages' arrays (capture_state)
        self.record_plan = self.stage_record_plan() + self.batch_plan
        self.stage_records = [update_stage, *self.stage_record_list()]
        # every group's block table by its name in the trace, and its block_numbers and slot_mapping
        self.block_table_names = tuple(group_name("block_table", g) for g in range(G))
        self.slot_mapping_names = tuple(
            (group_name("block_numbers", g), group_name("slot_mapping", g)) for g in range(G)
        )
        # the flattened token table, a view on its memory, for the input_ids gather
        self.token_ids_flat = self.input_batch.token_ids_cpu_tensor.view(-1)
        self.token_ids_flat_np = self.input_batch.token_ids_cpu.reshape(-1)

    runner = "v1"
    # what the forward reads: copies of the CPU arrays, and slot_mapping computed on the device
    DEVICE_INPUTS: dict[str, object] = {
        "device_inputs": ["input_ids", "positions", "query_start_loc", "seq_lens", "block_table"],
        "slot_mapping_source": "device (from the device block table)",
    }

    @property
    def row_req_ids(self) -> list[str]:
        """The request of each batch row."""
        return self.input_batch.req_ids

    def batch_view(self, moves: list[dict[str, object]]) -> dict[str, Any]:
        return {"req_ids": self.input_batch.req_ids, "moves": moves}

    def dense_sequences(self, v: dict[str, Any]) -> list[tuple[np.ndarray, int]]:
        """Each row's tokens up to its seq_len and its computed count, for the dense check."""
        ib = self.input_batch
        return [
            (ib.token_ids_cpu[row, : v["seq_lens"][row]], int(ib.num_computed_tokens_cpu[row]))
            for row in range(v["num_reqs"])
        ]

    # ---------------------------------------------------------------- persistent batch
    def update_states(self, out: SchedulerOutput) -> list[dict[str, object]]:
        """Remove, update, add (lowest hole first), condense; returns the condense moves."""
        ib = self.input_batch
        scheduled = {s.req_id: s for s in out.scheduled}
        finished = set(out.finished_req_ids)
        for req_id in list(ib.req_id_to_index):
            if req_id in finished or req_id not in scheduled:
                ib.remove_request(req_id)
        for s in out.scheduled:
            row = ib.req_id_to_index.get(s.req_id)
            if row is not None:
                ib.num_computed_tokens_cpu[row] = s.num_computed_tokens
                ib.block_tables.append_row(s.new_group_block_ids, row)
        cached = self._cached_block_ids(out) if self.window_drops else {}
        new = [s for s in out.scheduled if s.kind == "new"]
        rejoining = [s for s in out.scheduled if s.kind != "new" and s.req_id not in ib.req_id_to_index]
        for s in new + rejoining:
            ib.add_request(
                s.req_id,
                s.token_ids,
                s.num_prompt_tokens,
                s.num_computed_tokens,
                s.block_ids,
                cached.get(s.req_id, s.group_block_ids),
            )
        moves = ib.condense()
        num_reqs = ib.num_reqs
        num_scheduled = np.zeros(num_reqs, dtype=np.int32)
        num_draft = np.zeros(num_reqs, dtype=np.int64)
        for req_id, row in ib.req_id_to_index.items():
            s = scheduled[req_id]
            num_scheduled[row] = s.num_scheduled
            if s.spec_token_ids:
                # drafts sit in the token table after the known tokens (vLLM's _update_states);
                # num_tokens does not count them
                n = int(ib.num_tokens[row])
                ib.token_ids_cpu[row, n : n + len(s.spec_token_ids)] = s.spec_token_ids
                ib.token_changes.wrote(row, n, n + len(s.spec_token_ids))
                num_draft[row] = len(s.spec_token_ids)
        self.v = {
            "num_scheduled_tokens": num_scheduled,
            "num_reqs": num_reqs,
            "num_draft_tokens": num_draft,
            "scalars": {},
        }
        self.pad = {}
        return moves

    def _cached_block_ids(self, out: SchedulerOutput) -> dict[str, list[list[int]]]:
        """The block ids the runner knows of each request, per group (CachedRequestState.block_ids):
        a new or resumed request's as the scheduler sent them, then only what each step appends.
        A sliding window's drops never reach the runner, so a request that rejoins the batch after
        a step unscheduled is added with the blocks it knew, not the null block (vLLM's
        _update_states); a resumed one with the scheduler's list, nulls included."""
        cached = self.req_block_ids
        for req_id in out.finished_req_ids:
            cached.pop(req_id, None)
        for s in out.scheduled:
            known = cached.get(s.req_id)
            if s.kind != "running" or known is None:
                cached[s.req_id] = [list(ids) for ids in s.group_block_ids]
            else:
                for ids, new_ids in zip(known, s.new_group_block_ids):
                    ids.extend(new_ids)
        return cached

    def append_sampled(self, sampled: dict[str, int]) -> None:
        """Write this step's sampled tokens into their rows of token_ids_cpu (vectorised). With
        async scheduling the CPU learns them one step late: after the next step's gather."""
        if self.config.async_scheduling:
            self.pending_sampled = dict(sampled)
            return
        self._write_tokens(sampled)

    def append_generated(self, generated: dict[str, list[int]]) -> None:
        """Speculative decoding: each request's accepted drafts plus its bonus or recovered token."""
        ib = self.input_batch
        for req_id, tokens in generated.items():
            row = ib.req_id_to_index[req_id]
            n = int(ib.num_tokens[row])
            ib.token_ids_cpu[row, n : n + len(tokens)] = tokens
            ib.token_changes.wrote(row, n, n + len(tokens))
            ib.num_tokens[row] = n + len(tokens)

    def capture_state(self, values: dict[str, Any]) -> None:
        """The request-level batch arrays (copied) and the system tables (by change:
        core/table_changes.py) after update_states, into the stages' recording. Nothing writes
        them between prepare_inputs and the end of the step's forward
        (tests/test_trace_ownership.py), and the stages' copy of num_tokens serves for both
        records."""
        ib = self.input_batch
        n = values["num_reqs"]  # update_states condensed the batch: the active rows are 0..n-1
        num_tokens = values.get("num_tokens")
        if num_tokens is None or len(num_tokens) != n:
            values["num_tokens"] = ib.num_tokens[:n].copy()
        values["num_computed_tokens_cpu"] = ib.num_computed_tokens_cpu[:n].copy()
        values["token_ids_cpu"] = ib.token_changes.capture(n)  # rows past n are zero (condensed)
        for name, table in zip(self.block_table_names, ib.block_tables.block_tables):
            values[name] = table.changes.capture(n)
        # num_scheduled_tokens: made afresh by update_states, already in values

    def record_batch(self, trace: StepTrace) -> None:
        """Nothing left to record: the batch went in with the stages (capture_state)."""

    def copy_to_device(self, timer: StageTimer) -> bool:
        """Copy inputs to the device; compute slot_mapping there and check it against the CPU's."""
        v = self.v
        T, n = v["T"], v["num_reqs"]
        P = v["scalars"]["num_input_tokens"]
        with timer.dev("copy_to_device"):
            self.input_ids[:T].copy_(self.input_ids_cpu[:T], non_blocking=True)
            if self.config.async_scheduling:
                self.fill_input_ids_from_prev_sampled()
            self.positions[:T].copy_(self.positions_cpu[:T], non_blocking=True)
            # whole buffers, padding included, as vLLM copies them
            self.query_start_loc.copy_(self.query_start_loc_cpu, non_blocking=True)
            self.seq_lens.copy_(self.seq_lens_cpu, non_blocking=True)
            self.req_indices_np[:T] = v["req_indices"]
            self.req_indices[:T].copy_(self.req_indices_cpu[:T], non_blocking=True)
            for table, cpu in zip(self.group_block_table, self.input_batch.block_tables.block_tables):
                table[:n].copy_(cpu.block_table_cpu[:n], non_blocking=True)
        with timer.dev("device_slot_mapping"):
            self.compute_slot_mapping_on_device(T, P)
        return all(
            torch.equal(dev[:P].cpu(), cpu[:P])
            for dev, cpu in zip(self.group_slot_mapping, self.group_slot_mapping_cpu)
        )

    def fill_input_ids_from_prev_sampled(self) -> None:
        """Async scheduling: last step's sampled tokens, still on the device, into this step's
        input_ids: one slice copy when the batch kept its order, else a scatter."""
        v = self.v
        if self.prev_sampled_token_ids is None or v["scalars"]["input_ids_copy"] == "cpu":
            return
        flat = v["sample_flattened_indices"]
        if v["scalars"]["input_ids_copy"] == "one_copy":
            n = len(flat)
            self.input_ids[:n].copy_(self.prev_sampled_token_ids[:n, 0], non_blocking=True)
            return
        index = torch.from_numpy(flat).to(self.device, non_blocking=True)
        rows = torch.from_numpy(v["prev_common_req_indices"]).to(self.device, non_blocking=True)
        self.input_ids.scatter_(0, index, self.prev_sampled_token_ids[rows, 0])

    def keep_sampled_on_device(self, sampled: np.ndarray, kept: np.ndarray) -> None:
        """Async scheduling: this step's sampled tokens (one per batch row) stay on the device for
        the next step; only rows that really sampled (not a partial prefill) are remembered."""
        self.prev_sampled_token_ids = torch.from_numpy(sampled.astype(np.int32)[:, None]).to(self.device)
        self.prev_req_id_to_index = {
            rid: i for i, (rid, k) in enumerate(zip(self.input_batch.req_ids, kept)) if k
        }

    def compute_slot_mapping_on_device(self, T: int, P: int) -> None:
        """Every KV cache group's slot_mapping from its device block table (vLLM's
        MultiGroupBlockTable.compute_slot_mapping: one kernel per group, the same formula)."""
        K, bs = self.max_num_blocks_per_req, self.block_size
        pos = self.positions[:T]
        idx = self.req_indices[:T] * K + torch.div(pos, bs, rounding_mode="floor")
        offsets = pos % bs
        for table, slot_mapping in zip(self.group_block_table, self.group_slot_mapping):
            numbers = table.flatten()[idx].to(torch.int64)
            torch.add(numbers * bs, offsets, out=slot_mapping[:T])
            slot_mapping[T:P] = -1
