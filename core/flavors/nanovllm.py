"""The nanovllm flavour: nano-vllm's engine at its HEAD (commit `UPSTREAM`), rule for rule.

It mirrors nano-vllm's `engine/block_manager.py`, `engine/scheduler.py`, `engine/sequence.py` and
`ModelRunner.prepare_prefill` / `prepare_decode` (`engine/model_runner.py`), and the LM head's
`last_indices` (`layers/embed_head.py`):

- Blocks count from 0 (no null block); freed blocks go to the tail of a deque, a sequence's blocks
  walked in reverse (`BlockManager.deallocate`).
- Prefix caching is always on (nano-vllm has no switch): full blocks are hashed, chained to their
  parent's hash, after their tokens were computed (`hash_blocks`, called by `postprocess`);
  `can_allocate` looks up the leading full blocks but never the sequence's last block, `allocate`
  takes the hits (a free hit leaves the free queue, a used one gains a reference) and sets
  `num_cached_tokens`; a freed block keeps its hash until it is handed out again.
- A step is all prefill or all decode, never mixed. The first waiting sequence of a step may take a
  chunk of the remaining budget; later ones must fit whole ("only allow chunked prefill for the
  first seq"). A prefill starts at `num_cached_tokens`; a partial prefill samples nothing.
- Decode grows a sequence by one block when its length reaches k * block_size + 1 (`may_append`);
  when the pool is short the last running sequence is preempted (it keeps no blocks, but its
  hashed blocks may be found again).
- Inputs under nano-vllm's names: `input_ids`, `positions`, `cu_seqlens_q`, `cu_seqlens_k`,
  `max_seqlen_q/k`, `slot_mapping`, `context_lens`, `block_tables` (rows padded with -1) and
  `last_indices`. A prefill passes `block_tables` only when some sequence has a cache hit
  (`cu_seqlens_k[-1] > cu_seqlens_q[-1]`); without one, flash-attn reads this step's K/V directly.

The block manager is core/flavors/nanovllm_blocks.py, the input stages core/flavors/nanovllm_inputs.py;
this module holds the scheduler and the step.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import torch

from pagedviz.core.device import StageTimer
from pagedviz.core.engine import PagedvizEngine
from pagedviz.core.flavor_table import register_flavor
from pagedviz.core.flavors.nanovllm_blocks import NanoBlockManager
from pagedviz.core.flavors.nanovllm_inputs import NanoInputs
from pagedviz.core.request import Request, Status
from pagedviz.core.runners.stages import LEVELS
from pagedviz.core.sampler import synthetic_tokens
from pagedviz.core.tiny_model import ForwardInputs
from pagedviz.core.trace import Stage, StepTrace

UPSTREAM = "nano-vllm bb823b3"  # GeeeekExplorer/nano-vllm HEAD this flavour follows
NANO_LEVELS = {**LEVELS, "last_indices": "request"}


@register_flavor("nanovllm")
class NanoEngine(NanoInputs, PagedvizEngine):
    """nano-vllm's scheduler, block manager and prepare_prefill / prepare_decode."""

    flavor = "nanovllm"
    upstream = UPSTREAM

    @classmethod
    def stages_from(cls) -> type:
        return cls

    def _setup(self) -> None:
        cfg = self.scenario.config
        self.bm = NanoBlockManager(cfg.num_kv_blocks, cfg.block_size)
        self.arrivals: dict[int, list[Request]] = {}
        for spec in self.scenario.requests:
            self.arrivals.setdefault(spec.arrival_step, []).append(Request(spec))
        self.waiting: deque[Request] = deque()
        self.running: deque[Request] = deque()
        self.finished_last: list[str] = []
        self.num_scheduled: dict[str, int] = {}
        self.v: dict[str, Any] = {}

    @property
    def done(self) -> bool:
        return not (self.arrivals or self.waiting or self.running)

    # ------------------------------------------------------------------ scheduler
    def _preempt(self, seq: Request, sched: dict[str, Any], for_seq: Request) -> None:
        sched["preemption_causes"][seq.req_id] = {
            "cause": "kv_pool",
            "for": for_seq.req_id,
            "blocks_needed": 1,  # can_append: the one block a decode at k * block_size + 1 opens
            "blocks_free": len(self.bm.free_block_ids),
        }
        seq.status = Status.PREEMPTED
        self.bm.deallocate(seq)
        self.waiting.appendleft(seq)
        sched["preempted_req_ids"].append(seq.req_id)

    def schedule(self, sched: dict[str, Any]) -> tuple[list[Request], bool]:
        """`Scheduler.schedule`: prefill the waiting queue's head while it fits, else decode."""
        cfg = self.scenario.config
        bs = cfg.block_size
        seqs: list[Request] = []
        n_sched = self.num_scheduled
        batched = 0
        stop: dict[str, Any] | None = None  # why the prefill loop stopped, at waiting[0]
        while self.waiting and len(seqs) < cfg.max_num_reqs:
            seq = self.waiting[0]
            remaining = cfg.max_num_batched_tokens - batched
            if remaining == 0:
                stop = {"cause": "token_budget", "tokens_needed": self._prefill_tokens(seq), "tokens_left": 0}
                break
            has_table = bool(self.bm.block_tables.get(seq.req_id))
            if not has_table:
                num_cached_blocks = self.bm.can_allocate(seq)
                if num_cached_blocks == -1:
                    stop = {"cause": "kv_pool", **self.bm.last_refusal}
                    break
                num_tokens = seq.num_tokens - num_cached_blocks * bs
            else:
                num_tokens = seq.num_tokens - seq.num_computed_tokens
            if remaining < num_tokens and seqs:  # only the first sequence may take a chunk
                stop = {
                    "cause": "token_budget",
                    "tokens_needed": num_tokens,
                    "tokens_left": remaining,
                    "first_seq_only_chunks": True,
                }
                break
            if not has_table:
                self.bm.allocate(seq, num_cached_blocks)
                # a copy: the block table itself grows at later steps
                sched["new_block_ids"][seq.req_id] = list(self.bm.block_tables[seq.req_id])
                kind = "resumed_req_ids" if seq.status is Status.PREEMPTED else "new_req_ids"
                sched[kind].append(seq.req_id)
            n_sched[seq.req_id] = min(num_tokens, remaining)
            batched += n_sched[seq.req_id]
            if seq.num_computed_tokens + n_sched[seq.req_id] == seq.num_tokens:
                seq.status = Status.RUNNING
                self.waiting.popleft()
                self.running.append(seq)
            seqs.append(seq)
        else:
            if self.waiting:
                stop = {"cause": "max_num_seqs", "running": len(seqs), "max_num_seqs": cfg.max_num_reqs}
        if seqs:
            sched["waiting_causes"] = self._waiting_causes(seqs, stop, sched)
            return seqs, True
        while self.running and len(seqs) < cfg.max_num_reqs:
            seq = self.running.popleft()
            while not self.bm.can_append(seq):
                if self.running:
                    self._preempt(self.running.pop(), sched, seq)
                else:
                    self._preempt(seq, sched, seq)
                    break
            else:
                n_sched[seq.req_id] = 1
                added = self.bm.may_append(seq)
                if added:
                    sched["new_block_ids"][seq.req_id] = added
                seqs.append(seq)
        self.running.extendleft(reversed(seqs))
        sched["waiting_causes"] = self._waiting_causes(seqs, stop, sched)
        return seqs, False

    def _prefill_tokens(self, seq: Request) -> int:
        """The tokens a waiting sequence still has to prefill (after its cache hits)."""
        if self.bm.block_tables.get(seq.req_id):
            return seq.num_tokens - seq.num_computed_tokens
        return seq.num_tokens - self.bm.probe(seq)[0] * self.scenario.config.block_size

    def _waiting_causes(
        self, seqs: list[Request], stop: dict[str, Any] | None, sched: dict[str, Any]
    ) -> dict[str, dict[str, Any]]:
        """`scheduler.waiting_causes` under nano-vllm's rules (docs/arrays.md): a sequence this
        step preempted: `preemption`; a sequence whose prefill this step chunked (nano-vllm keeps
        it in `waiting` until its prompt is done): `prefill_chunk`; the head the prefill loop
        stopped at: `stop`; the rest wait `behind` that head."""
        causes: dict[str, dict[str, Any]] = {}
        preempted = sched["preempted_req_ids"]
        head: str | None = None
        scheduled = {s.req_id for s in seqs}
        for seq in self.waiting:
            rid = seq.req_id
            if rid in sched["preemption_causes"]:
                causes[rid] = {"cause": "preemption", "preempted": list(preempted)}
            elif head is not None:
                causes[rid] = {"cause": "behind", "behind": head}
            elif rid in scheduled:
                head = rid
                n = self.num_scheduled[rid]
                causes[rid] = {
                    "cause": "prefill_chunk",
                    "tokens_scheduled": n,
                    "tokens_remaining": seq.num_tokens - seq.num_computed_tokens - n,
                }
            else:
                head = rid
                causes[rid] = dict(stop) if stop is not None else {"cause": "unknown"}
        return causes

    def postprocess(self, seqs: list[Request], sampled: dict[str, int], is_prefill: bool) -> list[str]:
        """`Scheduler.postprocess`: hash the filled blocks, advance, append the token, finish."""
        finished = []
        for seq in seqs:
            n = self.num_scheduled.pop(seq.req_id)
            self.bm.hash_blocks(seq, n)
            seq.num_computed_tokens += n
            if is_prefill and seq.num_computed_tokens < seq.num_tokens:
                continue
            seq.append(sampled[seq.req_id])
            if seq.is_done:
                seq.status = Status.FINISHED
                self.bm.deallocate(seq)
                self.running.remove(seq)
                finished.append(seq.req_id)
        return finished

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
            "waiting_causes": {},
            "preemption_causes": {},
        }
        self.finished_last = []
        with timer.cpu("schedule"):
            seqs, is_prefill = self.schedule(sched) if (self.waiting or self.running) else ([], True)
        # one KV cache group: each scheduled sequence's block table, as one list in a list
        sched["block_ids"] = {seq.req_id: [list(self.bm.block_tables[seq.req_id])] for seq in seqs}
        trace = StepTrace(step=self.step_no, idle=not seqs)
        sampled: dict[str, int] = {}
        trace.forward = {"device": str(self.device)}
        n_q = np.array([self.num_scheduled[s.req_id] for s in seqs], dtype=np.int64)
        start = np.array([s.num_computed_tokens for s in seqs], dtype=np.int64)
        self.v = {
            "seqs": seqs,
            "n_q": n_q,
            "start": start,
            "end": start + n_q,
            "is_prefill": is_prefill,
            "scalars": {},
        }
        stage_names = tuple(getattr(self, n).stage_spec.name for n in self.STAGES)
        if seqs:
            self.v["padded_tables"] = self._padded_tables(seqs)
            for name in self.STAGES:
                method = getattr(self, name)
                spec = method.stage_spec
                with timer.cpu(spec.name):
                    method()
                if self.capture:
                    trace.stages.append(Stage(spec.name, list(spec.reads), list(spec.writes), spec.formula))
                    for w in spec.writes:
                        if w in self.v:
                            trace.record(w, NANO_LEVELS[w], self.v[w], spec.name)
            sampled = self._forward_and_sample_nano(seqs, trace, timer)
        if self.capture:
            trace.kv_cache = self._nano_kv_view()
        self.finished_last = self.postprocess(seqs, sampled, is_prefill)
        if self.capture:
            n_tok = int(n_q.sum())
            sched["num_scheduled_tokens"] = {s.req_id: int(n) for s, n in zip(seqs, n_q)}
            sched["total_num_scheduled_tokens"] = n_tok
            sched["waiting_req_ids"] = [s.req_id for s in self.waiting]
            trace.scheduler = sched
            trace.batch = {"req_ids": [s.req_id for s in seqs], "moves": []}
            trace.scalars = {
                "is_prefill": bool(is_prefill) if seqs else None,
                "num_seqs": len(seqs),
                "total_num_scheduled_tokens": n_tok,
                "upstream": UPSTREAM,
                **self.v.get("scalars", {}),
            }
        trace.sampled_token_ids = sampled
        trace.timing_us = timer.collect(stage_names)
        return trace

    def _forward_and_sample_nano(
        self, seqs: list[Request], trace: StepTrace, timer: StageTimer
    ) -> dict[str, int]:
        """One token per sequence whose prompt is complete after this step; a partial prefill's
        logits row is computed by the LM head and dropped by `postprocess`."""
        v, dev = self.v, self.device
        end = v["end"]
        keep = [i for i, s in enumerate(seqs) if end[i] == s.num_tokens]
        ids = [seqs[i].req_id for i in keep]
        if self.model is None:
            tokens = synthetic_tokens(self.scenario.seed, ids, end[keep], self.scenario.config.vocab_size)
            return dict(zip(ids, tokens.tolist()))
        cu_q = np.concatenate(([0], np.cumsum(v["n_q"]))).astype(np.int32)
        with timer.dev("copy_to_device"):
            qsl = torch.from_numpy(cu_q).to(dev, non_blocking=True)
            inp = ForwardInputs(
                input_ids=torch.from_numpy(v["input_ids"]).to(dev, non_blocking=True),
                positions=torch.from_numpy(v["positions"]).to(dev, non_blocking=True),
                slot_mapping=torch.from_numpy(v["slot_mapping"].astype(np.int64)).to(dev, non_blocking=True),
                # the tiny model always reads K/V through a block table; nano-vllm's prefill without
                # a cache hit reads this step's K/V instead, the same values
                block_table=torch.from_numpy(np.maximum(v["padded_tables"], 0)).to(dev, non_blocking=True),
                seq_lens=torch.from_numpy(end.astype(np.int32)).to(dev, non_blocking=True),
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
                starts = [(s.token_ids[: end[i]], int(v["start"][i])) for i, s in enumerate(seqs)]
                worst = self.model.max_dense_diff(hidden, starts, cu_q)
        trace.forward["paged_vs_dense_max_abs_diff"] = worst
        return {seqs[i].req_id: greedy[i] for i in keep}

    def _nano_kv_view(self) -> dict[str, Any]:
        bm = self.bm
        snapshot = {
            "free_block_queue": list(bm.free_block_ids),
            "ref_cnt": bm.ref_cnt.tolist(),
            "block_hash": {str(b): h for b, h in enumerate(bm.hash) if h is not None},
        }
        return self.kv_view(snapshot, bm.block_tables, len(bm.ref_cnt))
