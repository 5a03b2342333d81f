"""Load on a real server: N concurrent clients step through every step of every preset and fetch
arrays, on loopback, bounded in clients, rounds and seconds; meanwhile another client creates new
runs (each a 256-request scenario computing for a while) with POST /api/runs?wait=first and
times their first step. Prints p50/p99 latency per request kind, throughput, the error count and
the server's peak memory (VmHWM). Targets: cached steps p99 under 50 ms, a new run's first step
under 1 s. Run:

    .venv/bin/python benchmarks/api_load.py --clients 32 --seconds 30
"""

from __future__ import annotations

import argparse
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np

from pagedviz.app.serve import running_server


def peak_rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def new_run(seed: int) -> dict:
    """256 requests of 64 prompt tokens and 32 outputs, simulated (model null): about 60 steps."""
    return {
        "name": f"load-{seed}",
        "seed": seed,
        "config": {
            "block_size": 16,
            "max_model_len": 96,
            "max_num_reqs": 128,
            "max_num_batched_tokens": 4096,
            "num_kv_blocks": 1024,
            "model": None,
        },
        "requests": [{"id": str(i), "prompt_len": 64, "max_tokens": 32} for i in range(256)],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rounds", type=int, default=5, help="passes over every preset per client, at most")
    ap.add_argument("--new-runs", type=int, default=8, help="new runs created during the load")
    args = ap.parse_args()
    clients = max(1, min(args.clients, 256))
    with running_server() as server:
        base = server.url
        presets = httpx.get(f"{base}/api/presets").json()
        runs = []
        for p in presets:
            scenario = httpx.get(f"{base}/api/presets/{p['id']}").json()["scenario"]
            created = httpx.post(f"{base}/api/runs", json=scenario, timeout=120).json()
            runs.append((created["run_id"], created["num_steps"]))
        lat: dict[str, list[float]] = {"step": [], "array": [], "overview": [], "new run": []}
        errors = 0
        lock = threading.Lock()
        deadline = time.monotonic() + args.seconds

        def client(_: int) -> None:
            nonlocal errors
            with httpx.Client(base_url=base, timeout=30) as c:
                for _round in range(args.rounds):
                    for run_id, num_steps in runs:
                        for kind, url in [("overview", f"/api/runs/{run_id}")] + [
                            x
                            for n in range(1, num_steps + 1)
                            for x in (
                                ("step", f"/api/runs/{run_id}/steps/{n}"),
                                ("array", f"/api/runs/{run_id}/steps/{n}/arrays/slot_mapping?format=npy"),
                            )
                        ]:
                            if time.monotonic() > deadline:
                                return
                            t0 = time.perf_counter()
                            try:
                                ok = c.get(url).status_code == 200
                            except httpx.HTTPError:
                                ok = False
                            dt = (time.perf_counter() - t0) * 1e3
                            with lock:
                                lat[kind].append(dt)
                                errors += not ok

        def creator() -> None:
            """New runs, one after another, while the clients read: each answers at its first step."""
            nonlocal errors
            with httpx.Client(base_url=base, timeout=120) as c:
                for seed in range(args.new_runs):
                    if time.monotonic() > deadline:
                        return
                    t0 = time.perf_counter()
                    r = c.post("/api/runs?wait=first", json=new_run(seed))
                    dt = (time.perf_counter() - t0) * 1e3
                    with lock:
                        lat["new run"].append(dt)
                        errors += r.status_code not in (201, 202)
                    time.sleep(0.5)

        t0 = time.perf_counter()
        with ThreadPoolExecutor(clients + 1) as pool:
            done = pool.submit(creator)
            list(pool.map(client, range(clients)))
            done.result()
        wall = time.perf_counter() - t0
        total = sum(len(v) for v in lat.values())
        print(
            f"clients {clients}, {total} requests in {wall:.1f} s: {total / wall:.0f} req/s, errors {errors}"
        )
        for kind, v in lat.items():
            if v:
                print(
                    f"  {kind:>8}: n={len(v):>6}  p50 {np.percentile(v, 50):7.1f} ms"
                    f"  p99 {np.percentile(v, 99):7.1f} ms"
                )
        print(f"  server peak memory (VmHWM): {peak_rss_mb(server.pid):.0f} MB")


if __name__ == "__main__":
    main()
