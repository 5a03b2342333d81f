"""vLLM 0.33.0's Model Runner V2 (`vllm/v1/worker/gpu/`): state slots, the sorted batch, and the
inputs its Triton kernels build, stage by stage (docs/arrays.md, "Model Runner V2").

V1 keeps a persistent batch whose rows move (condense, swap). V2 keeps requests in fixed state slots
(`RequestState`, states.py): a new or resumed request takes `free_indices.pop()` (the highest free
slot first; a freed slot is the next one reused), and every step the scheduled requests are sorted
(drafts, then decodes, then prefills by ascending chunk length) and linked to their slots by
`idx_mapping`. Per-token inputs come from per-slot state: prefill ids from `all_token_ids`, a
decode's id from `last_sampled_tokens`, positions from the runner's own `num_computed_tokens`,
which `post_update` advances after each forward. The attention kernel reads a block table gathered
per step through `idx_mapping`; `slot_mapping` reads the persistent per-slot table.

Speculative decoding's stages and state updates (drafts kept per slot on the worker) are in
core/runners/v2_spec.py, mixed in.

pagedviz computes the kernels' semantics with vectorised numpy on the CPU (the trace), then builds
the per-token inputs again on the device from the device's copy of the per-slot state, as the
kernels do, and checks that both agree. No Triton is needed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pagedviz.core.device import StageTimer
from pagedviz.core.runners.stages import LEVELS, StagedRunner, group_device_inputs, group_name
from pagedviz.core.runners.v2_block_tables import SlotBlockTables
from pagedviz.core.runners.v2_spec import V2SpecDecode
from pagedviz.core.runners.v2_stages import PAD_SLOT_ID, V2Stages
from pagedviz.core.scenario_parts import EngineConfig
from pagedviz.core.scheduler_output import SchedulerOutput
from pagedviz.core.table_changes import TableChanges
from pagedviz.core.trace import PlanItem, Stage, StepTrace

UPSTREAM_V2 = "vLLM 0.33.0 · Model Runner V2 (vllm/v1/worker/gpu/)"
V2_SOURCE = "https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/v1/worker/gpu/"

V2_LEVELS: dict[str, str] = {
    **LEVELS,
    "idx_mapping": "request",
    "cu_num_logits": "request",
    "expanded_idx_mapping": "logits",
    "expanded_local_pos": "logits",
    "draft_tokens": "system",
    "draft_sampled": "logits",
    "num_sampled": "request",
    "num_rejected": "request",
    "input_block_tables": "system",
    "block_tables": "system",
    "all_token_ids": "system",
    "num_computed_tokens": "slot",
    "prefill_len": "slot",
    "total_len": "slot",
    "last_sampled_tokens": "slot",
    "num_blocks": "slot",
    "is_padding": "token",
}

FINISH_STAGE = Stage(
    "finish_and_add",
    ["scheduler_output"],
    ["num_computed_tokens", "prefill_len", "total_len", "all_token_ids", "block_tables", "num_blocks"],
    "finish_requests: for req_id in sorted(finished_req_ids | preempted_req_ids): "
    "free_indices.append(slot); add_requests: for each scheduled_new_req (new, then resumed): "
    "slot = free_indices.pop(); all_token_ids[slot, :len] = prefill_token_ids; "
    "block_tables[slot, :len(block_ids)] = block_ids; update_requests: "
    "block_tables[slot, num_blocks[slot]:] += new_block_ids",
    "Model Runner V2 keeps each request in a fixed state slot. Finished and preempted requests free "
    "theirs, in sorted request-id order so every rank frees alike. A new request takes the highest "
    "free slot (free_indices.pop()), and a slot just freed is the next one handed out. A resumed "
    "request arrives as a new one, with its prompt and outputs so far, and takes a fresh slot. "
    "Running requests keep their slots and only append new blocks. Nothing moves: there is no "
    "condense.",
)


def _v2_stage_url(path: str) -> str:
    return V2_SOURCE + path


class ModelRunnerV2(V2Stages, V2SpecDecode, StagedRunner):
    """Model Runner V2's state slots, block tables and prepare_inputs (model_runner.py:1388-1593)."""

    flavor = "vllm"
    runner = "v2"
    LEVELS = V2_LEVELS
    STAGES: tuple[str, ...] = (
        "_idx_mapping",
        "_cudagraph_dispatch",
        "_num_logits",
        "_query_start_loc",
        "_seq_lens",
        "_positions",
        "_prefill_inputs",
        "_combine_sampled",
        "_gather_block_tables",
        "_slot_mappings",
        "_attn_metadata",
    )

    def __init__(
        self, config: EngineConfig, device: torch.device, mrope: dict[str, Any] | None = None
    ) -> None:
        if mrope:
            raise ValueError("Model Runner V2's M-RoPE state is not modelled: use model_runner v1")
        self.config = config
        self.device = device
        self.kv_cache_groups = config.kv_cache_groups
        self.num_groups = len(self.kv_cache_groups)
        self.block_size = bs = config.block_size
        self.block_shift = bs.bit_length() - 1 if bs & (bs - 1) == 0 else None  # // and % as shift and mask
        self.max_model_len = config.max_model_len
        M = self.max_num_reqs = config.max_num_reqs
        K = self.max_num_blocks = config.max_num_blocks_per_req
        self.max_num_tokens = T = config.max_num_batched_tokens
        T_pad = max(T, *(config.cudagraph_capture_sizes or (T,)))
        self.buffer_tokens = T_pad
        # RequestState (states.py): slots handed out from the top, reused LIFO
        self.free_indices: list[int] = list(range(M))
        self.req_id_to_index: dict[str, int] = {}
        self.all_token_ids = np.zeros((M, config.max_model_len), dtype=np.int32)
        # every write to all_token_ids tells token_changes (the trace records each step's by change)
        self.token_changes = TableChanges(self.all_token_ids)
        self.prompt_len = np.zeros(M, dtype=np.int32)
        self.prefill_len = np.zeros(M, dtype=np.int32)
        self.total_len = np.zeros(M, dtype=np.int32)
        # the runner's own count (the device's, advanced by post_update) and the scheduler's mirror
        self.num_computed_tokens = np.zeros(M, dtype=np.int32)
        self.num_computed_tokens_np = np.zeros(M, dtype=np.int32)
        self.last_sampled_tokens = np.zeros(M, dtype=np.int64)
        # the drafts each slot's next step verifies (states.py draft_tokens), written by the speculator
        self.num_spec = config.num_speculative_tokens
        self.draft_tokens = np.zeros((M, self.num_spec), dtype=np.int64)
        # BlockTables (block_table.py, v2_block_tables.py): per KV cache group, per slot, plus the
        # per-step gathered copy and slot_mapping; group 0's under vLLM's names (the only ones
        # with one group)
        bt = self.tables = SlotBlockTables(self.kv_cache_groups, M, K, T_pad, device)
        self.sliding_window_reach = bt.sliding_window_reach
        self.group_block_tables, self.group_num_blocks = bt.tables, bt.num_blocks
        self.group_input_block_tables = bt.input_tables
        self.block_tables = self.group_block_tables[0]
        self.num_blocks = self.group_num_blocks[0]
        self.input_block_tables = self.group_input_block_tables[0]
        self.dirty_rows = 0
        self.dirty_tokens = 0
        self.slot_mapping_names = tuple(group_name("slot_mapping", g) for g in range(self.num_groups))
        # InputBuffers (input_batch.py): persistent, so unwritten tails keep stale values
        self.query_start_loc_np = np.zeros(M + 1, dtype=np.int32)
        self.seq_lens_np = np.zeros(M, dtype=np.int32)
        self.input_ids_np = np.zeros(T_pad, dtype=np.int32)
        self.positions_np = np.zeros(T_pad, dtype=np.int64)
        self.group_slot_mapping_np = bt.slot_mapping_np
        self.slot_mapping_np = self.group_slot_mapping_np[0]
        self.arange_np = np.arange(max(M, T_pad) + 1, dtype=np.int64)
        self.block_cols = np.arange(K, dtype=np.int32)
        self.arange_i32 = np.arange(M + 1, dtype=np.int32)  # cu_num_logits without drafts
        dev = device
        self.all_token_ids_dev = torch.zeros((M, config.max_model_len), dtype=torch.int32, device=dev)
        self.num_computed_dev = torch.zeros(M, dtype=torch.int64, device=dev)
        self.last_sampled_dev = torch.zeros(M, dtype=torch.int64, device=dev)
        self.draft_tokens_dev = torch.zeros((M, self.num_spec), dtype=torch.int64, device=dev)
        self.prefill_len_dev = torch.zeros(M, dtype=torch.int64, device=dev)
        self.group_block_tables_dev = bt.tables_dev
        self.block_tables_dev = self.group_block_tables_dev[0]
        self.input_ids = torch.zeros(T_pad, dtype=torch.int32, device=dev)
        self.positions = torch.zeros(T_pad, dtype=torch.int64, device=dev)
        self.group_slot_mapping = bt.slot_mapping_dev
        self.slot_mapping = self.group_slot_mapping[0]
        self.query_start_loc = torch.zeros(M + 1, dtype=torch.int32, device=dev)
        self.seq_lens = torch.zeros(M, dtype=torch.int32, device=dev)
        self.group_block_table = bt.input_tables_dev  # what each group's attention reads
        self.block_table = self.group_block_table[0]
        self.v: dict[str, Any] = {}
        self.pad: dict[str, tuple[int, np.ndarray | None]] = {}
        self.slot_events: list[dict[str, object]] = []
        self.added_rows: list[int] = []
        self.row_req_ids: list[str] = []
        self.build_stage_plan()
        self.state_plan: list[PlanItem] = [
            ("num_computed_tokens", "slot", "finish_and_add", "cpu", None),
            ("prefill_len", "slot", "finish_and_add", "cpu", None),
            ("total_len", "slot", "finish_and_add", "cpu", None),
            ("num_blocks", "slot", "finish_and_add", "cpu", None),
            ("last_sampled_tokens", "slot", "combine_sampled_and_draft_tokens", "device", None),
            ("all_token_ids", "system", "finish_and_add", "cpu", None),
            ("block_tables", "system", "finish_and_add", "cpu", None),
        ]
        if self.num_spec:
            self.state_plan.append(
                ("draft_tokens", "system", "combine_sampled_and_draft_tokens", "device", None)
            )
        # every group's per-slot table and block count: group g >= 1 as block_tables_g{g}, num_blocks_g{g}
        finish, group_plan = bt.group_records(FINISH_STAGE)
        self.state_plan += group_plan
        if self.num_groups > 1:
            self.DEVICE_INPUTS = group_device_inputs(
                self.DEVICE_INPUTS, self.kv_cache_groups, "input_block_tables"
            )
        # the slot state is recorded with the stages' arrays (capture_state), after finish_and_add
        self.record_plan = self.stage_record_plan() + self.state_plan
        self.stage_records = [finish, *self.stage_record_list()]

    uses_mrope = False
    # what the forward reads: built on the device from the device's per-slot state
    DEVICE_INPUTS: dict[str, object] = {
        "device_inputs": ["input_ids", "positions", "seq_lens", "slot_mapping", "input_block_tables"],
        "slot_mapping_source": "device (from the per-slot block tables through idx_mapping)",
    }

    # ---------------------------------------------------------------- state slots
    def _free(self, req_id: str) -> None:
        slot = self.req_id_to_index.pop(req_id, None)
        if slot is not None:
            self.free_indices.append(slot)
            self.slot_events.append({"req_id": req_id, "slot": slot, "event": "freed"})

    def update_states(self, out: SchedulerOutput) -> list[dict[str, object]]:
        """finish_requests, add_requests, update_requests (model_runner.py:1188-1289); V2 has no
        condense, so there are no moves."""
        self.slot_events = []
        for req_id in sorted(set(out.finished_req_ids) | set(out.preempted_req_ids)):
            self._free(req_id)
        scheduled = {s.req_id: s for s in out.scheduled}
        added: list[int] = []
        new_ids = out.new_req_ids  # a property that builds its list: read once, not per request
        new = set(new_ids)
        for req_id in new_ids:
            s = scheduled[req_id]
            self._free(req_id)  # a streaming-input update re-adds; never the case here
            slot = self.free_indices.pop()
            self.req_id_to_index[req_id] = slot
            n = len(s.token_ids)
            self.all_token_ids[slot, :n] = s.token_ids
            self.token_changes.wrote(slot, 0, n)
            self.prompt_len[slot] = s.num_prompt_tokens
            self.prefill_len[slot] = self.total_len[slot] = n
            self.num_computed_tokens[slot] = self.num_computed_tokens_np[slot] = s.num_computed_tokens
            self.tables.append_block_ids(slot, s.group_block_ids, overwrite=True)  # the tail stays stale
            self.draft_tokens[slot] = 0
            added.append(slot)
            self.slot_events.append({"req_id": req_id, "slot": slot, "event": "added"})
        for s in out.scheduled:
            if s.req_id in new:
                continue
            slot = self.req_id_to_index[s.req_id]
            self.num_computed_tokens_np[slot] = s.num_computed_tokens
            self.tables.append_block_ids(slot, s.new_group_block_ids, overwrite=False)
        self.added_rows = added
        self._stage_to_device(added, [self.req_id_to_index[s.req_id] for s in out.scheduled])
        self.v = {
            "scheduled_req_ids": [s.req_id for s in out.scheduled],
            "scheduler_num_scheduled": np.fromiter(
                (s.num_scheduled for s in out.scheduled), dtype=np.int32, count=len(out.scheduled)
            ),
            "scheduler_num_draft": np.fromiter(
                (len(s.spec_token_ids) for s in out.scheduled), dtype=np.int32, count=len(out.scheduled)
            ),
            "scalars": {},
        }
        self.pad = {}
        return []

    def _stage_to_device(self, added: list[int], touched: list[int]) -> None:
        """apply_staged_writes: the rows written this step reach the device's copy of the state
        (only their written heads: the prefill tokens, the blocks)."""
        dev = self.device
        if added:
            idx = np.asarray(added, dtype=np.int64)
            rows = torch.from_numpy(idx).to(dev)
            w = int(self.prefill_len[idx].max())
            src = torch.from_numpy(self.all_token_ids[idx, :w]).to(dev)
            self.all_token_ids_dev[:, :w].index_copy_(0, rows, src)
            nc = torch.from_numpy(self.num_computed_tokens[idx].astype(np.int64)).to(dev)
            self.num_computed_dev.index_copy_(0, rows, nc)
            self.prefill_len_dev.index_copy_(
                0, rows, torch.from_numpy(self.prefill_len[idx].astype(np.int64)).to(dev)
            )
            self.draft_tokens_dev[rows] = 0
        self.tables.stage_to_device(touched)

    @property
    def slots(self) -> dict[str, int]:
        return dict(self.req_id_to_index)

    # ---------------------------------------------------------------- after prepare_inputs
    def capture_state(self, values: dict[str, Any]) -> None:
        """The slot state after finish_and_add and update_requests (what this step's kernels read)
        into the stages' recording, the per-slot vectors copied and the tables by change
        (core/table_changes.py): nothing changes it before post_update, after the forward."""
        values["num_computed_tokens"] = self.num_computed_tokens.copy()
        values["prefill_len"] = self.prefill_len.copy()
        values["total_len"] = self.total_len.copy()
        values["num_blocks"] = self.num_blocks.copy()
        values["last_sampled_tokens"] = self.last_sampled_tokens.copy()
        values["all_token_ids"] = self.token_changes.capture()
        values["block_tables"] = self.tables.changes[0].capture()
        self.tables.capture(values)  # groups 1..
        if self.num_spec:
            values["draft_tokens"] = self.draft_tokens.copy()

    def record_batch(self, trace: StepTrace) -> None:
        """Nothing left to record: the slot state went in with the stages (capture_state)."""

    def append_sampled(self, sampled: dict[str, int]) -> None:
        self.post_update(sampled)

    def batch_view(self, moves: list[dict[str, object]]) -> dict[str, Any]:
        return {
            "req_ids": list(self.row_req_ids),
            "moves": [],
            "slots": self.slots,
            "free_slots": self.free_indices[::-1],
            "slot_events": list(self.slot_events),
        }

    def copy_to_device(self, timer: StageTimer) -> bool:
        """Build the per-token inputs on the device from the device's per-slot state, as the kernels
        do, and check them against the CPU's."""
        v = self.v
        T, R, P = v["T"], v["num_reqs"], v["num_tokens_after_padding"]
        dev = self.device
        with timer.dev("copy_to_device"):
            idx = torch.from_numpy(v["idx_mapping"]).to(dev, non_blocking=True)
            n = torch.from_numpy(v["num_scheduled_tokens"].astype(np.int64)).to(dev, non_blocking=True)
            self.query_start_loc.copy_(torch.from_numpy(self.query_start_loc_np), non_blocking=True)
        with timer.dev("device_inputs"):
            rows = torch.repeat_interleave(torch.arange(R, device=dev), n)
            starts = torch.repeat_interleave(torch.cumsum(n, 0) - n, n)
            slot = idx[rows]
            nc = self.num_computed_dev[slot]
            pos = nc + torch.arange(T, device=dev) - starts
            self.positions[:T] = pos
            self.seq_lens[:R] = (self.num_computed_dev[idx] + n).to(torch.int32)
            self.seq_lens[R:] = 0
            ids = self.all_token_ids_dev[slot, pos.clamp(max=self.max_model_len - 1)]
            if "draft_at" in v:
                # the indices come from cu_num_logits and query_start_loc; the values from the
                # device's per-slot state, as the kernel reads them
                last_at = torch.from_numpy(v["last_at"]).to(dev)
                write_last = torch.from_numpy(v["last_src"]).to(dev)
                ids[last_at] = self.last_sampled_dev[write_last].to(torch.int32)
                at = torch.from_numpy(v["draft_at"]).to(dev)
                src, k = (torch.from_numpy(a).to(dev) for a in v["draft_src"])
                ids[at] = self.draft_tokens_dev[src, k].to(torch.int32)
            else:
                decoding = self.seq_lens[:R].to(torch.int64) > self.prefill_len_dev[idx]
                last = torch.cumsum(n, 0) - 1
                ids[last[decoding]] = self.last_sampled_dev[idx[decoding]].to(torch.int32)
            self.input_ids[:T] = ids
            bs = self.block_size
            col = torch.div(pos, bs, rounding_mode="floor")
            offsets = pos % bs
            for g in range(self.num_groups):  # compute_slot_mappings: one program row a group
                suffix = f"_g{g}" if g else ""
                blocks = self.group_block_tables_dev[g][slot, col].to(torch.int64)
                slot_mapping = self.group_slot_mapping[g]
                slot_mapping[:T] = blocks * bs + offsets
                slot_mapping[T:] = PAD_SLOT_ID
                gathered = torch.from_numpy(v["input_block_tables" + suffix]).to(dev)
                self.group_block_table[g][: v["num_reqs_padded"]] = gathered
        agree = (
            all(
                torch.equal(
                    self.group_slot_mapping[g][:P].cpu(), torch.from_numpy(v[group_name("slot_mapping", g)])
                )
                for g in range(self.num_groups)
            )
            and torch.equal(self.positions[:T].cpu(), torch.from_numpy(v["positions"]))
            and torch.equal(self.input_ids[:T].cpu(), torch.from_numpy(v["input_ids"]))
        )
        return bool(agree)

    def post_update(self, sampled: dict[str, int]) -> None:
        """post_update (input_batch.py:565-686) after the forward: each row that sampled appends its
        token to its slot's all_token_ids and keeps it as last_sampled_tokens; every row advances
        its slot's num_computed_tokens by its scheduled tokens. On the CPU mirror and the device."""
        v = self.v
        R = v.get("num_reqs", 0)
        if not R:
            return
        idx = v["idx_mapping"]
        self.num_computed_tokens[idx] += v["num_scheduled_tokens"]
        ids = [r for r in self.row_req_ids if r in sampled]
        dev = self.device
        idx_dev = torch.from_numpy(idx).to(dev)
        self.num_computed_dev[idx_dev] += torch.from_numpy(v["num_scheduled_tokens"].astype(np.int64)).to(dev)
        if not ids:
            return
        slots = np.fromiter((self.req_id_to_index[r] for r in ids), dtype=np.int64, count=len(ids))
        tokens = np.fromiter((sampled[r] for r in ids), dtype=np.int64, count=len(ids))
        self.last_sampled_tokens[slots] = tokens
        at = self.total_len[slots]
        room = at < self.max_model_len
        index = slots[room] * self.max_model_len  # flat: the write and its record share it
        index += at[room]
        self.token_changes.flat[index] = tokens[room]
        self.token_changes.wrote_flat(index)
        self.total_len[slots] += 1
        s_dev = torch.from_numpy(slots).to(dev)
        t_dev = torch.from_numpy(tokens).to(dev)
        self.last_sampled_dev[s_dev] = t_dev
        if room.all():
            self.all_token_ids_dev[s_dev, torch.from_numpy(at.astype(np.int64)).to(dev)] = t_dev.to(
                torch.int32
            )

    def dense_sequences(self, v: dict[str, Any]) -> list[tuple[np.ndarray, int]]:
        """Each row's tokens up to its seq_len (its slot's known tokens, then this step's input
        ids, which hold the drafts) and its computed count, for the dense check."""
        out = []
        q = v["query_start_loc"]
        for i in range(v["num_reqs"]):
            j = int(v["idx_mapping"][i])
            nc = int(self.num_computed_tokens[j])
            row = np.concatenate([self.all_token_ids[j, :nc], v["input_ids"][q[i] : q[i + 1]]])
            out.append((row, nc))
        return out
