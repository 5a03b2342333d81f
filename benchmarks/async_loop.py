"""What the engine core's batch queue costs: the same scenario run in process with synchronous
scheduling and with async scheduling (AsyncScheduler + step_with_batch_queue), on each runner.

Printed per runner and mode: the steps, how many of them ran a forward, the total time and the
time per step, and async's total over sync's. Requests have 64-token prompts and `--max-tokens`
outputs, all arriving at step 1; `model: null` (fast simulation) unless `--model`. Run:

    .venv/bin/python benchmarks/async_loop.py [--requests 256] [--max-tokens 32] [--model]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from pagedviz.core import Scenario, make_engine


def scenario(requests: int, max_tokens: int, runner: str, async_scheduling: bool, model: bool) -> Scenario:
    config: dict[str, Any] = {
        "model_runner": runner,
        "async_scheduling": async_scheduling,
        "block_size": 16,
        "max_model_len": 64 + max_tokens,
        "max_num_reqs": 256,
        "max_num_batched_tokens": 2048,
        "num_kv_blocks": requests * ((64 + max_tokens) // 16 + 1) + 1,
        "device": "cpu",
    }
    if not model:
        config["model"] = None
    reqs = [{"id": f"r{i}", "prompt_len": 64, "max_tokens": max_tokens} for i in range(requests)]
    d = {"name": "bench", "flavor": "vllm", "seed": 1, "config": config, "requests": reqs, "max_steps": 4096}
    return Scenario.from_dict(d)


def measure(s: Scenario) -> tuple[int, int, float]:
    engine = make_engine(s)
    start = time.perf_counter()
    steps = forwards = 0
    for t in engine.run():
        steps += 1
        forwards += not t.idle
    return steps, forwards, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--model", action="store_true")
    args = ap.parse_args()
    for runner in ("v1", "v2"):
        totals = {}
        for mode in (False, True):
            s = scenario(args.requests, args.max_tokens, runner, mode, args.model)
            steps, forwards, took = measure(s)
            totals[mode] = took
            name = "async" if mode else "sync"
            print(
                f"{runner} {name:5}: {steps} steps ({forwards} with a forward), {took:.2f} s, "
                f"{1000 * took / steps:.2f} ms/step"
            )
        print(f"{runner} async / sync total: {totals[True] / totals[False]:.2f}")


if __name__ == "__main__":
    main()
