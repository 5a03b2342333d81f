"""The recorded scheduler of a replay (core/replay.py): it stands in for pagedviz's scheduler,
each schedule() the next recorded step of a real vLLM 0.33 server (core/recording.py) as
pagedviz's SchedulerOutput (through core/vllm_output.py, the adapter the engine vllm converts vLLM's
own outputs with), with that server's block ids; it hands the runner the recorded
sampled tokens (with drafts, per logits row) and the next step's recorded drafts. It keeps each
live request's tokens and blocks and nothing of a finished request. No vLLM needed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

from pagedviz.core.kv_cache import NULL_BLOCK
from pagedviz.core.kv_groups import KVCacheGroup, block_group_of, block_owners, plan_kv_cache_groups
from pagedviz.core.recording import Freed, Header, Step
from pagedviz.core.replay_causes import RecordedCauses
from pagedviz.core.replay_groups import recorded_layers
from pagedviz.core.sampler import synthetic_tokens
from pagedviz.core.scheduler_output import SchedulerOutput
from pagedviz.core.vllm_output import OutputAdapter, Scheduled, from_recorded

SEED = 0
NOT_RECORDED = "not recorded (blocks in id order)"  # an older recording's free queue


class ReplayError(ValueError):
    """A recording pagedviz cannot replay (names the step and what is wrong)."""


def prompt_ids(req_id: str, ids: list[int] | int, vocab: int) -> np.ndarray:
    if isinstance(ids, int):  # redacted: synthetic ids, fixed by the request id and position
        return synthetic_tokens(SEED, [req_id] * ids, np.arange(ids), vocab)
    return np.asarray(ids, dtype=np.int32)


class TokenLog:
    """A live request's known token ids (prompt, then outputs), appended in place: `ids()` is a
    view of those known, with no copy (the ids it shows are never written again: later ones go
    past them, a full buffer is replaced by a larger copy), so a long request costs nothing per
    step (a list converted to an array every step did)."""

    def __init__(self, ids: np.ndarray) -> None:
        self.n = len(ids)
        self.buf = np.empty(max(16, 2 * self.n), dtype=np.int32)
        self.buf[: self.n] = ids

    def __len__(self) -> int:
        return self.n

    def ids(self) -> np.ndarray:
        return self.buf[: self.n]

    def append(self, token: int) -> None:
        if self.n == len(self.buf):
            self.extend([token])
            return
        self.buf[self.n] = token
        self.n += 1

    def extend(self, tokens: list[int]) -> None:
        end = self.n + len(tokens)
        if end > len(self.buf):
            grown = np.empty(2 * end, dtype=np.int32)
            grown[: self.n] = self.buf[: self.n]
            self.buf = grown
        self.buf[self.n : end] = tokens
        self.n = end


class _Blocks:
    """The recorded server's blocks as seen from its scheduler outputs: each live request's blocks,
    the free count and, where the recording holds it (each step's `freed`), vLLM's free queue in
    vLLM's order. Block 0 is vLLM's null block (`BlockPool.null_block`, taken off the free queue
    when the pool is built): never free, never handed out, not in `get_num_free_blocks()`, so the
    free queue here leaves it out too.

    The queue starts as vLLM's does (1, 2, ..., head first). Each step puts back the blocks the
    recording says vLLM put back since the step before (a run of blocks without a hash to the
    head, `prepend_n`; a run of cached blocks to the tail, `append_n`), in order, then takes off
    every block the step handed to a scheduled request (`popleft_n` from the head, or `touch` of
    a prefix hit from the middle): which blocks those were is recorded, so the rest keep their
    order. A block freed and handed out again within one schedule() (a preemption's victim) is
    put back first and taken after, as it was; a block taken by a request preempted later in the
    same schedule() is not in its output and comes back where vLLM put it back. An older
    recording has no `freed`: its free queue is every block without a reference, in id order."""

    def __init__(self, num_blocks: int, problems: list[str], groups: tuple[KVCacheGroup, ...]) -> None:
        self.groups = groups
        # each group's block list per request, in vLLM's group order (0: a sliding window's
        # dropped place, the null block)
        self.group_blocks: list[dict[str, list[int]]] = [{} for _ in groups]
        self.num_free = num_blocks - 1
        self.pool = self
        self.num_blocks = num_blocks
        self.step = 0
        self.problems = problems
        # vLLM's free queue, head first (None: the recording does not say its order)
        self.queue: OrderedDict[int, None] | None = OrderedDict.fromkeys(range(1, num_blocks))

    @property
    def req_blocks(self) -> dict[str, list[int]]:
        """The first group's block list per request (the only one with one group)."""
        return self.group_blocks[0]

    def drop(self, req_id: str) -> None:
        for blocks in self.group_blocks:
            blocks.pop(req_id, None)

    def owners(self) -> dict[str, list[str]]:
        """Block id (as a string) -> the requests holding it, over every group (not the null block)."""
        return block_owners(self.group_blocks)

    def block_groups(self) -> dict[str, int]:
        """Block id (as a string) -> the group whose table holds it."""
        return block_group_of(self.group_blocks)

    def follow(self, freed: list[Freed] | None, taken: list[int]) -> None:
        """One step's changes to the free queue: the blocks put back, then the blocks taken."""
        q = self.queue
        if q is None:
            return
        if freed is None:  # an older recording (or one step without it): the order is not known
            self.queue = None
            return
        for run in freed:
            blocks = [b for b in run.blocks if b != NULL_BLOCK]
            if run.to == "head":
                for b in reversed(blocks):
                    q[b] = None
                    q.move_to_end(b, last=False)
            else:
                for b in blocks:
                    q.pop(b, None)
                    q[b] = None
        for b in taken:
            q.pop(b, None)

    def snapshot(self) -> dict[str, object]:
        ref = np.zeros(self.num_blocks, dtype=np.int64)
        for blocks_of in self.group_blocks:
            for blocks in blocks_of.values():
                if blocks:
                    np.add.at(ref, np.asarray(blocks), 1)
        ref[NULL_BLOCK] = 0  # the null block: never free, its count not kept (vLLM's is_null)
        if self.queue is not None:
            free = np.fromiter(self.queue, dtype=np.int64, count=len(self.queue))
        else:
            free = np.flatnonzero(ref == 0)
            free = free[free != NULL_BLOCK]
        if len(free) != self.num_free and len(self.problems) < 8:
            self.problems.append(
                f"step {self.step}: the recording says {self.num_free} free blocks, its block lists "
                f"leave {len(free)} (the free queue shows those)"
            )
        return {
            "free_block_queue": free.tolist(),
            "ref_cnt": ref.tolist(),
            "block_hash": {},
            "num_free_blocks": self.num_free,
            "free_queue_order": "recorded (vLLM's)" if self.queue is not None else NOT_RECORDED,
        }


class RecordedScheduler:
    """Stands in for pagedviz's scheduler: each schedule() is the next recorded step."""

    # blocks_of's lists are the output's own (OutputAdapter need not copy them): made for this
    # step or the step line's, and never written afterwards
    fresh_lists = True

    def __init__(self, header: Header, steps: Iterator[Step], vocab: int) -> None:
        self.header = header
        self.steps = steps
        self.vocab = vocab
        self.problems: list[str] = []
        layers = recorded_layers(header)
        groups = plan_kv_cache_groups(layers.layer_types, layers.sliding_window)
        self.kv = _Blocks(header.num_kv_blocks, self.problems, groups)
        self.tokens: dict[str, TokenLog] = {}
        self.num_prompt: dict[str, int] = {}
        # the recorded outputs as pagedviz's (core/vllm_output.py, as the engine vllm converts vLLM's)
        self.adapter = OutputAdapter(header.runner, len(groups))
        self._step = 0  # the recorded step being converted, and the blocks it handed out
        self._taken: list[int] = []
        self.current: Step | None = None
        self.recorded: dict[int, Step] = {}
        self._next: Step | None = next(self.steps, None)
        self.done_ids: set[str] = set()
        self.causes = RecordedCauses(header)  # the causes derived from the recorded numbers

    @property
    def has_unfinished(self) -> bool:
        return self._next is not None

    def schedule(self, step_no: int) -> SchedulerOutput:
        s = self._next
        if s is None:
            raise ReplayError(f"step {step_no}: the recording has ended")
        self._next = next(self.steps, None)
        self.current = s
        for a in s.arrivals:
            ids = prompt_ids(a.id, a.prompt_token_ids, self.vocab)
            self.tokens[a.id] = TokenLog(ids)
            self.num_prompt[a.id] = len(ids)
        for rid in s.finished:  # nothing of a finished request is kept (a long recording's memory)
            self.adapter.forget(rid)
            self.kv.drop(rid)
            self.tokens.pop(rid, None)
            self.num_prompt.pop(rid, None)
        for rid in s.preempted:
            self.kv.drop(rid)
        self._step = s.step
        self._taken = []  # the blocks this schedule() handed out (off the free queue)
        out = self.adapter.convert(from_recorded(s, ReplayError), step_no, self)
        scheduled = set(s.num_scheduled_tokens)
        out.waiting_req_ids = [
            r for r in self.tokens if r not in scheduled and r not in self.done_ids and r not in s.finished
        ]
        self.kv.num_free = s.num_free_blocks
        self.kv.step = s.step
        self.kv.follow(s.freed, self._taken)
        self.causes.fill(s, out, self.tokens)
        return out

    def tokens_of(self, s: Scheduled) -> tuple[np.ndarray, int]:
        """The request's known tokens (a new request without an arrival line: its prompt)."""
        rid = s.req_id
        if s.is_new and rid not in self.tokens:
            ids = prompt_ids(rid, s.prompt_token_ids, self.vocab)
            self.tokens[rid] = TokenLog(ids)
            self.num_prompt[rid] = len(ids)
        num_prompt = self.num_prompt[rid] if s.is_new else self.num_prompt.get(rid, 0)
        known = self.tokens.get(rid)
        return (known.ids() if known is not None else np.zeros(0, dtype=np.int32)), num_prompt

    def blocks_of(self, s: Scheduled, kind: str) -> tuple[list[list[int]], list[list[int]]]:
        """The request's blocks per group after this step, kept here from the recorded lines: a
        new or resumed request's are the recorded ones, a running request's those it held and the
        new ones, its first blocks null where a sliding window dropped them (`null_head`). A list
        kept here is never written afterwards: a running request that adds no block and drops
        none keeps the same list, step after step (no copy per step)."""
        rid, group_blocks = s.req_id, self.kv.group_blocks
        added = self._per_group(self._step, rid, s.new_block_ids)
        if kind == "running":
            groups = []
            for blocks_of, a in zip(group_blocks, added):
                held = blocks_of.get(rid)
                if held is None:
                    groups.append(list(a))
                else:
                    groups.append([*held, *a] if a else held)
        else:
            groups = [list(g) for g in added]
        if not s.is_new and s.null_head is not None:
            if len(s.null_head) != len(group_blocks):
                raise ReplayError(
                    f"step {self._step}: {rid!r} has a null head for {len(s.null_head)} KV cache "
                    f"group(s), the header {len(group_blocks)}"
                )
            for g, k in enumerate(s.null_head):
                blocks = groups[g]
                k = min(k, len(blocks))
                if any(b != NULL_BLOCK for b in blocks[:k]):  # a sliding window's dropped blocks
                    groups[g] = [NULL_BLOCK] * k + blocks[k:]
        for blocks_of, blocks in zip(group_blocks, groups):
            blocks_of[rid] = blocks
        if any(added):
            self._taken += [b for a in added for b in a if b != NULL_BLOCK]
        return groups, added

    def _per_group(self, step: int, rid: str, recorded: list[list[int]] | None) -> list[list[int]]:
        """A request's recorded block ids, one list per group (none recorded: an empty list each)."""
        n = len(self.kv.groups)
        if not recorded:
            return [[] for _ in range(n)]
        if len(recorded) != n:
            raise ReplayError(
                f"step {step}: {rid!r} has block ids for {len(recorded)} KV cache group(s), the header {n}"
            )
        return recorded  # the step line's own lists: parsed for this step, never written

    def sampled_for(self, req_ids: list[str], v: dict[str, Any]) -> np.ndarray | None:
        """The recorded token of each logits row (None: a redacted recording, tokens are
        synthetic). With drafts a request has num_sampled_tokens rows (its drafts' and the bonus
        row): its recorded tokens (the accepted drafts, then the recovered or bonus token) fill
        them from the first, and the last recorded token the rest, so that greedy verification
        accepts exactly the drafts the server accepted (the token at the first rejected draft's
        row is the one the server sampled there, which differs from that draft)."""
        s = self.current
        assert s is not None
        if self.header.redacted:
            return None
        got = s.sampled or {}
        per_req = [got[r] if isinstance(got.get(r), list) and got[r] else [0] for r in req_ids]
        if "num_sampled_tokens" not in v:
            return np.array([toks[0] for toks in per_req], dtype=np.int32)
        rows = v["num_sampled_tokens"].tolist()
        return np.array(
            [t for toks, n in zip(per_req, rows) for t in (toks + toks[-1:] * n)[:n]], dtype=np.int32
        )

    def _log(self, rid: str) -> TokenLog:
        known = self.tokens.get(rid)
        if known is None:
            known = self.tokens[rid] = TokenLog(np.zeros(0, dtype=np.int32))
        return known

    def update_from_spec_output(
        self, out: SchedulerOutput, generated: dict[str, list[int]], rejected: dict[str, int]
    ) -> None:
        """The tokens each request generated this step (its accepted drafts and one more)."""
        s = self.current
        assert s is not None
        if s.sampled is not None and set(generated) != set(s.sampled):
            self.problems.append(
                f"step {out.step}: pagedviz's runner samples for {sorted(generated)}, the recording for "
                f"{sorted(s.sampled)}"
            )
        for rid, toks in generated.items():
            self._log(rid).extend([int(t) for t in toks])
        for rid in s.finished:
            self.done_ids.add(rid)

    def next_drafts(self) -> dict[str, list[int]]:
        """The drafts the next recorded step schedules (what the drafter proposed after this one)."""
        nxt = self._next
        if nxt is None:
            return {}
        return {r: list(t) for r, t in nxt.spec_tokens.items() if isinstance(t, list)}

    def update_from_output(self, out: SchedulerOutput, sampled: dict[str, int]) -> None:
        s = self.current
        assert s is not None
        recorded = set(s.sampled or {})
        if s.sampled is not None and set(sampled) != recorded:
            self.problems.append(
                f"step {out.step}: pagedviz's runner samples for {sorted(sampled)}, the recording for "
                f"{sorted(recorded)}"
            )
        for rid, tok in sampled.items():
            self._log(rid).append(int(tok))
        for rid in s.finished:
            self.done_ids.add(rid)
