"""Per-step prepare_inputs time of both runners: the engine (trace capture off and on) against a
bare vectorised numpy transcription of the same vLLM code path (no trace, no classes), side by side
in one run.

For each case a scenario is built whose step schedules exactly the named batch: `RxT` is the first
step of R requests prefilling T/R tokens each; `decode 256x1` is 256 requests decoding one token
each after a 16-token prompt, `decode 256x1 ctx 512` the same after a 512-token prompt with
max_model_len 1024 (a [256, 1024] token table); `mixed 64x1+448` is 64 decodes beside one
448-token prefill that arrives then. update_states runs once; then prepare_inputs is timed
repeatedly on the same batch, with trace capture off and on, beside the bare reference (asserted
identical first). Capture is timed twice, side by side: `before`, the runners' persistent tables
copied whole every step as before issue 40 (benchmarks/common.py), and `after`, recorded
by change (core/table_changes.py), with what the step wrote to its tables told again before each
call and the snapshot every MAX_DEPTH steps counted at its frequency (`Captures`).

- V1 (core/runners/v1.py, gpu_model_runner.py's _prepare_inputs): also against a straightforward
  per-token loop in nano-vllm's style that computes the same arrays.
- Model Runner V2 (core/runners/v2.py, vllm/v1/worker/gpu/): the bare reference transcribes what
  V2's CPU side and Triton kernels compute (the sort and idx_mapping, query_start_loc, seq_lens,
  positions, prefill ids from all_token_ids, decode ids from last_sampled_tokens, logits_indices,
  the gathered block table, slot_mapping).

Both scenarios pin their runner with synchronous scheduling and no CUDA graphs. Targets: engine/bare
<= 1.2x and capture (after)/bare <= 1.3x for both runners at every size, decode 256x1 ctx 512
included (issue 40); V1's loop at least 40x slower than the engine at 8192 tokens. `--cases
decode` runs only the cases whose label holds that text.

A second pass runs the same cases with two KV cache groups (`layer_types` sliding_attention then
full_attention, a window of 64 tokens): the bare references then compute every group's arrays as
vLLM does (V1: one block table and slot_mapping per group, MultiGroupBlockTable; V2: each group's
gathered table, a sliding group's entries below the window nulled, and slot_mapping per group).
Target: engine/bare <= 1.3x for both runners (issue 38). Run:

    .venv/bin/python benchmarks/prepare_inputs.py
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from common import bench_dict, full_copy

from pagedviz.core import Engine, Limits, Scenario, make_engine
from pagedviz.core.device import StageTimer
from pagedviz.core.table_changes import TableChanges
from pagedviz.core.table_versions import MAX_DEPTH
from pagedviz.core.trace import StepTrace

# the batches the performance targets name: (label, requests, scheduled tokens, extra prefill):
# the first step of `requests` prefills of tokens/requests tokens each; a decode step of
# `requests` requests (tokens == requests: one token each); a decode step of `requests` requests
# beside one prefill of `extra` tokens that arrives then (mixed)
# the decodes' context: 16 tokens, or 512 with max_model_len 1024 (issue 40's decode 256x1)
CASES = [
    ("prefill", 8, 256, 0, 0),
    ("prefill", 64, 1024, 0, 0),
    ("prefill", 256, 4096, 0, 0),
    ("prefill", 256, 8192, 0, 0),
    ("prefill", 1024, 16384, 0, 0),
    ("decode", 256, 256, 0, 16),
    ("decode", 256, 256, 0, 512),
    ("mixed", 64, 64, 448, 16),
]
LONG_CONTEXT_MODEL_LEN = 1024


# the two-group pass: gpt-oss style layers (groups [sliding, full]) and a window in tokens
HYBRID_LAYERS = ["sliding_attention", "full_attention"]
HYBRID_WINDOW = 64


def build(
    kind: str, requests: int, tokens: int, extra: int, runner: str, groups: int = 1, context: int = 16
) -> Engine:
    """An engine whose next prepare_inputs is the case's step (update_states already done); with
    groups=2 its model has a sliding-window layer beside a full-attention one (two block tables)."""
    if kind == "prefill":
        d = bench_dict(requests, tokens, model=False, runner=runner)
    else:
        # the decodes first prefill `context` tokens each (step 1); the mixed case's prefill arrives
        # at step 2
        d = bench_dict(requests, requests * context, model=False, runner=runner)
        for r in d["requests"]:
            r["max_tokens"] = 4
        cfg = d["config"]
        if context > 16:
            cfg["max_model_len"] = LONG_CONTEXT_MODEL_LEN
        if extra:
            d["requests"].append({"id": "p", "prompt_len": extra, "max_tokens": 1, "arrival_step": 2})
            cfg["max_num_reqs"] = requests + 1
            cfg["max_model_len"] = max(cfg["max_model_len"], extra + 16)
            cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], requests + extra)
            cfg["num_kv_blocks"] += extra // 16 + 2
    if groups == 2:
        cfg = d["config"]
        cfg.update(layer_types=HYBRID_LAYERS, sliding_window=HYBRID_WINDOW)
        cfg["num_kv_blocks"] = 2 * cfg["num_kv_blocks"]  # every group holds its own blocks
    limits = Limits(
        max_requests=requests + 1,
        max_step_mflop=1 << 30,
        max_tokens_per_step=1 << 20,
        max_total_tokens=1 << 24,
        max_step_trace_kb=1 << 24,
    )
    engine = make_engine(Scenario.from_dict(d, limits))
    step = 1
    if kind != "prefill":
        engine.step()
        step = 2
    out = engine.scheduler.schedule(step)
    engine.runner.update_states(out)
    got = sum(s.num_scheduled for s in out.scheduled)
    assert (len(out.scheduled), got) == (requests + (1 if extra else 0), tokens + extra), (
        kind,
        requests,
        got,
    )
    return engine


def loop_prepare(engine: Engine) -> dict[str, list[int]]:
    """The same arrays, one token at a time (the straightforward way)."""
    r = engine.runner
    ib = r.input_batch
    n_sched = r.v["num_scheduled_tokens"].tolist()
    token_ids = ib.token_ids_cpu
    block_table = ib.block_table.block_table_np
    bs = r.block_size
    out: dict[str, list[int]] = {k: [] for k in ("req_indices", "positions", "input_ids", "slot_mapping")}
    qsl, seq_lens = [0], []
    for i, n in enumerate(n_sched):
        computed = int(ib.num_computed_tokens_cpu[i])
        for j in range(n):
            pos = computed + j
            out["req_indices"].append(i)
            out["positions"].append(pos)
            out["input_ids"].append(int(token_ids[i, pos]))
            out["slot_mapping"].append(int(block_table[i, pos // bs]) * bs + pos % bs)
        qsl.append(qsl[-1] + n)
        seq_lens.append(computed + n)
    out["query_start_loc"], out["seq_lens"] = qsl, seq_lens
    return out


class BareReference:
    """vLLM's _prepare_inputs arrays in plain numpy on preallocated buffers, as its model runner
    does: no trace, no stage bookkeeping. Reads the same persistent batch as the engine. Like
    vLLM it also pads the persistent query_start_loc and seq_lens buffers (past num_reqs) and
    takes the attention metadata's max_query_len and max_seq_len."""

    def __init__(self, engine: Engine) -> None:
        r = engine.runner
        ib = r.input_batch
        self.num_scheduled = r.v["num_scheduled_tokens"]
        self.num_computed = ib.num_computed_tokens_cpu
        self.num_tokens = ib.num_tokens
        self.token_ids_flat = ib.token_ids_cpu.reshape(-1)
        # one block table per KV cache group (MultiGroupBlockTable), one slot_mapping each
        self.block_table_flats = [t.block_table_np.reshape(-1) for t in ib.block_tables.block_tables]
        self.M, self.K, self.bs = r.max_model_len, r.max_num_blocks_per_req, r.block_size
        n, T = len(self.num_scheduled), int(self.num_scheduled.sum())
        self.arange = np.arange(max(n, T) + 1, dtype=np.int64)
        self.positions = np.empty(T, dtype=np.int64)
        self.input_ids = np.empty(T, dtype=np.int32)
        self.slot_mappings = [np.empty(T, dtype=np.int64) for _ in self.block_table_flats]
        # the persistent buffers hold max_num_reqs (+ 1) entries, as the engine's do
        self.query_start_loc_buf = np.empty(r.config.max_num_reqs + 1, dtype=np.int32)
        self.seq_lens_buf = np.empty(r.config.max_num_reqs, dtype=np.int32)

    def __call__(self) -> dict[str, np.ndarray]:
        n_sched = self.num_scheduled
        n = len(n_sched)
        req_indices = np.repeat(self.arange[:n], n_sched)
        cu = np.cumsum(n_sched, dtype=np.int64)
        T = int(cu[-1])
        arange = self.arange[:T] - np.repeat(cu - n_sched, n_sched)
        positions = self.positions
        np.add(self.num_computed[req_indices], arange, out=positions)
        token_indices = positions + req_indices * self.M
        np.take(self.token_ids_flat, token_indices, out=self.input_ids)
        cells = req_indices * self.K + positions // self.bs
        offsets = positions % self.bs
        slot_mappings = {}
        for g, (flat, out) in enumerate(zip(self.block_table_flats, self.slot_mappings)):
            np.add(flat[cells].astype(np.int64) * self.bs, offsets, out=out)
            slot_mappings["slot_mapping" + (f"_g{g}" if g else "")] = out
        qsl = self.query_start_loc_buf
        qsl[0] = 0
        qsl[1 : n + 1] = cu
        qsl[n + 1 :] = T
        seq_lens = self.seq_lens_buf[:n]
        np.add(self.num_computed[:n], n_sched, out=seq_lens)
        self.seq_lens_buf[n:] = 0
        discard = seq_lens < self.num_tokens[:n]
        logits_indices = qsl[1 : n + 1].astype(np.int64) - 1
        return {
            "req_indices": req_indices,
            "positions": positions,
            "input_ids": self.input_ids,
            **slot_mappings,
            "query_start_loc": qsl[: n + 1],
            "seq_lens": seq_lens,
            "discard_request_mask": discard,
            "logits_indices": logits_indices,
            "max_query_len": int(n_sched.max()),
            "max_seq_len": int(seq_lens.max()),
        }


class BareReferenceV2:
    """Model Runner V2's prepare_inputs in plain numpy on preallocated buffers: what its CPU side
    and its Triton kernels compute (the sort and idx_mapping; query_start_loc and seq_lens with
    their padded tails; positions; prefill ids from all_token_ids and decode ids from
    last_sampled_tokens; logits_indices; the block table gathered by idx_mapping with its own
    blocks only; slot_mapping from the per-slot table, -1 past T), without trace or stages. Reads
    the runner's per-slot state after update_states. No CUDA graphs (the cases configure none)."""

    def __init__(self, engine: Engine) -> None:
        r = engine.runner
        assert not r.config.cudagraph_capture_sizes and not r.config.num_speculative_tokens
        self.r = r
        self.ids = list(r.v["scheduled_req_ids"])
        self.n = r.v["scheduler_num_scheduled"]
        self.index = r.req_id_to_index
        M, K = r.max_num_reqs, r.max_num_blocks
        T_buf = r.buffer_tokens
        self.bs = r.block_size
        self.arange = np.arange(max(M, T_buf) + 1, dtype=np.int64)
        self.query_start_loc = np.zeros(M + 1, dtype=np.int32)
        self.seq_lens = np.zeros(M, dtype=np.int32)
        self.input_ids = np.zeros(T_buf, dtype=np.int32)
        self.positions = np.zeros(T_buf, dtype=np.int64)
        # BlockTables with num_kv_cache_groups: per group a per-slot table, its gathered copy and a
        # slot_mapping; a sliding-window group's reach (sliding_window - 1), else 0
        G = len(r.group_block_tables)
        self.slot_mappings = [np.full(T_buf, -1, dtype=np.int64) for _ in range(G)]
        self.input_block_tables = [np.zeros((M, K), dtype=np.int32) for _ in range(G)]
        self.reach = [
            g.sliding_window - 1 if g.sliding and g.sliding_window else 0 for g in r.config.kv_cache_groups
        ]
        self.block_cols = self.arange[:K]

    def __call__(self) -> dict[str, object]:
        r = self.r
        n0 = self.n
        # sort: drafts first (none here), then decodes (1 token), then prefills by ascending length
        order = np.lexsort((n0, n0 != 1))
        n = n0[order]
        ids = self.ids
        req_ids = [ids[i] for i in order.tolist()]  # the batch order, as vLLM keeps it
        idx = np.fromiter(map(self.index.__getitem__, req_ids), dtype=np.int64, count=len(req_ids))
        R = len(n)
        qsl = self.query_start_loc
        qsl[0] = 0
        np.cumsum(n, out=qsl[1 : R + 1])
        T = int(qsl[R])
        qsl[R + 1 :] = T
        nc = r.num_computed_tokens[idx]
        seq_lens = self.seq_lens[:R]
        np.add(nc, n, out=seq_lens)
        self.seq_lens[R:] = 0
        cu = qsl[1 : R + 1].astype(np.int64)
        slot_tok = np.repeat(idx, n)
        pos = self.positions[:T]
        np.add(np.repeat(nc.astype(np.int64) - (cu - n), n), self.arange[:T], out=pos)
        # prefill rows read all_token_ids (read here for every token), and a decode row's last
        # token is the slot's last sampled token
        ids_out = self.input_ids[:T]
        np.take(r.all_token_ids.reshape(-1), slot_tok * r.max_model_len + pos, out=ids_out)
        decoding = seq_lens > r.prefill_len[idx]
        ids_out[cu[decoding] - 1] = r.last_sampled_tokens[idx[decoding]]
        logits_indices = cu - 1
        col, offsets = pos // self.bs, pos % self.bs
        per_group: dict[str, np.ndarray] = {}
        for g, (bt, sm) in enumerate(zip(self.input_block_tables, self.slot_mappings)):
            table, nb = r.group_block_tables[g], r.group_num_blocks[g, idx]
            own = self.block_cols < nb[:, None]
            rows = table[idx]
            if self.reach[g]:  # gather_block_tables' MASK_SLIDING_WINDOW
                num_null = np.maximum(nc - self.reach[g], 0) // self.bs
                rows = np.where(self.block_cols < num_null[:, None], 0, rows)
            bt[:R] = np.where(own, rows, bt[:R])
            sm[:T] = table[slot_tok, col].astype(np.int64) * self.bs + offsets
            sm[T:] = -1
            suffix = f"_g{g}" if g else ""
            per_group["input_block_tables" + suffix] = bt[:R]
            per_group["slot_mapping" + suffix] = sm[:T]
        return {
            "req_ids": req_ids,
            "idx_mapping": idx,
            "num_scheduled_tokens": n,
            "query_start_loc": qsl[: R + 1],
            "seq_lens": seq_lens,
            "positions": pos,
            "input_ids": ids_out,
            "cu_num_logits": self.arange[: R + 1].astype(np.int32),
            "logits_indices": logits_indices,
            **per_group,
            "max_query_len": int(n.max()),
            "max_seq_len": int((r.num_computed_tokens_np[idx] + n).max()),
        }


def best_of(fn, repeat: int) -> float:
    """The median microseconds of `repeat` calls."""
    return float(np.median(calls(fn, repeat))) / 1e3


def calls(fn, repeat: int) -> list[int]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return times


def change_logs(runner: Any) -> list[TableChanges]:
    """The runner's records of what it wrote to its persistent tables (core/table_changes.py)."""
    if runner.runner == "v2":
        return [runner.token_changes, *runner.tables.changes]
    ib = runner.input_batch
    return [ib.token_changes, *(t.changes for t in ib.block_tables.block_tables)]


class Captures:
    """prepare_inputs with the trace captured, before (main's whole copies of the persistent
    tables, benchmarks/common.py) and after (by change), each call as the case's step
    does it: the runner's record of what the step wrote to its tables (the prefills' new rows,
    the decodes' one token a row) is put back before each call, and successive calls extend one
    run's versions, so that the snapshot every MAX_DEPTH steps is paid too: the after figure
    weighs the median time of the calls that made no snapshot and of those that made one (of
    which table) by how often each came (a mean would follow this machine's load: a call
    descheduled for milliseconds outweighs a hundred others)."""

    def __init__(self, engine: Engine, reset: Any) -> None:
        self.runner = runner = engine.runner
        self.reset = reset
        self.timer = StageTimer(engine.device)
        self.logs = change_logs(runner)
        self.written = [
            (c.origin.copy(), c.lo.copy(), c.hi.copy(), c.structural, [*c.entries], [*c.spans], c.pending)
            for c in self.logs
        ]
        self.scalars = [tuple(list(x) for x in c.scalars) for c in self.logs]
        self.appended = [c.appended for c in self.logs]
        # the lengths of the rows that grow by appending (block tables) at the step before
        self.prev_len = [None if c.prev_len is None else c.prev_len.copy() for c in self.logs]
        self.after_capture = runner.capture_state
        self.after_times: dict[tuple[bool, ...], list[int]] = {}

    def _restore_writes(self) -> None:
        for c, (origin, lo, hi, structural, entries, spans, pending) in zip(self.logs, self.written):
            if structural:
                np.copyto(c.origin, origin)
                np.copyto(c.lo, lo)
                np.copyto(c.hi, hi)
            c.structural = structural
            c.entries[:], c.spans[:], c.pending = entries, spans, pending
        for c, scalars, appended, prev_len in zip(self.logs, self.scalars, self.appended, self.prev_len):
            for told, x in zip(c.scalars, scalars):
                told[:] = x
            c.appended = appended
            if prev_len is not None:
                np.copyto(c.prev_len, prev_len)

    def _on(self) -> StepTrace:
        self.reset()
        trace = StepTrace(step=1)
        self.runner.prepare_inputs(trace, self.timer)
        self.runner.record_batch(trace)
        return trace

    def before(self) -> None:
        full_copy(self.runner)
        try:
            self._on()
        finally:
            self.runner.capture_state = self.after_capture

    def after(self) -> None:
        self._restore_writes()
        self._on()

    def time_after(self, repeat: int) -> None:
        for _ in range(repeat):
            self._restore_writes()  # made by the writes themselves, not by the capture: not timed
            t0 = time.perf_counter_ns()
            self._on()
            t = time.perf_counter_ns() - t0
            kind = tuple(c.last is not None and c.last.snapshot is not None for c in self.logs)
            self.after_times.setdefault(kind, []).append(t)

    def check(self) -> None:
        """Both record the same tables."""
        full = self._on_with(full_copy)
        self._restore_writes()
        by_change = self._on()
        for name, entry in full.array_entries.items():
            assert np.array_equal(entry.data, by_change.array_entries[name].data), name

    def _on_with(self, install: Any) -> StepTrace:
        install(self.runner)
        try:
            return self._on()
        finally:
            self.runner.capture_state = self.after_capture

    @property
    def after_median(self) -> float:
        n = sum(len(t) for t in self.after_times.values())
        return sum(len(t) * float(np.median(t)) for t in self.after_times.values()) / n / 1e3


def measure(
    kind: str, R: int, T: int, extra: int, repeat: int, groups: int = 1, context: int = 16
) -> tuple[float, float, float, float, float]:
    """V1, microseconds: bare reference, capture off, capture before, capture after, per-token loop."""
    engine = build(kind, R, T, extra, "v1", groups, context)
    runner = engine.runner
    timer = StageTimer(engine.device)
    state = dict(runner.v)

    def reset() -> None:
        runner.v = dict(state)

    def off() -> None:
        reset()
        runner.prepare_inputs(None, timer)

    captures = Captures(engine, reset)
    off()
    ref = loop_prepare(engine)
    assert ref["slot_mapping"] == runner.v["slot_mapping"].tolist()
    assert ref["input_ids"] == runner.v["input_ids"].tolist()
    bare = BareReference(engine)
    for name, want in bare().items():
        got = runner.v["scalars"][name] if name.startswith("max_") else runner.v[name]
        assert np.array_equal(got, want), f"{name} differs from the bare reference"
    captures.check()
    # interleave the measurements so that drift of this machine's speed touches each alike
    t_bare, t_off, t_before, t_loop = [], [], [], []
    for _ in range(5):
        t_bare.append(best_of(bare, max(1, repeat // 5)))
        t_off.append(best_of(off, max(1, repeat // 5)))
        t_before.append(best_of(captures.before, max(1, repeat // 5)))
        captures.time_after(max(MAX_DEPTH + 1, repeat // 5))
        t_loop.append(best_of(lambda: loop_prepare(engine), max(1, repeat // 100)))
    return (
        float(np.median(t_bare)),
        float(np.median(t_off)),
        float(np.median(t_before)),
        captures.after_median,
        float(np.median(t_loop)),
    )


def measure_v2(
    kind: str, R: int, T: int, extra: int, repeat: int, groups: int = 1, context: int = 16
) -> tuple[float, float, float, float]:
    """Model Runner V2, microseconds: bare reference, capture off, capture before, capture after."""
    engine = build(kind, R, T, extra, "v2", groups, context)
    runner = engine.runner
    timer = StageTimer(engine.device)
    state = dict(runner.v)

    def reset() -> None:
        runner.v = dict(state)
        runner.v["scalars"] = {}

    def off() -> None:
        reset()
        runner.prepare_inputs(None, timer)

    captures = Captures(engine, reset)
    off()
    bare = BareReferenceV2(engine)
    for name, want in bare().items():
        if name == "req_ids":
            assert runner.row_req_ids == want, "V2's batch order differs from the bare reference"
            continue
        got = runner.v["scalars"][name] if name.startswith("max_") else runner.v[name]
        assert np.array_equal(got, want), f"V2 {name} differs from the bare reference"
    captures.check()
    t_bare, t_off, t_before = [], [], []
    for _ in range(5):
        t_bare.append(best_of(bare, max(1, repeat // 5)))
        t_off.append(best_of(off, max(1, repeat // 5)))
        t_before.append(best_of(captures.before, max(1, repeat // 5)))
        captures.time_after(max(MAX_DEPTH + 1, repeat // 5))
    after = captures.after_median
    return float(np.median(t_bare)), float(np.median(t_off)), float(np.median(t_before)), after


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--groups", type=int, choices=(1, 2), nargs="*", default=[1, 2], help="KV cache groups")
    ap.add_argument("--cases", default="", help="only the cases whose label contains this (e.g. decode)")
    args = ap.parse_args()
    cases = [c for c in CASES if args.cases in label(*c)]
    for groups in args.groups:
        run_pass(args.repeat, groups, cases)


def run_pass(repeat: int, groups: int, cases: list[tuple[str, int, int, int, int]]) -> None:
    if groups == 2:
        print(f"\n=== two KV cache groups: layer_types {HYBRID_LAYERS}, sliding_window {HYBRID_WINDOW} ===")
    print("V1 runner (core/runners/v1.py) against its bare numpy transcription and a per-token loop")
    print("capture: before = whole copies of the persistent tables (main), after = by change")
    head = (
        f"{'batch':>21} | {'bare us':>8} {'engine us':>9} {'before us':>9} {'after us':>8} | "
        f"{'engine/bare':>11} {'before/bare':>11} {'after/bare':>10}"
    )
    print(head + f" | {'loop us':>9} {'loop/engine':>11}")
    for kind, R, T, extra, context in cases:
        t_bare, t_off, t_before, t_after, t_loop = measure(kind, R, T, extra, repeat, groups, context)
        print(
            f"{label(kind, R, T, extra, context):>21} | {t_bare:>8.1f} {t_off:>9.1f} {t_before:>9.1f} "
            f"{t_after:>8.1f} | {t_off / t_bare:>10.2f}x {t_before / t_bare:>10.2f}x "
            f"{t_after / t_bare:>9.2f}x | {t_loop:>9.1f} {t_loop / t_off:>10.1f}x"
        )
    print("\nModel Runner V2 (core/runners/v2.py) against its bare numpy transcription")
    print(head)
    for kind, R, T, extra, context in cases:
        t_bare, t_off, t_before, t_after = measure_v2(kind, R, T, extra, repeat, groups, context)
        print(
            f"{label(kind, R, T, extra, context):>21} | {t_bare:>8.1f} {t_off:>9.1f} {t_before:>9.1f} "
            f"{t_after:>8.1f} | {t_off / t_bare:>10.2f}x {t_before / t_bare:>10.2f}x "
            f"{t_after / t_bare:>9.2f}x"
        )


def label(kind: str, R: int, T: int, extra: int, context: int = 16) -> str:
    """8x256 (requests x tokens of the step), decode 256x1, decode 256x1 ctx 512, mixed 64x1+448."""
    if kind == "prefill":
        return f"{R}x{T}"
    ctx = f" ctx {context}" if context > 16 else ""
    return f"{kind} {R}x1" + (f"+{extra}" if extra else "") + ctx


if __name__ == "__main__":
    main()
