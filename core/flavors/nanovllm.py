"""The nanovllm flavour: nano-vllm's engine, for comparison with vLLM's.

Differences from the vllm flavour: there is no null block (blocks count from 0); freed blocks go
to the tail of a deque, walked in reverse; a step is all prefill or all decode, never mixed; a
prefill takes whole prompts (no chunking); decode grows a sequence by one block when its length
reaches k * block_size + 1 (`may_append`); when the pool is short the last running sequence is
preempted. Its model inputs carry nano-vllm's names: `cu_seqlens_q/k`, `max_seqlen_q/k`,
`context_lens` and `block_tables` padded with -1.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import torch

from pagedviz.core.device import StageTimer
from pagedviz.core.engine import Engine
from pagedviz.core.model import ForwardInputs
from pagedviz.core.registry import register_flavor
from pagedviz.core.request import Request, Status
from pagedviz.core.runner import LEVELS, stage
from pagedviz.core.sampler import synthetic_tokens
from pagedviz.core.trace import Stage, StepTrace


class NanoBlockManager:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.ref_cnt = np.zeros(num_blocks, dtype=np.int32)
        self.free_block_ids: deque[int] = deque(range(num_blocks))
        self.block_tables: dict[str, list[int]] = {}

    def num_blocks_of(self, seq: Request) -> int:
        return -(-seq.num_tokens // self.block_size)

    def can_allocate(self, seq: Request) -> bool:
        return len(self.free_block_ids) >= self.num_blocks_of(seq)

    def _take(self) -> int:
        b = self.free_block_ids.popleft()
        self.ref_cnt[b] = 1
        return b

    def allocate(self, seq: Request) -> list[int]:
        table = [self._take() for _ in range(self.num_blocks_of(seq))]
        self.block_tables[seq.req_id] = table
        return table

    def deallocate(self, seq: Request) -> None:
        for b in reversed(self.block_tables.pop(seq.req_id, [])):
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self.free_block_ids.append(b)

    def can_append(self, seq: Request) -> bool:
        return len(self.free_block_ids) >= (seq.num_tokens % self.block_size == 1)

    def may_append(self, seq: Request) -> list[int]:
        if seq.num_tokens % self.block_size == 1:
            b = self._take()
            self.block_tables[seq.req_id].append(b)
            return [b]
        return []


@register_flavor("nanovllm")
class NanoEngine(Engine):
    """nano-vllm's scheduler, block manager and prepare_prefill / prepare_decode."""

    flavor = "nanovllm"

    @classmethod
    def stages_from(cls) -> type:
        return cls

    STAGES = ("_positions", "_input_ids", "_block_tables", "_slot_mapping")

    def _setup(self) -> None:
        cfg = self.scenario.config
        self.bm = NanoBlockManager(cfg.num_kv_blocks, cfg.block_size)
        self.arrivals: dict[int, list[Request]] = {}
        for spec in self.scenario.requests:
            self.arrivals.setdefault(spec.arrival_step, []).append(Request(spec))
        self.waiting: deque[Request] = deque()
        self.running: deque[Request] = deque()
        self.finished_last: list[str] = []
        self.v: dict[str, Any] = {}

    @property
    def done(self) -> bool:
        return not (self.arrivals or self.waiting or self.running)

    # ------------------------------------------------------------------ scheduler
    def _preempt(self, seq: Request) -> None:
        seq.status = Status.PREEMPTED
        seq.num_computed_tokens = 0
        self.bm.deallocate(seq)
        self.waiting.appendleft(seq)

    def schedule(self, sched: dict[str, Any]) -> tuple[list[Request], bool]:
        cfg = self.scenario.config
        seqs: list[Request] = []
        tokens = 0
        while self.waiting and len(seqs) < cfg.max_num_reqs:
            seq = self.waiting[0]
            if tokens + seq.num_tokens > cfg.max_num_batched_tokens or not self.bm.can_allocate(seq):
                break
            sched["new_block_ids"][seq.req_id] = self.bm.allocate(seq)
            kind = "resumed_req_ids" if seq.status is Status.PREEMPTED else "new_req_ids"
            sched[kind].append(seq.req_id)
            tokens += seq.num_tokens
            seq.status = Status.RUNNING
            self.waiting.popleft()
            self.running.append(seq)
            seqs.append(seq)
        if seqs:
            return seqs, True
        while self.running and len(seqs) < cfg.max_num_reqs:
            seq = self.running.popleft()
            while not self.bm.can_append(seq):
                if self.running:
                    victim = self.running.pop()
                    self._preempt(victim)
                    sched["preempted_req_ids"].append(victim.req_id)
                else:
                    self._preempt(seq)
                    sched["preempted_req_ids"].append(seq.req_id)
                    break
            else:
                added = self.bm.may_append(seq)
                if added:
                    sched["new_block_ids"][seq.req_id] = added
                seqs.append(seq)
        self.running.extendleft(reversed(seqs))
        return seqs, False

    # ------------------------------------------------------------------ prepare_prefill / decode
    @stage(
        "positions",
        "seqs",
        "positions cu_seqlens_q cu_seqlens_k context_lens",
        "prefill: positions = concat(range(0, len(seq))); cu_seqlens_q = cu_seqlens_k = [0, *cumsum(len)]; "
        "decode: positions = len(seq) - 1; context_lens = len(seq)",
    )
    def _positions(self) -> None:
        v = self.v
        lens = v["lens"]
        n_q = lens if v["is_prefill"] else np.ones_like(lens)
        cu_q = np.concatenate(([0], np.cumsum(n_q))).astype(np.int32)
        v["req_indices"] = np.repeat(np.arange(len(lens)), n_q)
        if v["is_prefill"]:
            v["positions"] = np.arange(int(cu_q[-1]), dtype=np.int64) - np.repeat(cu_q[:-1], n_q)
            v["cu_seqlens_q"] = cu_q
            v["cu_seqlens_k"] = np.concatenate(([0], np.cumsum(lens))).astype(np.int32)
            v["scalars"].update(max_seqlen_q=int(n_q.max()), max_seqlen_k=int(lens.max()))
        else:
            v["positions"] = (lens - 1).astype(np.int64)
            v["context_lens"] = lens.astype(np.int32)
        v["query_start_loc"] = cu_q

    @stage(
        "input_ids",
        "seqs positions",
        "input_ids",
        "prefill: input_ids = concat(seq.token_ids); decode: input_ids = [seq.last_token]",
    )
    def _input_ids(self) -> None:
        v = self.v
        if v["is_prefill"]:
            v["input_ids"] = np.concatenate([s.all_token_ids for s in v["seqs"]]).astype(np.int32)
        else:
            v["input_ids"] = np.array([s.all_token_ids[-1] for s in v["seqs"]], dtype=np.int32)

    @stage(
        "block_tables",
        "seqs",
        "block_tables",
        "block_tables = [seq.block_table + [-1] * (max_len - len(seq.block_table))]",
    )
    def _block_tables(self) -> None:
        v = self.v
        tables = [self.bm.block_tables[s.req_id] for s in v["seqs"]]
        width = max(len(t) for t in tables)
        bt = np.full((len(tables), width), -1, dtype=np.int32)
        for i, t in enumerate(tables):
            bt[i, : len(t)] = t
        v["block_tables"] = bt

    @stage(
        "slot_mapping",
        "block_tables positions",
        "slot_mapping",
        "slot_mapping = block_tables[seq, position // block_size] * block_size + position % block_size",
    )
    def _slot_mapping(self) -> None:
        v = self.v
        bs = self.scenario.config.block_size
        bt = v["block_tables"]
        idx = v["req_indices"] * bt.shape[1] + v["positions"] // bs
        v["slot_mapping"] = bt.ravel()[idx].astype(np.int64) * bs + v["positions"] % bs

    # ------------------------------------------------------------------ step
    def step(self) -> StepTrace:
        self.step_no += 1
        timer = StageTimer(self.device)
        for seq in self.arrivals.pop(self.step_no, []):
            self.waiting.append(seq)
        sched: dict[str, Any] = {
            "new_req_ids": [],
            "resumed_req_ids": [],
            "preempted_req_ids": [],
            "finished_req_ids": self.finished_last,
            "new_block_ids": {},
        }
        self.finished_last = []
        with timer.cpu("schedule"):
            seqs, is_prefill = self.schedule(sched) if (self.waiting or self.running) else ([], True)
        trace = StepTrace(step=self.step_no, idle=not seqs)
        sampled: dict[str, int] = {}
        trace.forward = {"device": str(self.device)}
        lens = np.array([s.num_tokens for s in seqs], dtype=np.int64)
        self.v = {"seqs": seqs, "lens": lens, "is_prefill": is_prefill, "scalars": {}}
        if seqs:
            for name in self.STAGES:
                method = getattr(self, name)
                spec = method.stage_spec
                with timer.cpu(spec.name):
                    method()
                if self.capture:
                    trace.stages.append(Stage(spec.name, list(spec.reads), list(spec.writes), spec.formula))
                    for w in spec.writes:
                        if w in self.v:
                            trace.record(w, LEVELS[w], self.v[w], spec.name)
            sampled = self._forward_and_sample_nano(seqs, lens, is_prefill, trace, timer)
            for s in seqs:
                s.num_computed_tokens = s.num_tokens
        if self.capture:
            trace.kv_cache = self._nano_kv_view()
        finished = []
        for seq in seqs:
            seq.append(sampled[seq.req_id])
            if seq.is_done:
                seq.status = Status.FINISHED
                self.bm.deallocate(seq)
                self.running.remove(seq)
                finished.append(seq.req_id)
        self.finished_last = finished
        if self.capture:
            n_tok = int(sum(lens)) if seqs and is_prefill else len(seqs)
            sched["num_scheduled_tokens"] = {
                s.req_id: (int(n) if is_prefill else 1) for s, n in zip(seqs, lens)
            }
            sched["total_num_scheduled_tokens"] = n_tok if seqs else 0
            sched["waiting_req_ids"] = [s.req_id for s in self.waiting]
            trace.scheduler = sched
            trace.batch = {"req_ids": [s.req_id for s in seqs], "moves": []}
            trace.scalars = {
                "is_prefill": bool(is_prefill) if seqs else None,
                "num_seqs": len(seqs),
                "total_num_scheduled_tokens": n_tok if seqs else 0,
                **self.v.get("scalars", {}),
            }
        trace.sampled_token_ids = sampled
        trace.timing_us = timer.collect(tuple(getattr(self, n).stage_spec.name for n in self.STAGES))
        return trace

    def _forward_and_sample_nano(
        self, seqs: list[Request], lens: np.ndarray, is_prefill: bool, trace: StepTrace, timer: StageTimer
    ) -> dict[str, int]:
        v, dev = self.v, self.device
        ids = [s.req_id for s in seqs]
        if self.model is None:
            tokens = synthetic_tokens(self.scenario.seed, ids, lens, self.scenario.config.vocab_size)
            return dict(zip(ids, tokens.tolist()))
        with timer.dev("copy_to_device"):
            qsl = torch.from_numpy(v["query_start_loc"]).to(dev, non_blocking=True)
            inp = ForwardInputs(
                input_ids=torch.from_numpy(v["input_ids"]).to(dev, non_blocking=True),
                positions=torch.from_numpy(v["positions"]).to(dev, non_blocking=True),
                slot_mapping=torch.from_numpy(v["slot_mapping"]).to(dev, non_blocking=True),
                block_table=torch.from_numpy(np.maximum(v["block_tables"], 0)).to(dev, non_blocking=True),
                seq_lens=torch.from_numpy(lens.astype(np.int32)).to(dev, non_blocking=True),
                query_start_loc=qsl,
                logits_indices=qsl[1:].to(torch.int64) - 1,
            )
        assert self.model is not None
        with torch.no_grad():
            with timer.dev("forward"):
                hidden, logits = self.model.forward(inp)
            with timer.dev("sample"):
                greedy = logits.argmax(-1).cpu().tolist()
            with timer.dev("dense_reference"):
                cu = v["query_start_loc"]
                starts = [(s.all_token_ids, int(v["positions"][cu[i]])) for i, s in enumerate(seqs)]
                worst = self.model.max_dense_diff(hidden, starts, cu)
        trace.forward["paged_vs_dense_max_abs_diff"] = worst
        return dict(zip(ids, greedy))

    def _nano_kv_view(self) -> dict[str, Any]:
        snapshot = {
            "free_block_queue": list(self.bm.free_block_ids),
            "ref_cnt": self.bm.ref_cnt.tolist(),
            "block_hash": {},
        }
        return self.kv_view(snapshot, self.bm.block_tables, len(self.bm.ref_cnt))
