"""What the scheduler's `waiting_causes` cost, next to prepare_inputs' capture time (issue 37: at
most 5%). For each batch of benchmarks/prepare_inputs.py, a step whose budget admits only half the
requests, so the other half wait (the worst case: one cause object per waiting request, and the
head's tokens_needed computed afresh, prefix-cache hashes included). Times, median microseconds:

- causes: `Scheduler._waiting_causes` for the step, with the head's tokens computed (stop=None,
  as when the budget ran out before the loop reached the head);
- at the head: the same when the loop stopped at the head and recorded why (the usual case);
- capture: the V1 runner's prepare_inputs with trace capture on, for the same step;

and their ratio. Run:

    .venv/bin/python benchmarks/causes.py
"""

from __future__ import annotations

import argparse

from common import bench_dict
from prepare_inputs import best_of

from pagedviz.core import Limits, Scenario, make_engine
from pagedviz.core.device import StageTimer
from pagedviz.core.trace import StepTrace

CASES = [(8, 256), (64, 1024), (256, 4096), (256, 8192), (1024, 16384)]


def measure(R: int, T: int, repeat: int) -> tuple[int, float, float, float]:
    d = bench_dict(R, T, model=False, runner="v1")
    d["config"]["max_num_batched_tokens"] = T // 2  # half the prompts fit: the rest wait
    d["config"]["enable_prefix_caching"] = True
    engine = make_engine(Scenario.from_dict(d, Limits(max_requests=R + 1, max_step_mflop=1 << 30)))
    sched, runner = engine.scheduler, engine.runner
    out = sched.schedule(1)
    runner.update_states(out)
    waiting = len(out.waiting_req_ids)
    prefill_scheduled = any(sched.requests[s.req_id].is_prefill_chunk for s in out.scheduled)
    cap = sched._long_prefill_cap()

    def causes() -> None:
        sched._waiting_causes(out, None, 0, prefill_scheduled, True, cap)

    stop: dict[str, object] = {"cause": "token_budget", "tokens_needed": 16, "tokens_left": 8}

    def at_head() -> None:
        sched._waiting_causes(out, stop, 8, prefill_scheduled, True, cap)

    timer = StageTimer(engine.device)
    state = dict(runner.v)

    def capture() -> None:
        runner.v = dict(state)
        trace = StepTrace(step=1)
        runner.prepare_inputs(trace, timer)
        runner.record_batch(trace)

    return waiting, best_of(causes, repeat), best_of(at_head, repeat), best_of(capture, repeat)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    print("waiting_causes against V1 prepare_inputs with capture (half the requests wait)")
    print(
        f"{'batch':>12} | {'waiting':>7} | {'causes us':>9} {'at head us':>10} {'capture us':>10} | "
        "causes/capture at-head/capture"
    )
    for R, T in CASES:
        waiting, c, h, cap = measure(R, T, args.repeat)
        print(
            f"{f'{R}x{T}':>12} | {waiting:>7} | {c:9.1f} {h:10.1f} {cap:10.1f} | "
            f"{c / cap:14.1%} {h / cap:14.1%}"
        )


if __name__ == "__main__":
    main()
