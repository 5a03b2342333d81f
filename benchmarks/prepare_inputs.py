"""Per-step prepare_inputs time: the engine (trace capture off and on) against a bare vectorised
numpy transcription of the same vLLM code path (no trace, no classes), and against a per-token loop.

For each (requests, tokens) a scenario is built whose first step schedules exactly that many
requests and tokens (each request prefills tokens/requests tokens). update_states runs once; then
prepare_inputs is timed repeatedly on the same batch, with trace capture on and off, beside the
bare-numpy reference (asserted identical first) and a straightforward per-token loop in nano-vllm's
style that computes the same arrays. Targets: engine/reference <= 1.2x and capture-on/reference
<= 1.3x at every size; the loop at least 40x slower than the engine at 8192 tokens. Run:

    .venv/bin/python benchmarks/prepare_inputs.py
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from common import bench_scenario

from pagedviz.core import Engine, make_engine
from pagedviz.core.device import StageTimer
from pagedviz.core.trace import StepTrace

# the sizes the performance targets name: (requests, scheduled tokens)
SIZES = [(8, 256), (64, 1024), (256, 4096), (256, 8192), (1024, 16384)]


def build(requests: int, tokens: int) -> Engine:
    scenario = bench_scenario(requests, tokens, model=False)
    engine = make_engine(scenario)
    out = engine.scheduler.schedule(1)
    engine.runner.update_states(out)
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
        self.block_table_flat = ib.block_table.block_table_np.reshape(-1)
        self.M, self.K, self.bs = r.max_model_len, r.max_num_blocks_per_req, r.block_size
        n, T = len(self.num_scheduled), int(self.num_scheduled.sum())
        self.arange = np.arange(max(n, T) + 1, dtype=np.int64)
        self.positions = np.empty(T, dtype=np.int64)
        self.input_ids = np.empty(T, dtype=np.int32)
        self.slot_mapping = np.empty(T, dtype=np.int64)
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
        block_numbers = self.block_table_flat[req_indices * self.K + positions // self.bs]
        np.add(block_numbers.astype(np.int64) * self.bs, positions % self.bs, out=self.slot_mapping)
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
            "slot_mapping": self.slot_mapping,
            "query_start_loc": qsl[: n + 1],
            "seq_lens": seq_lens,
            "discard_request_mask": discard,
            "logits_indices": logits_indices,
            "max_query_len": int(n_sched.max()),
            "max_seq_len": int(seq_lens.max()),
        }


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return float(np.median(times)) / 1e3


def measure(R: int, T: int, repeat: int) -> tuple[float, float, float, float]:
    """Median microseconds: bare reference, capture off, capture on, per-token loop."""
    engine = build(R, T)
    runner = engine.runner
    timer = StageTimer(engine.device)
    state = dict(runner.v)

    def off() -> None:
        runner.v = dict(state)
        runner.prepare_inputs(None, timer)

    def on() -> None:
        runner.v = dict(state)
        trace = StepTrace(step=1)
        runner.prepare_inputs(trace, timer)
        runner.record_batch(trace)

    off()
    ref = loop_prepare(engine)
    assert ref["slot_mapping"] == runner.v["slot_mapping"].tolist()
    assert ref["input_ids"] == runner.v["input_ids"].tolist()
    bare = BareReference(engine)
    for name, want in bare().items():
        got = runner.v["scalars"][name] if name.startswith("max_") else runner.v[name]
        assert np.array_equal(got, want), f"{name} differs from the bare reference"
    # interleave the measurements so that drift of this machine's speed touches each alike
    t_bare, t_off, t_on, t_loop = [], [], [], []
    for _ in range(5):
        t_bare.append(best_of(bare, max(1, repeat // 5)))
        t_off.append(best_of(off, max(1, repeat // 5)))
        t_on.append(best_of(on, max(1, repeat // 5)))
        t_loop.append(best_of(lambda: loop_prepare(engine), max(1, repeat // 100)))
    return (
        float(np.median(t_bare)),
        float(np.median(t_off)),
        float(np.median(t_on)),
        float(np.median(t_loop)),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=100)
    args = ap.parse_args()
    print(
        f"{'reqs':>5} {'tokens':>6} | {'bare us':>8} {'engine us':>9} {'capture us':>10} | "
        f"{'engine/bare':>11} {'capture/bare':>12} | {'loop us':>9} {'loop/engine':>11}"
    )
    for R, T in SIZES:
        t_bare, t_off, t_on, t_loop = measure(R, T, args.repeat)
        print(
            f"{R:>5} {T:>6} | {t_bare:>8.1f} {t_off:>9.1f} {t_on:>10.1f} | "
            f"{t_off / t_bare:>10.2f}x {t_on / t_bare:>11.2f}x | {t_loop:>9.1f} {t_loop / t_off:>10.1f}x"
        )


if __name__ == "__main__":
    main()
