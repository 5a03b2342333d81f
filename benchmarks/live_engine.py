"""The engine `vllm` (core/vllm_engine) against pagedviz's own engine: the first run's start in a
fresh process (vLLM's import and its process-wide settings), then the median time of a step on a
few presets, each engine without the tiny model (`model: null`), V1 and V2. Needs the `vllm` extra
(`bash scripts/fidelity-deps.sh`). Run:

    .venv/bin/python benchmarks/live_engine.py [--repeat 3] [--presets demo-preemption,demo-v2-slots]
"""

from __future__ import annotations

import argparse
import statistics
import time

from pagedviz.core import Scenario, make_engine
from pagedviz.core.presets import preset_dict


def scenario(preset: str, engine: str) -> Scenario:
    d = preset_dict(preset)
    return Scenario.from_dict({**d, "engine": engine, "config": {**d["config"], "model": None}})


def per_step_ms(s: Scenario, repeat: int) -> tuple[float, int]:
    times, steps = [], 0
    for _ in range(repeat):
        engine = make_engine(s)
        start = time.perf_counter()
        steps = sum(1 for _ in engine.run())
        times.append((time.perf_counter() - start) * 1e3 / max(1, steps))
    return statistics.median(times), steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--presets", default="demo-preemption,seed-000,demo-v2-slots")
    args = ap.parse_args()
    presets = args.presets.split(",")
    start = time.perf_counter()
    make_engine(scenario(presets[0], "vllm"))  # the first: imports vLLM
    print(f"first engine vllm of the process (imports vLLM): {time.perf_counter() - start:.1f} s")
    print(f"{'preset':<18} {'runner':<6} {'steps':>5} {'pagedviz ms/step':>17} {'vllm ms/step':>13}")
    for p in presets:
        own, steps = per_step_ms(scenario(p, "pagedviz"), args.repeat)
        live, _ = per_step_ms(scenario(p, "vllm"), args.repeat)
        runner = scenario(p, "pagedviz").config.model_runner
        print(f"{p:<18} {runner:<6} {steps:>5} {own:>17.2f} {live:>13.2f}")


if __name__ == "__main__":
    main()
