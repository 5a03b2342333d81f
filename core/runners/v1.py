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

from pagedviz.core.config import EngineConfig
from pagedviz.core.device import StageTimer
from pagedviz.core.input_batch import InputBatch, cpu_tensor
from pagedviz.core.runners.mrope import MRope
from pagedviz.core.runners.stages import StagedRunner, stage
from pagedviz.core.scheduler import SchedulerOutput
from pagedviz.core.spec_decode import calc_spec_decode_metadata
from pagedviz.core.trace import PlanItem, Stage, StepTrace

# below this many tokens input_ids is gathered with numpy's take (torch's index_select has a
# larger fixed cost; it wins on big batches): benchmarks/prepare_inputs.py measures both sides
SMALL_GATHER = 2048


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


class ModelRunner(StagedRunner):
    """Persistent batch + prepare_inputs of the vllm flavour's V1 runner."""

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
        self.block_size = config.block_size
        bs = config.block_size
        self.block_shift = bs.bit_length() - 1 if bs & (bs - 1) == 0 else None
        self.max_model_len = config.max_model_len
        self.max_num_blocks_per_req = config.max_num_blocks_per_req
        self.mrope = mrope or {}  # per request, when the model uses M-RoPE
        pin = device.type == "cuda"
        R, T = config.max_num_reqs, config.max_num_batched_tokens
        T_pad = max(T, *(config.cudagraph_capture_sizes or (T,)))
        self.input_batch = InputBatch(R, config.max_model_len, self.max_num_blocks_per_req, pin)
        self.arange_np = np.arange(max(R, T_pad) + 1, dtype=np.int64)
        self.input_ids_cpu = cpu_tensor((T_pad,), torch.int32, pin)
        self.input_ids_np = self.input_ids_cpu.numpy()
        self.positions_cpu = cpu_tensor((T_pad,), torch.int64, pin)
        self.positions_np = self.positions_cpu.numpy()
        self.query_start_loc_cpu = cpu_tensor((R + 1,), torch.int32, pin)
        self.query_start_loc_np = self.query_start_loc_cpu.numpy()
        self.seq_lens_cpu = cpu_tensor((R,), torch.int32, pin)
        self.seq_lens_np = self.seq_lens_cpu.numpy()
        self.slot_mapping_cpu = cpu_tensor((T_pad,), torch.int64, pin)
        self.slot_mapping_np = self.slot_mapping_cpu.numpy()
        self.req_indices_cpu = cpu_tensor((T_pad,), torch.int64, pin)
        self.req_indices_np = self.req_indices_cpu.numpy()
        dev = device
        self.input_ids = torch.zeros(T_pad, dtype=torch.int32, device=dev)
        self.positions = torch.zeros(T_pad, dtype=torch.int64, device=dev)
        self.query_start_loc = torch.zeros(R + 1, dtype=torch.int32, device=dev)
        self.seq_lens = torch.zeros(R, dtype=torch.int32, device=dev)
        self.slot_mapping = torch.zeros(T_pad, dtype=torch.int64, device=dev)
        self.req_indices = torch.zeros(T_pad, dtype=torch.int64, device=dev)
        self.block_table = torch.zeros((R, self.max_num_blocks_per_req), dtype=torch.int32, device=dev)
        # async scheduling: last step's sampled tokens stay on the device, in last step's row order
        self.prev_sampled_token_ids: torch.Tensor | None = None
        self.prev_req_id_to_index: dict[str, int] = {}
        self.pending_sampled: dict[str, int] = {}  # known to the CPU only after the next gather
        self.v: dict[str, Any] = {}  # the arrays of the step being prepared, by vLLM name
        # name -> (valid, the whole persistent buffer whose head is the array, or None)
        self.pad: dict[str, tuple[int, np.ndarray | None]] = {}
        self.build_stage_plan()
        # record_stages' copy of num_tokens, which record_batch records again
        self.recorded_num_tokens: np.ndarray | None = None
        ib = self.input_batch
        self.batch_plan: list[PlanItem] = [
            ("num_scheduled_tokens", "request", "update_states", "cpu", None),
            ("num_computed_tokens_cpu", "request", "update_states", "cpu", None),
            ("num_tokens", "request", "update_states", "cpu", None),
            ("token_ids_cpu", "system", "update_states", "cpu", ib.token_ids_cpu.shape),
            ("block_table", "system", "update_states", "cpu", ib.block_table.block_table_np.shape),
        ]
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

    @property
    def uses_mrope(self) -> bool:
        return bool(self.mrope)

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
                ib.block_table.append_row(s.new_block_ids, row)
        new = [s for s in out.scheduled if s.kind == "new"]
        rejoining = [s for s in out.scheduled if s.kind != "new" and s.req_id not in ib.req_id_to_index]
        for s in new + rejoining:
            ib.add_request(s.req_id, s.token_ids, s.num_prompt_tokens, s.num_computed_tokens, s.block_ids)
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
                num_draft[row] = len(s.spec_token_ids)
        self.v = {
            "num_scheduled_tokens": num_scheduled,
            "num_reqs": num_reqs,
            "num_draft_tokens": num_draft,
            "scalars": {},
        }
        self.pad = {}
        self.recorded_num_tokens = None
        return moves

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
            ib.num_tokens[row] = n + len(tokens)

    def _write_tokens(self, sampled: dict[str, int]) -> None:
        ib = self.input_batch
        sampled = {r: t for r, t in sampled.items() if r in ib.req_id_to_index}
        if not sampled:
            return
        rows = np.array([ib.req_id_to_index[r] for r in sampled], dtype=np.int64)
        ib.token_ids_cpu[rows, ib.num_tokens[rows]] = np.fromiter(sampled.values(), dtype=np.int32)
        ib.num_tokens[rows] += 1

    # ---------------------------------------------------------------- prepare_inputs stages
    @stage(
        "req_indices",
        "num_scheduled_tokens",
        "req_indices",
        "req_indices = repeat(arange(num_reqs), num_scheduled_tokens)",
        "Which batch row each scheduled token belongs to: row i repeated num_scheduled_tokens[i] "
        "times (np.repeat in GPUModelRunner._prepare_inputs).",
    )
    def _req_indices(self) -> None:
        v = self.v
        v["req_indices"] = self.arange_np[: v["num_reqs"]].repeat(v["num_scheduled_tokens"])

    @stage(
        "cu_num_tokens",
        "num_scheduled_tokens",
        "cu_num_tokens arange",
        "cu_num_tokens = cumsum(num_scheduled_tokens); "
        "arange = arange(T) - repeat(cu_num_tokens - num_scheduled_tokens, num_scheduled_tokens)",
        "_get_cumsum_and_arange: the running total of scheduled tokens and an arange that restarts "
        "at 0 for every request (vLLM keeps it in query_pos), without a Python loop.",
    )
    def _cu_num_tokens(self) -> None:
        v = self.v
        n = v["num_scheduled_tokens"]
        cu = np.add.accumulate(n, dtype=np.int64)  # = n.cumsum(dtype=np.int64), in half the time
        v["T"] = int(cu[-1]) if len(cu) else 0
        v["cu_num_tokens"] = cu
        offsets = (cu - n).repeat(n)
        v["arange"] = np.subtract(self.arange_np[: v["T"]], offsets, out=offsets)

    @stage(
        "positions",
        "num_computed_tokens_cpu req_indices arange",
        "positions",
        "positions = num_computed_tokens_cpu[req_indices] + arange",
        "Each token's position in its own sequence: what the request had computed before this step "
        "plus its offset in this step. RoPE rotates by it. vLLM 0.33 computes the same sum on the "
        "device from its device copy of num_computed_tokens.",
        views="positions",
    )
    def _positions(self) -> None:
        v = self.v
        out = self.positions_np[: v["T"]]
        np.add(self.input_batch.num_computed_tokens_cpu[v["req_indices"]], v["arange"], out=out)
        v["positions"] = out

    @stage(
        "mrope_positions",
        "positions num_computed_tokens_cpu num_scheduled_tokens",
        "mrope_positions",
        "prompt part: mrope_positions[:, j] = req.mrope_positions[:, num_computed + j] (from "
        "get_mrope_input_positions); completion part: arange(num_computed + delta, ...) on all 3 rows",
        "M-RoPE (Qwen2-VL): three position rows (t, h, w) per token. Text tokens count up equally on "
        "all three; an image's t x h x w placeholder tokens take their grid coordinates from the "
        "position the image starts at; the text after the image continues at max + 1, so the image "
        "uses max(t, h, w) positions instead of t*h*w (mrope_position_delta = max + 1 - num_prompt "
        "is negative). _calc_mrope_positions copies the prompt's precomputed columns and computes "
        "the decoded tokens' columns as position + delta. The tiny model still rotates by the 1-D "
        "positions.",
        when=lambda r: r.uses_mrope,
    )
    def _mrope_positions(self) -> None:
        v = self.v
        ib = self.input_batch
        out = np.empty((3, v["T"]), dtype=np.int64)
        ptr = 0
        for row, req_id in enumerate(ib.req_ids):  # one slice per request, as vLLM does
            m = self.mrope[req_id]
            computed = int(ib.num_computed_tokens_cpu[row])
            n = int(v["num_scheduled_tokens"][row])
            num_prompt = m.positions.shape[1]
            prompt_part = max(0, min(n, num_prompt - computed))
            out[:, ptr : ptr + prompt_part] = m.positions[:, computed : computed + prompt_part]
            start = computed + prompt_part
            out[:, ptr + prompt_part : ptr + n] = np.arange(start, computed + n) + m.delta
            ptr += n
        v["mrope_positions"] = out

    @stage(
        "token_indices",
        "positions req_indices",
        "token_indices",
        "token_indices = positions + req_indices * M",
        "Where each token sits in the flattened token table token_ids_cpu [max_num_reqs, M]: its row "
        "times the row length M = max_model_len (token_ids_cpu.shape[1]) plus its position.",
    )
    def _token_indices(self) -> None:
        v = self.v
        token_indices = v["req_indices"] * self.max_model_len
        token_indices += v["positions"]
        v["token_indices"] = token_indices

    @stage(
        "input_ids",
        "token_ids_cpu token_indices",
        "input_ids",
        "input_ids = token_ids_cpu.flatten()[token_indices]",
        "The model's input ids, gathered from the token table with token_indices in one "
        "torch.index_select (faster than np.take for large tables).",
        views="input_ids",
    )
    def _input_ids(self) -> None:
        v = self.v
        T = v["T"]
        out = self.input_ids_np[:T]  # a numpy slice wraps as a tensor faster than torch slices
        if T < SMALL_GATHER:  # a small batch: numpy's take, whose fixed cost is a third of torch's
            self.token_ids_flat_np.take(v["token_indices"], out=out)
        else:
            torch.index_select(
                self.token_ids_flat, 0, torch.from_numpy(v["token_indices"]), out=torch.from_numpy(out)
            )
        v["input_ids"] = out

    @stage(
        "token_indices_whatif",
        "positions req_indices token_ids_cpu token_indices",
        "token_indices_whatif input_ids_whatif whatif_wrong",
        "WHAT IF (wrong): token_indices_whatif = positions + req_indices * K * block_size, "
        "K = ceil(M / block_size); whatif_wrong = token_indices_whatif != token_indices",
        "Counterfactual, not what vLLM does: why token_indices multiplies by max_model_len. The "
        "token table's rows are M = max_model_len long; block rows hold K = ceil(M / block_size) "
        "blocks, i.e. K * block_size >= M slots. When M % block_size != 0 the two differ, so "
        "striding by K * block_size lands every request past row 0 in the wrong cell (the next "
        "row's tokens, or past the table: -1) and input_ids_whatif reads wrong ids.",
        when=lambda r: r.max_model_len % r.block_size != 0,
    )
    def _token_indices_whatif(self) -> None:
        v = self.v
        table = self.input_batch.token_ids_cpu.ravel()
        whatif = v["positions"] + v["req_indices"] * (self.max_num_blocks_per_req * self.block_size)
        inside = whatif < table.size
        v["token_indices_whatif"] = whatif
        v["input_ids_whatif"] = np.where(inside, table[np.where(inside, whatif, 0)], -1).astype(np.int32)
        v["whatif_wrong"] = whatif != v["token_indices"]

    @stage(
        "block_table_indices",
        "req_indices positions",
        "block_table_indices",
        "block_table_indices = req_indices * K + positions // block_size",
        "Which cell of the flattened block table [max_num_reqs, K] holds each token's block. This is "
        "the CPU path of vLLM up to 0.10; vLLM 0.33 does this and the next two stages on the device "
        "in one Triton kernel (BlockTable.compute_slot_mapping) from query_start_loc, positions and "
        "the device block table. pagedviz does both and checks they agree.",
    )
    def _block_table_indices(self) -> None:
        v = self.v
        positions = v["positions"]
        # a power-of-two block size divides by a shift (positions are never negative)
        shift = self.block_shift
        indices = positions // self.block_size if shift is None else positions >> shift
        indices += v["req_indices"] * self.max_num_blocks_per_req
        v["block_table_indices"] = indices

    @stage(
        "block_numbers",
        "block_table block_table_indices",
        "block_numbers",
        "block_numbers = block_table.flatten()[block_table_indices]",
        "Each token's physical KV block, read from its request's block-table row.",
    )
    def _block_numbers(self) -> None:
        v = self.v
        v["block_numbers"] = self.input_batch.block_table.block_table_np.ravel()[v["block_table_indices"]]

    @stage(
        "block_offsets",
        "positions",
        "block_offsets",
        "block_offsets = positions % block_size",
        "Each token's slot inside its block.",
    )
    def _block_offsets(self) -> None:
        v = self.v
        if self.block_shift is None:
            v["block_offsets"] = v["positions"] % self.block_size
        else:
            v["block_offsets"] = v["positions"] & (self.block_size - 1)

    @stage(
        "slot_mapping",
        "block_numbers block_offsets",
        "slot_mapping",
        "slot_mapping = block_numbers * block_size + block_offsets; "
        "slot_mapping[T:num_input_tokens] = -1 (PAD_SLOT_ID)",
        "The global KV-cache slot where each token's K and V are written. With CUDA graphs the "
        "token count T is padded to the next capture size, num_input_tokens: the padded tokens run "
        "through the graph's layers, but their slot is -1, which the cache-write kernel "
        "(reshape_and_cache_flash) skips, so they write nothing. Attention reads the first T "
        "entries only (`valid` in the trace).",
        views="slot_mapping",
    )
    def _slot_mapping(self) -> None:
        v = self.v
        T = v["T"]
        out = self.slot_mapping_np[:T]
        np.multiply(v["block_numbers"], self.block_size, out=out, dtype=np.int64)
        np.add(out, v["block_offsets"], out=out)
        # with CUDA graphs the batch is padded to a capture size; padded slots are -1 (written nowhere)
        P = v["num_input_tokens"] = self.config.pad_for_cudagraph(T) if T else 0
        if P > T:
            self.slot_mapping_np[T:P] = -1
            self.pad["slot_mapping"] = (T, None)
        v["slot_mapping"] = self.slot_mapping_np[:P]

    @stage(
        "query_start_loc",
        "cu_num_tokens",
        "query_start_loc",
        "query_start_loc = [0, *cu_num_tokens]; query_start_loc[num_reqs + 1:] = cu_num_tokens[-1]",
        "Where each request's tokens start in the flat batch, plus the end: num_reqs + 1 entries, "
        "which FlashAttention's varlen kernel reads as cu_seqlens_q. The persistent buffer has "
        "max_num_reqs + 1 entries; past num_reqs it repeats the last value so it stays "
        "non-decreasing, as FlashAttention requires: a kernel launched over more (padded) requests "
        "sees empty queries there (`buffer` in the trace).",
        views="query_start_loc",
    )
    def _query_start_loc(self) -> None:
        v = self.v
        n = v["num_reqs"]
        self.query_start_loc_np[0] = 0
        self.query_start_loc_np[1 : n + 1] = v["cu_num_tokens"]
        self.query_start_loc_np[n + 1 :] = v["T"]
        v["query_start_loc"] = self.query_start_loc_np[: n + 1]
        if n:
            self.pad["query_start_loc"] = (n + 1, self.query_start_loc_np)

    @stage(
        "seq_lens",
        "num_computed_tokens_cpu num_scheduled_tokens",
        "seq_lens",
        "seq_lens[:num_reqs] = num_computed_tokens_cpu + num_scheduled_tokens; seq_lens[num_reqs:] = 0",
        "Each request's length after this step, computed + scheduled tokens: attention reads this "
        "many keys through the request's block-table row (FlashAttention's seqused_k). Past "
        "num_reqs the buffer is 0, so a padded request attends to nothing.",
        views="seq_lens",
    )
    def _seq_lens(self) -> None:
        v = self.v
        n = v["num_reqs"]
        np.add(
            self.input_batch.num_computed_tokens_cpu[:n], v["num_scheduled_tokens"], out=self.seq_lens_np[:n]
        )
        self.seq_lens_np[n:] = 0
        v["seq_lens"] = self.seq_lens_np[:n]
        if n:
            self.pad["seq_lens"] = (n, self.seq_lens_np)

    @stage(
        "prepare_input_ids",
        "input_ids prev_sampled_token_ids prev_positions cu_num_tokens",
        "prev_sampled_token_ids prev_positions sample_flattened_indices prev_common_req_indices "
        "input_ids_device input_ids_copy",
        "prev_positions[i] = prev_req_id_to_index.get(req_ids[i], -1); for rows with "
        "prev_positions >= 0: sample_flattened_indices = cu_num_tokens - 1; one copy "
        "input_ids[:n] = prev_sampled_token_ids[:n, 0] if sample_flattened_indices == prev_positions "
        "== arange(n), else input_ids.scatter_(0, sample_flattened_indices, "
        "prev_sampled_token_ids[prev_common_req_indices, 0])",
        "Async scheduling: the scheduler planned this step before the last step's sampled tokens "
        "reached the CPU, so a decode request's input token is only a placeholder in token_ids_cpu "
        "(0 here) and in the CPU input_ids. _prepare_input_ids copies input_ids to the device, then "
        "fills each such token on the device from prev_sampled_token_ids (last step's rows): when "
        "the batch kept its order the requests are rows 0..n-1 in both steps and one slice copy "
        "does it; otherwise a scatter by (sample_flattened_indices, prev_common_req_indices).",
        when=lambda r: r.config.async_scheduling,
        views="prev_sampled_token_ids",
    )
    def _prepare_input_ids(self) -> None:
        v = self.v
        ib = self.input_batch
        prev = self.prev_req_id_to_index
        prev_positions = np.array([prev.get(r, -1) for r in ib.req_ids], dtype=np.int64)
        common = np.flatnonzero(prev_positions >= 0)
        flat = v["cu_num_tokens"][common] - 1
        prev_idx = prev_positions[common]
        if not len(common):
            mode = "cpu"  # nothing in common with the last step: the CPU ids are all real
        elif (flat == prev_idx).all() and (len(flat) == 0 or flat.max() == len(common) - 1):
            mode = "one_copy"
        else:
            mode = "scatter"
        v["prev_positions"] = prev_positions
        v["sample_flattened_indices"] = flat
        v["prev_common_req_indices"] = prev_idx
        v["scalars"]["input_ids_copy"] = mode
        if self.prev_sampled_token_ids is not None:
            v["prev_sampled_token_ids"] = self.prev_sampled_token_ids[:, 0].cpu().numpy()
        # the CPU catches up with last step's tokens after the gather (vLLM: in _update_states)
        self._write_tokens(self.pending_sampled)
        self.pending_sampled = {}

    @stage(
        "logits_indices",
        "seq_lens num_tokens query_start_loc",
        "discard_request_mask logits_indices",
        "discard_request_mask = seq_lens < num_tokens; logits_indices = query_start_loc[1:] - 1",
        "The hidden state of each request's last scheduled token goes to the LM head. A request in "
        "the middle of a chunked prefill (seq_lens < num_tokens) is sampled too, for simplicity, "
        "and its token discarded (discard_request_mask).",
        views="num_tokens",
    )
    def _logits_indices(self) -> None:
        v = self.v
        n = v["num_reqs"]
        v["num_tokens"] = self.input_batch.num_tokens[:n]
        v["discard_request_mask"] = v["seq_lens"] < v["num_tokens"]
        v["logits_indices"] = np.subtract(v["query_start_loc"][1:], 1, dtype=np.int64)

    @stage(
        "spec_decode_metadata",
        "num_draft_tokens cu_num_tokens input_ids",
        "num_draft_tokens cu_num_draft_tokens num_sampled_tokens cu_num_sampled_tokens logits_indices "
        "target_logits_indices bonus_logits_indices draft_token_ids",
        "num_sampled_tokens = num_draft_tokens + 1; logits_indices = repeat(cu_num_tokens - "
        "num_sampled_tokens, num_sampled_tokens) + arange; bonus_logits_indices = "
        "cu_num_sampled_tokens - 1; target_logits_indices = repeat(cu_num_sampled_tokens - "
        "num_sampled_tokens, num_draft_tokens) + arange; draft_token_ids = "
        "input_ids[logits_indices][target_logits_indices + 1]",
        "_calc_spec_decode_metadata: a request with k drafts scheduled k + 1 tokens (its last known "
        "token, then the drafts) and needs the logits of all k + 1: the first k verify the drafts "
        "(target_logits_indices, rows of the logits), the last gives the bonus token if every draft "
        "is accepted (bonus_logits_indices). A request without drafts reads one row, as before.",
        when=lambda r: r.config.num_speculative_tokens > 0,
    )
    def _spec_decode_metadata(self) -> None:
        v = self.v
        if not v["num_reqs"]:
            return
        meta = calc_spec_decode_metadata(v["num_draft_tokens"], v["cu_num_tokens"])
        v.update(meta)
        v["draft_token_ids"] = v["input_ids"][meta["logits_indices"]][meta["target_logits_indices"] + 1]

    @stage(
        "attn_metadata",
        "num_scheduled_tokens seq_lens slot_mapping",
        "num_reqs total_num_scheduled_tokens num_input_tokens max_query_len max_seq_len",
        "num_input_tokens = pad_for_cudagraph(T); max_query_len = max(num_scheduled_tokens); "
        "max_seq_len = max(seq_lens); num_reqs is not padded",
        "Scalars the attention backend is built with: num_reqs, the real request count (with "
        "piecewise CUDA graphs attention runs outside the graph, so request counts are not padded; "
        "vLLM pads them only for FULL graphs of uniform decode batches, which pagedviz does not "
        "model), total_num_scheduled_tokens (num_actual_tokens), num_input_tokens (the token count "
        "padded to a capture size), the longest query and the longest sequence.",
    )
    def _attn_metadata(self) -> None:
        v = self.v
        n = v["num_reqs"]
        scalars = v["scalars"]
        scalars["num_reqs"] = n
        scalars["total_num_scheduled_tokens"] = v["T"]
        scalars["num_input_tokens"] = v["num_input_tokens"]
        # a[a.argmax()] is a.max() without the ufunc reduction's fixed cost (a third of it)
        q, s = v["num_scheduled_tokens"], v["seq_lens"]
        scalars["max_query_len"] = int(q[q.argmax()]) if n else 0
        scalars["max_seq_len"] = int(s[s.argmax()]) if n else 0

    def record_batch(self, trace: StepTrace) -> None:
        """Record the request-level batch arrays and the system tables after update_states.
        Nothing writes num_tokens between prepare_inputs and here (tests/test_trace_ownership.py),
        so the copy record_stages made of it serves again."""
        ib, v = self.input_batch, self.v
        n = v["num_reqs"]  # update_states condensed the batch: the active rows are 0..n-1
        trace.stages.insert(0, UPDATE_STATES_STAGE)
        num_tokens = self.recorded_num_tokens
        self.recorded_num_tokens = None
        if num_tokens is None or len(num_tokens) != n:
            num_tokens = ib.num_tokens[:n].copy()
        values = {
            "num_scheduled_tokens": v["num_scheduled_tokens"],  # made afresh by update_states
            "num_computed_tokens_cpu": ib.num_computed_tokens_cpu[:n].copy(),
            "num_tokens": num_tokens,
            "token_ids_cpu": ib.token_ids_cpu[:n].copy(),
            "block_table": ib.block_table.block_table_np[:n].copy(),
        }
        trace.record_all(self.batch_plan, values, {})

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
            self.block_table[:n].copy_(self.input_batch.block_table.block_table_cpu[:n], non_blocking=True)
        with timer.dev("device_slot_mapping"):
            self.compute_slot_mapping_on_device(T, P)
        return bool(torch.equal(self.slot_mapping[:P].cpu(), self.slot_mapping_cpu[:P]))

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
        K, bs = self.max_num_blocks_per_req, self.block_size
        pos = self.positions[:T]
        idx = self.req_indices[:T] * K + torch.div(pos, bs, rounding_mode="floor")
        numbers = self.block_table.flatten()[idx].to(torch.int64)
        torch.add(numbers * bs, pos % bs, out=self.slot_mapping[:T])
        self.slot_mapping[T:P] = -1
