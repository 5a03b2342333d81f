"""Big runs on a real server: time to the first step, total time and the server's memory, for
scenarios of 128, 512 and 1024 requests.

Each size runs in a fresh `pagedviz serve` (so its peak memory is the run's own): POST
/api/runs?wait=first answers once step 1 is computed (202 while later steps compute), GET
/api/runs/{id}/steps/1 then reads it, and GET /api/runs/{id} waits for the whole run. Printed:
time to the first step (POST answered, step 1 read), the total time, the steps, and the server's
resident memory before the run, at its peak (VmHWM) and the peak's growth per step (the server
keeps the trace), and how far the compute processes (which run the engine) grew at their peak.

Two ratios, side by side for each size, against the targets of issue 32:
- `step 1 / run`: when step 1 was read, as a fraction of the run's whole time (POST to the run
  complete): the first step of a 1024-request run at most 0.15 of it, steadily (each of
  `--repeat` fresh servers; the worst is printed too);
- `held / arrays`: what the stored run holds in the server (VmRSS once the run is complete,
  less VmRSS before it) over the binary size of the run's arrays (every numpy buffer of its
  steps as they read: the traced arrays and their padded buffers, the KV cache's snapshots, a
  table recorded by change counted as the table it stands for; computed here by running the same
  scenario): at most 2x at 1024 requests. `measured / arrays` is the store's own count of the
  run's bytes (app.run.measured_bytes) over the same.

Each size runs twice, side by side: `before`, the capture as it was before capture by change
(every step copied the runners' whole persistent tables: benchmarks/common.py, installed
in the server's processes through a sitecustomize), and `after`, the capture by change.

Targets: the first step in under 1 s at 1024 requests. Requests have 64-token prompts and
`--max-tokens` outputs; `--model` runs the tiny model too (default: fast simulation,
`model: null`). Run:

    .venv/bin/python benchmarks/big_runs.py [--sizes 128,512,1024] [--max-tokens 32] [--model] [--repeat 3]
        [--capture before,after]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import httpx
import numpy as np
from common import (
    ModelRunner,
    ModelRunnerV2,
    full_copy_v1,
    full_copy_v2,
    sitecustomize_dir,
    tree_growth_mb,
    tree_rss_mb,
)

from pagedviz.app.run import measured_bytes
from pagedviz.app.serve import running_server
from pagedviz.core import Limits, Scenario, make_engine
from pagedviz.core.table_versions import TableVersion


def memory_mb(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def scenario(requests: int, max_tokens: int, model: bool) -> dict[str, Any]:
    config: dict[str, Any] = {
        "block_size": 16,
        "max_model_len": 64 + max_tokens,
        "max_num_reqs": 256,
        "max_num_batched_tokens": 8192,
        "num_kv_blocks": 256 * ((64 + max_tokens) // 16 + 1) + 1,
        "device": "cpu",
    }
    if not model:
        config["model"] = None
    return {
        "name": f"big-{requests}",
        "seed": 0,
        "config": config,
        "requests": [{"id": str(i), "prompt_len": 64, "max_tokens": max_tokens} for i in range(requests)],
        "max_steps": 4096,
    }


def array_bytes(root: Any) -> int:
    """The binary size of every numpy buffer an object graph holds (each buffer once), a table
    recorded by change (TableVersion) counted as the array it reads as."""
    seen: set[int] = set()
    buffers: set[int] = set()
    stack, total = [root], 0
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, TableVersion):
            total += o.n_rows * o.full_shape[1] * o.dtype.itemsize
            continue
        if isinstance(o, np.ndarray):
            owner = o if o.base is None else o.base
            if isinstance(owner, np.ndarray) and id(owner) not in buffers:
                buffers.add(id(owner))
                total += owner.nbytes
            continue
        if isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        elif hasattr(o, "__dict__"):
            stack.append(vars(o))
        elif hasattr(o, "__slots__"):
            stack.extend(getattr(o, a) for a in type(o).__slots__ if hasattr(o, a))
    return total


def local_sizes(requests: int, max_tokens: int, model: bool, before: bool) -> tuple[int, int]:
    """(the arrays' binary size, the store's measured bytes) of the run, computed in this process
    as a compute process does (entries built, compacted); `before`: with whole copies."""
    d = scenario(requests, max_tokens, model)
    steps = []
    after = ModelRunner.capture_state, ModelRunnerV2.capture_state
    if before:
        ModelRunner.capture_state, ModelRunnerV2.capture_state = full_copy_v1, full_copy_v2  # type: ignore[method-assign]
    try:
        for t in make_engine(Scenario.from_dict(d, Limits(max_requests=4096))).run():
            t.array_entries  # noqa: B018 - as measured_steps does
            t.compact()
            steps.append(t)
    finally:
        ModelRunner.capture_state, ModelRunnerV2.capture_state = after  # type: ignore[method-assign]
    return array_bytes(steps), sum(measured_bytes(t) for t in steps)


def wait_for_every_compute_process(url: str, seconds: float = 120) -> None:
    """A server answers once one compute process is ready; the figures are those of a server
    whose compute processes have all started (one still importing the engine would take a core
    from the run measured)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        said = httpx.get(f"{url}/healthz").json().get("compute", "")
        ready, _, alive = said.partition(" ready")[0].partition(" of ")
        if ready and ready == alive:
            return
        time.sleep(0.1)
    raise RuntimeError(f"the compute processes did not all start within {seconds} s")


def measure(requests: int, max_tokens: int, model: bool, env: dict[str, str]) -> dict[str, float]:
    limits = ["--max-requests", "4096", "--max-run-seconds", "600", "--max-run-mb", "4096"]
    with running_server(*limits, "--max-store-mb", "8192", env=env, timeout=120) as server:
        base = server.url
        wait_for_every_compute_process(base)
        before = memory_mb(server.pid, "VmRSS")
        tree_before = tree_rss_mb(server.pid)
        with httpx.Client(base_url=base, timeout=600) as c:
            t0 = time.perf_counter()
            created = c.post("/api/runs?wait=first", json=scenario(requests, max_tokens, model))
            t_created = time.perf_counter() - t0
            assert created.status_code in (201, 202), created.text
            run_id = created.json()["run_id"]
            first = c.get(f"/api/runs/{run_id}/steps/1")
            t_first = time.perf_counter() - t0
            assert first.status_code == 200 and first.json()["step"] == 1
            overview = c.get(f"/api/runs/{run_id}").json()
            t_total = time.perf_counter() - t0
            time.sleep(0.5)  # the run's first steps are encoded meanwhile (a small run's)
            held = memory_mb(server.pid, "VmRSS") - before
        peak = memory_mb(server.pid, "VmHWM")
        compute_growth = tree_growth_mb(server.pid, tree_before) - max(0.0, peak - before)
    steps = overview["num_steps"]
    return {
        "created": t_created,
        "first": t_first,
        "total": t_total,
        "steps": steps,
        "before": before,
        "peak": peak,
        "per_step_kb": (peak - before) * 1024 / max(1, steps),
        "compute": compute_growth,
        "held": held,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="128,512,1024")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--model", action="store_true", help="run the tiny model (default: model null)")
    ap.add_argument("--repeat", type=int, default=1, help="fresh servers per size (the ratios' spread)")
    ap.add_argument("--capture", default="before,after", help="before, after or both (the default)")
    args = ap.parse_args()
    paths = [sitecustomize_dir(), os.environ.get("PYTHONPATH", "")]
    before_env = {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    print(
        f"{'reqs':>5} {'capture':>7} | {'POST (202) s':>12} {'step 1 s':>8} {'total s':>8} {'steps':>5} | "
        f"{'RSS before MB':>13} {'peak MB':>8} {'peak/step KB':>12} | {'compute processes +MB':>21} | "
        f"{'arrays MB':>9} {'held MB':>7} {'held / arrays':>13} {'measured / arrays':>17} | "
        f"{'step 1 / run':>12}"
    )
    for size in (int(s) for s in args.sizes.split(",")):
        for capture, env in (("before", before_env), ("after", {})):
            if capture in args.capture.split(","):
                run_size(size, capture, env, args)


def run_size(size: int, capture: str, env: dict[str, str], args: argparse.Namespace) -> None:
    # the arrays as they read are the same before and after: both ratios are over the same
    arrays, _ = local_sizes(size, args.max_tokens, args.model, before=False)
    _, measured = local_sizes(size, args.max_tokens, args.model, before=capture == "before")
    firsts, helds = [], []
    for _ in range(args.repeat):
        m = measure(size, args.max_tokens, args.model, env)
        firsts.append(m["first"] / m["total"])
        helds.append(m["held"] * (1 << 20) / arrays)
        print(
            f"{size:>5} {capture:>7} | {m['created']:>12.2f} {m['first']:>8.2f} {m['total']:>8.2f} "
            f"{m['steps']:>5} | "
            f"{m['before']:>13.0f} {m['peak']:>8.0f} {m['per_step_kb']:>12.1f} | {m['compute']:>21.0f} | "
            f"{arrays / (1 << 20):>9.1f} {m['held']:>7.1f} {helds[-1]:>12.2f}x "
            f"{measured / arrays:>16.2f}x | "
            f"{firsts[-1]:>12.3f}"
        )
    if args.repeat > 1:
        print(
            f"{size:>5} {capture:>7} | worst of {args.repeat}: held / arrays {max(helds):.2f}x,"
            f" step 1 / run {max(firsts):.3f}"
        )


if __name__ == "__main__":
    main()
