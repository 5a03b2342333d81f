"""Per-step prepare_inputs time, vectorised engine vs a per-token Python loop, capture on vs off.

For each (requests, tokens) a scenario is built whose first step schedules exactly that many
requests and tokens (each request prefills tokens/requests tokens). update_states runs once; then
prepare_inputs is timed repeatedly on the same batch, with trace capture on and off, beside a
straightforward per-token loop in nano-vllm's style that computes the same arrays. Run:

    .venv/bin/python benchmarks/prepare_inputs.py
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from common import SIZES, bench_scenario

from pagedviz.core import Engine, make_engine
from pagedviz.core.device import StageTimer
from pagedviz.core.trace import StepTrace


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


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return float(np.median(times)) / 1e3


def measure(R: int, T: int, repeat: int) -> tuple[float, float, float]:
    """Median microseconds: capture off, capture on, per-token loop."""
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
    return (
        best_of(off, repeat),
        best_of(on, repeat),
        best_of(lambda: loop_prepare(engine), max(3, repeat // 5)),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=100)
    args = ap.parse_args()
    print(
        f"{'reqs':>5} {'tokens':>6} | {'capture off us':>14} {'capture on us':>13} {'on/off':>6} | "
        f"{'loop us':>9} {'loop/off':>8}"
    )
    for R, T in SIZES:
        t_off, t_on, t_loop = measure(R, T, args.repeat)
        print(
            f"{R:>5} {T:>6} | {t_off:>14.1f} {t_on:>13.1f} {t_on / t_off:>6.2f} | "
            f"{t_loop:>9.1f} {t_loop / t_off:>7.1f}x"
        )


if __name__ == "__main__":
    main()
