"""prepare_inputs on CPU vs CUDA, host-to-device copy, forward time and the paged-vs-dense check.

For each (requests, tokens) of the engine benchmark, one engine step runs on every device this
machine has (CPU always; CUDA when torch sees a GPU, else it prints "no GPU"), with the tiny model
on; each figure is the median over `--repeat` fresh engines, and with a GPU a ratio line compares
the devices. Target on an H100: prepare_inputs + host-to-device copy under 200 us at 8192 tokens. Figures come
from the step's own `timing_us` (perf_counter on the CPU, CUDA events on the GPU). Run:

    .venv/bin/python benchmarks/device.py [--sizes 8x256,64x2048] [--repeat 3] [--runner v1|v2]
"""

from __future__ import annotations

import argparse
import statistics

import torch
from common import SIZES, bench_scenario

from pagedviz.core import make_engine

# where each runner builds the per-token inputs on the device: V1 computes slot_mapping there from
# the device block table; Model Runner V2 builds positions, input_ids and slot_mapping there from
# the per-slot state
DEVICE_STAGE = {"v1": "device_slot_mapping", "v2": "device_inputs"}


def one_step(requests: int, tokens: int, device: str, runner: str) -> dict[str, float]:
    engine = make_engine(bench_scenario(requests, tokens, device, runner=runner))
    t = engine.step()
    timing = t.timing_us
    return {
        "prepare_us": timing["prepare_inputs"],
        "update_states_us": timing["update_states"],
        "copy_us": timing["copy_to_device"],
        "device_slot_mapping_us": timing[DEVICE_STAGE[runner]],
        "forward_us": timing["forward"],
        "diff": t.forward["paged_vs_dense_max_abs_diff"],
        "agree": t.forward["slot_mapping_device_matches_cpu"],
    }


def median_step(requests: int, tokens: int, device: str, runner: str, repeat: int) -> dict[str, float]:
    """Each figure's median over `repeat` fresh engines; the worst paged-vs-dense difference."""
    runs = [one_step(requests, tokens, device, runner) for _ in range(repeat)]
    out = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k not in ("diff", "agree")}
    out["diff"] = max(r["diff"] for r in runs)
    out["agree"] = all(r["agree"] for r in runs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=",".join(f"{r}x{t}" for r, t in SIZES))
    ap.add_argument("--repeat", type=int, default=3, help="fresh engines per size and device (medians)")
    ap.add_argument("--runner", choices=("v1", "v2"), default="v1", help="the vllm flavour's model runner")
    args = ap.parse_args()
    print(f"runner {args.runner}: the device column is {DEVICE_STAGE[args.runner]}")
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")]
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if len(devices) == 1:
        print("no GPU: torch sees no CUDA device here, so CPU figures only")
    for dev in devices:
        one_step(8, 256, dev, args.runner)  # warm up lazy initialisation
    print(
        f"{'device':>6} {'reqs':>5} {'tokens':>6} | {'prepare us':>10} {'update us':>9} {'H2D copy us':>11} "
        f"{'prep+H2D us':>11} {'dev slots us':>12} {'forward us':>11} | {'paged-dense':>11} agree"
    )
    for R, T in sizes:
        rows = {dev: median_step(R, T, dev, args.runner, max(1, args.repeat)) for dev in devices}
        for dev, r in rows.items():
            print(
                f"{dev:>6} {R:>5} {T:>6} | {r['prepare_us']:>10.1f} {r['update_states_us']:>9.1f} "
                f"{r['copy_us']:>11.1f} {r['prepare_us'] + r['copy_us']:>11.1f} "
                f"{r['device_slot_mapping_us']:>12.1f} {r['forward_us']:>11.1f} | "
                f"{r['diff']:>11.2e} {r['agree']}"
            )
        if "cuda" in rows:
            c, g = rows["cpu"], rows["cuda"]
            print(
                f"{'ratio':>6} {R:>5} {T:>6} | cpu/cuda: "
                f"prepare_inputs {c['prepare_us'] / g['prepare_us']:.2f}x, "
                f"device slot_mapping {c['device_slot_mapping_us'] / g['device_slot_mapping_us']:.2f}x, "
                f"forward {c['forward_us'] / g['forward_us']:.1f}x"
            )


if __name__ == "__main__":
    main()
