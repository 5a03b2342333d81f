"""The model runner's input preparation (DESIGN.md §3, "prepare_inputs"), stage by stage.

`update_states` brings the persistent batch up to date with the scheduler's decision. Then each
stage of `prepare_inputs` is one small method that computes vLLM's arrays with vectorised numpy on
views of torch CPU tensors; the runner records what each stage wrote into the step's trace.
Finally the inputs are copied to the device (`non_blocking=True`), where `slot_mapping` is
computed again from the device's block table and must agree with the CPU result.
"""

from __future__ import annotations

import inspect
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pagedviz.core.config import EngineConfig
from pagedviz.core.device import StageTimer
from pagedviz.core.input_batch import InputBatch, cpu_tensor
from pagedviz.core.scheduler import SchedulerOutput
from pagedviz.core.trace import Stage, StepTrace


@dataclass(frozen=True)
class StageSpec:
    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    formula: str


def stage(
    name: str, reads: str, writes: str, formula: str
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Mark a runner method as a stage of prepare_inputs (reads/writes are space-separated)."""

    def mark(fn: Callable[..., None]) -> Callable[..., None]:
        fn.stage_spec = StageSpec(name, tuple(reads.split()), tuple(writes.split()), formula)  # type: ignore[attr-defined]
        return fn

    return mark


LEVELS: dict[str, str] = {
    "num_scheduled_tokens": "request",
    "num_computed_tokens_cpu": "request",
    "num_tokens": "request",
    "cu_num_tokens": "request",
    "query_start_loc": "request",
    "seq_lens": "request",
    "logits_indices": "request",
    "discard_request_mask": "request",
    "cu_seqlens_q": "request",
    "cu_seqlens_k": "request",
    "context_lens": "request",
    "req_indices": "token",
    "arange": "token",
    "positions": "token",
    "token_indices": "token",
    "input_ids": "token",
    "block_table_indices": "token",
    "block_numbers": "token",
    "block_offsets": "token",
    "slot_mapping": "token",
    "token_ids_cpu": "system",
    "block_table": "system",
    "attn_mask": "system",
    "block_tables": "system",
}


class ModelRunner:
    """Persistent batch + prepare_inputs of the vllm flavour."""

    flavor = "vllm"
    STAGES: tuple[str, ...] = (
        "_req_indices",
        "_cu_num_tokens",
        "_positions",
        "_token_indices",
        "_input_ids",
        "_block_table_indices",
        "_block_numbers",
        "_block_offsets",
        "_slot_mapping",
        "_query_start_loc",
        "_seq_lens",
        "_logits_indices",
        "_attn_metadata",
    )

    def __init__(self, config: EngineConfig, device: torch.device) -> None:
        self.config = config
        self.device = device
        self.block_size = config.block_size
        self.max_model_len = config.max_model_len
        self.max_num_blocks_per_req = config.max_num_blocks_per_req
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
        self.v: dict[str, Any] = {}  # the arrays of the step being prepared, by vLLM name
        self.stage_plan = []
        for name in self.STAGES:
            method = getattr(self, name)
            spec: StageSpec = method.stage_spec
            levels = [(w, LEVELS[w]) for w in spec.writes if w in LEVELS]
            record = Stage(spec.name, list(spec.reads), list(spec.writes), spec.formula)
            self.stage_plan.append((method, spec, record, levels))

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
        for req_id, row in ib.req_id_to_index.items():
            num_scheduled[row] = scheduled[req_id].num_scheduled
        self.v = {"num_scheduled_tokens": num_scheduled, "num_reqs": num_reqs}
        return moves

    def append_sampled(self, sampled: dict[str, int]) -> None:
        """Write this step's sampled tokens into their rows of token_ids_cpu (vectorised)."""
        if not sampled:
            return
        ib = self.input_batch
        rows = np.array([ib.req_id_to_index[r] for r in sampled], dtype=np.int64)
        ib.token_ids_cpu[rows, ib.num_tokens[rows]] = np.fromiter(sampled.values(), dtype=np.int32)
        ib.num_tokens[rows] += 1

    # ---------------------------------------------------------------- prepare_inputs stages
    @stage(
        "req_indices",
        "num_scheduled_tokens",
        "req_indices",
        "req_indices = repeat(arange(num_reqs), num_scheduled_tokens)",
    )
    def _req_indices(self) -> None:
        v = self.v
        v["req_indices"] = np.repeat(self.arange_np[: v["num_reqs"]], v["num_scheduled_tokens"])

    @stage(
        "cu_num_tokens",
        "num_scheduled_tokens",
        "cu_num_tokens arange",
        "cu_num_tokens = cumsum(num_scheduled_tokens); "
        "arange = arange(T) - repeat(cu_num_tokens - num_scheduled_tokens, num_scheduled_tokens)",
    )
    def _cu_num_tokens(self) -> None:
        v = self.v
        n = v["num_scheduled_tokens"]
        cu = np.cumsum(n, dtype=np.int64)
        v["T"] = int(cu[-1]) if len(cu) else 0
        v["cu_num_tokens"] = cu
        v["arange"] = self.arange_np[: v["T"]] - np.repeat(cu - n, n)

    @stage(
        "positions",
        "num_computed_tokens_cpu req_indices arange",
        "positions",
        "positions = num_computed_tokens_cpu[req_indices] + arange",
    )
    def _positions(self) -> None:
        v = self.v
        out = self.positions_np[: v["T"]]
        np.add(self.input_batch.num_computed_tokens_cpu[v["req_indices"]], v["arange"], out=out)
        v["positions"] = out

    @stage(
        "token_indices",
        "positions req_indices",
        "token_indices",
        "token_indices = positions + req_indices * M",
    )
    def _token_indices(self) -> None:
        v = self.v
        v["token_indices"] = v["positions"] + v["req_indices"] * self.max_model_len

    @stage(
        "input_ids",
        "token_ids_cpu token_indices",
        "input_ids",
        "input_ids = token_ids_cpu.flatten()[token_indices]",
    )
    def _input_ids(self) -> None:
        v = self.v
        out = self.input_ids_cpu[: v["T"]]
        torch.index_select(
            self.input_batch.token_ids_cpu_tensor.flatten(),
            0,
            torch.from_numpy(v["token_indices"]),
            out=out,
        )
        v["input_ids"] = self.input_ids_np[: v["T"]]

    @stage(
        "block_table_indices",
        "req_indices positions",
        "block_table_indices",
        "block_table_indices = req_indices * K + positions // block_size",
    )
    def _block_table_indices(self) -> None:
        v = self.v
        v["block_table_indices"] = (
            v["req_indices"] * self.max_num_blocks_per_req + v["positions"] // self.block_size
        )

    @stage(
        "block_numbers",
        "block_table block_table_indices",
        "block_numbers",
        "block_numbers = block_table.flatten()[block_table_indices]",
    )
    def _block_numbers(self) -> None:
        v = self.v
        v["block_numbers"] = self.input_batch.block_table.block_table_np.ravel()[v["block_table_indices"]]

    @stage("block_offsets", "positions", "block_offsets", "block_offsets = positions % block_size")
    def _block_offsets(self) -> None:
        v = self.v
        v["block_offsets"] = v["positions"] % self.block_size

    @stage(
        "slot_mapping",
        "block_numbers block_offsets",
        "slot_mapping",
        "slot_mapping = block_numbers * block_size + block_offsets",
    )
    def _slot_mapping(self) -> None:
        v = self.v
        T = v["T"]
        np.add(
            v["block_numbers"].astype(np.int64) * self.block_size,
            v["block_offsets"],
            out=self.slot_mapping_np[:T],
        )
        # with CUDA graphs the batch is padded to a capture size; padded slots are -1 (written nowhere)
        v["num_input_tokens"] = self.config.pad_for_cudagraph(T) if T else 0
        self.slot_mapping_np[T : v["num_input_tokens"]] = -1
        v["slot_mapping"] = self.slot_mapping_np[: v["num_input_tokens"]]

    @stage("query_start_loc", "cu_num_tokens", "query_start_loc", "query_start_loc = [0, *cu_num_tokens]")
    def _query_start_loc(self) -> None:
        v = self.v
        n = v["num_reqs"]
        self.query_start_loc_np[0] = 0
        self.query_start_loc_np[1 : n + 1] = v["cu_num_tokens"]
        v["query_start_loc"] = self.query_start_loc_np[: n + 1]

    @stage(
        "seq_lens",
        "num_computed_tokens_cpu num_scheduled_tokens",
        "seq_lens",
        "seq_lens = num_computed_tokens_cpu + num_scheduled_tokens",
    )
    def _seq_lens(self) -> None:
        v = self.v
        n = v["num_reqs"]
        np.add(
            self.input_batch.num_computed_tokens_cpu[:n], v["num_scheduled_tokens"], out=self.seq_lens_np[:n]
        )
        v["seq_lens"] = self.seq_lens_np[:n]

    @stage(
        "logits_indices",
        "seq_lens num_tokens query_start_loc",
        "discard_request_mask logits_indices",
        "discard_request_mask = seq_lens < num_tokens; logits_indices = query_start_loc[1:] - 1",
    )
    def _logits_indices(self) -> None:
        v = self.v
        n = v["num_reqs"]
        v["num_tokens"] = self.input_batch.num_tokens[:n]
        v["discard_request_mask"] = v["seq_lens"] < v["num_tokens"]
        v["logits_indices"] = v["query_start_loc"][1:].astype(np.int64) - 1

    @stage(
        "attn_metadata",
        "num_scheduled_tokens seq_lens slot_mapping",
        "num_reqs total_num_scheduled_tokens num_input_tokens max_query_len max_seq_len",
        "num_input_tokens = pad_for_cudagraph(T) (padded slot_mapping entries = -1); "
        "max_query_len = max(num_scheduled_tokens); max_seq_len = max(seq_lens)",
    )
    def _attn_metadata(self) -> None:
        v = self.v
        v["scalars"] = {
            "num_reqs": v["num_reqs"],
            "total_num_scheduled_tokens": v["T"],
            "num_input_tokens": v["num_input_tokens"],
            "max_query_len": int(v["num_scheduled_tokens"].max()) if v["num_reqs"] else 0,
            "max_seq_len": int(v["seq_lens"].max()) if v["num_reqs"] else 0,
        }

    # ---------------------------------------------------------------- driver
    def prepare_inputs(self, trace: StepTrace | None, timer: StageTimer) -> dict[str, Any]:
        """Run every stage in order; record written arrays into `trace` when it is given."""
        timings = timer.timings
        for method, spec, stage_rec, levels in self.stage_plan:
            t0 = time.perf_counter_ns()
            method()
            timings[spec.name] = (time.perf_counter_ns() - t0) / 1e3
            if trace is not None:
                trace.stages.append(stage_rec)
                for name, level in levels:
                    if name in self.v:
                        trace.record(name, level, self.v[name], spec.name)
        return self.v

    def record_batch(self, trace: StepTrace) -> None:
        """Record the request-level batch arrays and the system tables after update_states."""
        ib, n = self.input_batch, self.v["num_reqs"]
        trace.stages.insert(
            0,
            Stage(
                "update_states",
                ["scheduler_output"],
                [
                    "token_ids_cpu",
                    "block_table",
                    "num_computed_tokens_cpu",
                    "num_tokens",
                    "num_scheduled_tokens",
                ],
                "remove finished/unscheduled rows; add new rows into the lowest hole; condense",
            ),
        )
        rows = max(ib.req_id_to_index.values(), default=-1) + 1
        trace.record("num_scheduled_tokens", "request", self.v["num_scheduled_tokens"], "update_states")
        trace.record("num_computed_tokens_cpu", "request", ib.num_computed_tokens_cpu[:n], "update_states")
        trace.record("num_tokens", "request", self.v["num_tokens"], "update_states")
        trace.record(
            "token_ids_cpu",
            "system",
            ib.token_ids_cpu[:rows],
            "update_states",
            shape=tuple(ib.token_ids_cpu.shape),
        )
        trace.record(
            "block_table",
            "system",
            ib.block_table.block_table_np[:rows],
            "update_states",
            shape=tuple(ib.block_table.block_table_np.shape),
        )

    def copy_to_device(self, timer: StageTimer) -> bool:
        """Copy inputs to the device; compute slot_mapping there and check it against the CPU's."""
        v = self.v
        T, n = v["T"], v["num_reqs"]
        P = v["scalars"]["num_input_tokens"]
        with timer.dev("copy_to_device"):
            self.input_ids[:T].copy_(self.input_ids_cpu[:T], non_blocking=True)
            self.positions[:T].copy_(self.positions_cpu[:T], non_blocking=True)
            self.query_start_loc[: n + 1].copy_(self.query_start_loc_cpu[: n + 1], non_blocking=True)
            self.seq_lens[:n].copy_(self.seq_lens_cpu[:n], non_blocking=True)
            self.req_indices_np[:T] = v["req_indices"]
            self.req_indices[:T].copy_(self.req_indices_cpu[:T], non_blocking=True)
            self.block_table[:n].copy_(self.input_batch.block_table.block_table_cpu[:n], non_blocking=True)
        with timer.dev("device_slot_mapping"):
            self.compute_slot_mapping_on_device(T, P)
        return bool(torch.equal(self.slot_mapping[:P].cpu(), self.slot_mapping_cpu[:P]))

    def compute_slot_mapping_on_device(self, T: int, P: int) -> None:
        K, bs = self.max_num_blocks_per_req, self.block_size
        pos = self.positions[:T]
        idx = self.req_indices[:T] * K + torch.div(pos, bs, rounding_mode="floor")
        numbers = self.block_table.flatten()[idx].to(torch.int64)
        torch.add(numbers * bs, pos % bs, out=self.slot_mapping[:T])
        self.slot_mapping[T:P] = -1


def stage_source(runner_cls: type[Any], name: str) -> str:
    """The engine's own source of one stage, read from the running code."""
    if name == "update_states":
        return textwrap.dedent(inspect.getsource(runner_cls.update_states))
    for _, fn in inspect.getmembers(runner_cls, inspect.isfunction):
        spec = getattr(fn, "stage_spec", None)
        if spec is not None and spec.name == name:
            return textwrap.dedent(inspect.getsource(fn))
    raise KeyError(name)
