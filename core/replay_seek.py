"""Any step of a recording at once (issue 40): the replay's state rolled forward cheaply from a
checkpoint, then the one step asked for computed in full.

A cheap step (`cheap_step`) is the replay's step without what only its trace needs: the recorded
scheduler's schedule() and update, the runner's `update_states`, `prepare_inputs` run bare (no
arrays recorded: its persistent buffers' stale tails are in a later step's trace, and V2's
post_update reads its idx_mapping, so it runs, without capture, a few tens of microseconds), the
recorded sampled tokens appended; no copy to the device, no trace, no narration. It returns the
step's overview line (app/summaries.py's fields), made from the runner's state, so a whole
replay of cheap steps fills the overview. The step asked for is then the engine's own `step()`,
capture on: byte for byte what a full replay gives (tests/engine/test_replay_seek.py).

A checkpoint (`checkpoint` / `restore`) is the engine after a step, pickled and compressed,
without its scenario (the run's own, given back on restore) and without its reader of the
recording: the byte offset of the next step's line stands for it. `StepLines` reads step lines
from such an offset out of anything with `read_at(offset, size)` (a file, or the recording kept in
the store's database).
"""

from __future__ import annotations

import contextlib
import functools
import pickle
import types
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Protocol

import numpy as np
import torch

from pagedviz.core.device import StageTimer
from pagedviz.core.kv_cache import NULL_BLOCK, usable_blocks
from pagedviz.core.recording import Header, Step
from pagedviz.core.replay import ReplayEngine
from pagedviz.core.replay_scheduler import ReplayError
from pagedviz.core.scenario import Scenario
from pagedviz.core.scheduler_output import SchedulerOutput
from pagedviz.core.table_changes import TableChanges
from pagedviz.core.trace import StepTrace

CHUNK = 1 << 16


class Source(Protocol):
    """Random access to a recording's bytes."""

    def read_at(self, offset: int, size: int) -> bytes: ...


class FileSource:
    """A recording file as a Source."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f

    def read_at(self, offset: int, size: int) -> bytes:
        self.f.seek(offset)
        return self.f.read(size)


class StepLines(Iterator[Step]):
    """The recording's steps from the line at byte `offset` (a step line: the recording was
    checked when it was imported), at most `remaining` of them. `offset` after each step is the
    byte offset of the next line, `last` that of the step read last."""

    def __init__(self, source: Source, offset: int, remaining: int) -> None:
        self.source, self.offset, self.remaining = source, offset, remaining
        self.last = offset
        self._buf = b""
        self._at = offset  # the byte offset of _buf's first byte

    def _line(self) -> bytes:
        while True:
            nl = self._buf.find(b"\n", self.offset - self._at)
            if nl >= 0:
                line = self._buf[self.offset - self._at : nl + 1]
                return line
            more = self.source.read_at(self._at + len(self._buf), CHUNK)
            if not more:  # the last line, without its newline
                return self._buf[self.offset - self._at :]
            self._buf = self._buf[self.offset - self._at :] + more
            self._at = self.offset

    def __next__(self) -> Step:
        while self.remaining > 0:
            line = self._line()
            if not line:
                break
            self.last = self.offset
            self.offset += len(line)
            if not line.strip():
                continue
            self.remaining -= 1
            return Step.model_validate_json(line)  # checked at the import: parsed in one pass
        raise StopIteration


def header_end(source: Source) -> int:
    """The byte offset of the first step line (just past the header)."""
    at, buf = 0, b""
    while True:
        more = source.read_at(at, CHUNK)
        if not more:
            raise ReplayError("line 1: a header alone: the recording has no step")
        buf += more
        at += len(more)
        nl = buf.find(b"\n")
        if nl >= 0:
            return nl + 1


# --- the cheap step -----------------------------------------------------------------------------


def cheap_step(e: ReplayEngine, overview: bool = True) -> tuple[dict[str, Any], SchedulerOutput]:
    """One recorded step applied without its trace (module docstring): the step's overview line,
    as app/summaries.py's step_summary makes it from the full trace (empty without `overview`: a
    seek rolling forward needs none), and the scheduler output."""
    e.step_no += 1
    timer = StageTimer(e.device)
    out = e.scheduler.schedule(e.step_no)
    runner: Any = e.runner
    runner.update_states(out)
    v = runner.prepare_inputs(None, timer)
    scratch = StepTrace(step=e.step_no, idle=not out.scheduled)
    line = _overview(e, out, v) if overview else {}
    spec = e.scenario.config.num_speculative_tokens
    sampled: dict[str, int] = {}
    generated: dict[str, list[int]] = {}
    if out.scheduled:
        capture, e.capture = e.capture, False
        try:
            tokens = e._forward_and_sample(v, scratch, timer)
            if spec:
                generated = e._accept_drafts(v, tokens, scratch)
                sampled = {rid: toks[-1] for rid, toks in generated.items()}
            else:
                keep = ~v["discard_request_mask"]
                sampled = {rid: int(t) for rid, t, k in zip(runner.row_req_ids, tokens, keep) if k}
        finally:
            e.capture = capture
    if spec:
        e._update_with_drafts(out, generated, scratch)
    else:
        e.scheduler.update_from_output(out, sampled)
        runner.append_sampled(sampled)
    return line, out


def _overview(e: ReplayEngine, out: SchedulerOutput, v: dict[str, Any]) -> dict[str, Any]:
    """The step's overview line from the runner's state after prepare_inputs (the state the
    full step's trace records)."""
    runner: Any = e.runner
    req_ids = [str(r) for r in runner.row_req_ids]
    n = len(req_ids)
    admitted = {*out.new_req_ids, *out.resumed_req_ids}
    cached: dict[str, int] = {}
    if not out.scheduled:
        kind = "idle"
    elif getattr(runner, "runner", "v1") == "v2":
        # V2's trace has no per-row num_tokens nor num_computed_tokens_cpu: step_summary reads
        # it as the nanovllm form (no `is_prefill` scalar: a decode) with no admission's cache hit
        kind = "decode"
    else:
        ib = runner.input_batch
        computed = ib.num_computed_tokens_cpu[:n]
        decode = (v["num_scheduled_tokens"] == 1) & (computed == ib.num_tokens[:n] - 1)
        kind = "decode" if decode.all() else "prefill" if not decode.any() else "mixed"
        cached = {rid: int(computed[r]) for r, rid in enumerate(req_ids) if rid in admitted}
    kv = e.scheduler.kv  # type: ignore[attr-defined]
    held: set[int] = set().union(*(b for blocks_of in kv.group_blocks for b in blocks_of.values()))
    held.discard(NULL_BLOCK)
    sched = out
    return {
        "step": e.step_no,
        "idle": not out.scheduled,
        "kind": kind,
        "num_reqs": n,
        "num_tokens": int(sched.total_num_scheduled_tokens),
        "new_req_ids": sched.new_req_ids,
        "resumed_req_ids": sched.resumed_req_ids,
        "finished_req_ids": list(sched.finished_req_ids),
        "preempted_req_ids": list(sched.preempted_req_ids),
        "kv_blocks_in_use": len(held),
        "kv_pool_blocks": usable_blocks(e.flavor, kv.num_blocks),
        "num_cached_tokens": cached,
    }


# --- checkpoints ----------------------------------------------------------------------------------


# what a checkpoint holds changes with the replay's own classes: one kept by another version is
# not used (the seek rolls forward from the start, and keeps checkpoints of this format)
CHECKPOINT_FORMAT = 2


class StaleCheckpointError(Exception):
    """A checkpoint kept by a pagedviz whose replay state had another form."""


@dataclass
class Checkpoint:
    """The engine after step `n`, and where the recording's next step line starts (None: the
    recording has no step after n)."""

    n: int
    offset: int | None
    body: bytes


def checkpoint(e: ReplayEngine, lines: StepLines) -> Checkpoint:
    """The engine's state pickled (zlib): its step, its recorded scheduler (without its reader of
    the recording) and its runner."""
    sched: Any = e.scheduler
    nxt = sched._next
    offset = None if nxt is None else lines.last
    saved = (sched.steps, sched._next)
    sched.steps = sched._next = None
    try:
        runner = {k: v for k, v in vars(e.runner).items() if not _code(v)}
        state = (CHECKPOINT_FORMAT, e.step_no, e.truncated, sched, runner)
        body = zlib.compress(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL), 1)
    finally:
        sched.steps, sched._next = saved
    return Checkpoint(e.step_no, offset, body)


def restore(
    cp: Checkpoint, header: Header, scenario: Scenario, source: Source, total: int
) -> tuple[ReplayEngine, StepLines]:
    """The engine of a checkpoint, reading the recording (`total` steps) on from its offset: a
    fresh engine whose runner's buffers take the saved values in place (a pickled runner's
    numpy views of its torch buffers would come back as copies of their own)."""
    state = pickle.loads(zlib.decompress(cp.body))  # noqa: S301 - our store's
    if len(state) != 5 or state[0] != CHECKPOINT_FORMAT:
        raise StaleCheckpointError(f"a checkpoint of another format than {CHECKPOINT_FORMAT}")
    _, step_no, truncated, sched, runner = state
    lines = StepLines(source, cp.offset or 0, 0 if cp.offset is None else total - cp.n)
    e = ReplayEngine(scenario, header, iter(()))
    for k, value in runner.items():
        setattr(e.runner, k, _value(getattr(e.runner, k, _MISSING), value))
    e.step_no, e.truncated = step_no, truncated
    e.scheduler = sched
    e._steps = sched.steps = lines
    sched._next = next(lines, None)
    return e, lines


_MISSING = object()


def _assign(dst: Any, src: Any) -> None:
    """dst's attributes take src's values, arrays and tensors copied into dst's own (in place)."""
    for k, value in vars(src).items():
        setattr(dst, k, _value(getattr(dst, k, _MISSING), value))


def _code(x: Any) -> bool:
    """Whether x is a function or method, or a list or tuple holding one (the runner's stage
    plan): the fresh runner's own are kept."""
    if isinstance(x, (types.MethodType, types.FunctionType, functools.partial)):
        return True
    return isinstance(x, (list, tuple)) and any(_code(y) for y in x)


def _value(dst: Any, src: Any) -> Any:
    if isinstance(src, np.ndarray):
        if isinstance(dst, np.ndarray) and dst.shape == src.shape and dst.dtype == src.dtype:
            np.copyto(dst, src)
            return dst
        return src
    if isinstance(src, torch.Tensor):
        if isinstance(dst, torch.Tensor) and dst.shape == src.shape and dst.dtype == src.dtype:
            dst.copy_(src)
            return dst
        return src
    if _code(src):
        return dst  # bound to the fresh runner
    if isinstance(src, TableChanges) and isinstance(dst, TableChanges):
        # the fresh runner's record of a table's writes, on its own buffer (an unpickled one
        # would watch a copy): it starts afresh, its next capture a snapshot from the table now
        dst.stale = True
        return dst
    if isinstance(src, list) and isinstance(dst, list) and len(src) == len(dst):
        kept = (np.ndarray, torch.Tensor, TableChanges)
        if any(isinstance(x, kept) or hasattr(x, "__dict__") for x in src):
            dst[:] = [_value(d, s) for d, s in zip(dst, src)]
            return dst
        return src
    if (
        hasattr(src, "__dict__")
        and type(dst) is type(src)
        and not isinstance(src, type)
        and type(src).__module__.startswith("pagedviz.")
        and not getattr(getattr(type(src), "__dataclass_params__", None), "frozen", False)
    ):
        _assign(dst, src)
        return dst
    return src


def fresh(header: Header, scenario: Scenario, source: Source, total: int) -> tuple[ReplayEngine, StepLines]:
    """The engine before the recording's first step."""
    lines = StepLines(source, header_end(source), total)
    return ReplayEngine(scenario, header, lines), lines


class Seeker:
    """Step n of a recording computed in full from the nearest checkpoint at or before n - 1
    (`nearest(n)`), rolled forward with cheap steps; every K-th step passed on the way is handed
    to `keep` as a checkpoint (so a second visit anywhere costs at most K cheap steps)."""

    def __init__(
        self,
        header: Header,
        scenario: Scenario,
        source: Source,
        total: int,
        every: int,
        nearest: Callable[[int], Checkpoint | None] = lambda n: None,
        keep: Callable[[Checkpoint], None] = lambda cp: None,
    ) -> None:
        self.header, self.scenario, self.source, self.total = header, scenario, source, total
        self.every, self.nearest, self.keep = every, nearest, keep

    def engine_at(self, n: int) -> tuple[ReplayEngine, StepLines]:
        """The engine after step n (n = 0: before the first)."""
        cp = self.nearest(n)
        restored = None
        if cp is not None and cp.n <= n:
            with contextlib.suppress(StaleCheckpointError):
                restored = restore(cp, self.header, self.scenario, self.source, self.total)
        e, lines = restored or fresh(self.header, self.scenario, self.source, self.total)
        while e.step_no < n:
            cheap_step(e, overview=False)
            if e.step_no % self.every == 0:
                self.keep(checkpoint(e, lines))
        return e, lines

    def step(self, n: int) -> StepTrace:
        """Step n's full trace (1 <= n <= total)."""
        if not 1 <= n <= self.total:
            raise ReplayError(f"step {n} is outside 1..{self.total}")
        e, _ = self.engine_at(n - 1)
        return e.step()

    def run_from(self, n: int) -> Iterator[StepTrace]:
        """Steps n, n + 1, ... to the end, each in full."""
        e, _ = self.engine_at(n - 1)
        while e.step_no < self.total and not e.done:
            yield e.step()
