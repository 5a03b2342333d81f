"""Load on a real server: N concurrent clients step through every step of every preset and fetch
arrays, on loopback, bounded in clients, rounds and seconds; meanwhile another client creates new
runs (each a 256-request scenario) with POST /api/runs?wait=first and times their first step.
Prints p50/p99 latency per request kind, throughput, the error count, the CPU time the server (with
its compute processes) and the clients used, and peak memory (VmHWM). Targets: cached steps p99
under 50 ms, a new run's first step under 1 s.

`--compute-in process,thread` runs the same load twice, side by side: runs computing in the
server's compute processes (the default) and in threads of the server's own process (where they
hold its interpreter lock against the readers), and prints the ratios. `--heavy` makes the new
runs compute the tiny model for about 12 s each, so that they overlap and share the processes.

The clients share the machine with the server, so what they cost shows in the latencies. By
default they are lean: one process of their own, N keep-alive connections on one asyncio loop,
each request a prepared HTTP/1.1 GET (Accept-Encoding: gzip, as a browser sends) whose answer is
read by its Content-Length. `--client httpx` runs them as before, N threads of httpx.Client in
this process, for comparison: the difference is the clients' own share of the latencies. Run:

    .venv/bin/python benchmarks/api_load.py --clients 32 --seconds 20 --compute-in process,thread
    .venv/bin/python benchmarks/api_load.py --clients 32 --seconds 40 --heavy --compute-in process,thread
    .venv/bin/python benchmarks/api_load.py --clients 32 --seconds 20 --client httpx
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
from common import process_tree, status_mb

from pagedviz.app.serve import running_server

Urls = list[tuple[str, str]]  # (kind, path)
WHERE = {"process": "compute processes", "thread": "the server's threads"}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (/proc/PID/stat), NaN where unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def new_run(seed: int, heavy: bool = False) -> dict:
    """256 requests of 64 prompt tokens and 32 outputs, simulated (model null): about 60 steps,
    0.2 s alone on a small machine. `heavy`: 48 rows at a time through the tiny model instead,
    about 190 steps and 12 s alone, so that runs overlap and share the compute processes."""
    config: dict = {
        "block_size": 16,
        "max_model_len": 96,
        "max_num_reqs": 128,
        "max_num_batched_tokens": 4096,
        "num_kv_blocks": 1024,
        "model": None,
    }
    if heavy:
        del config["model"]
        config.update(max_num_reqs=48, max_num_batched_tokens=1024)
    return {
        "name": f"load-{seed}",
        "seed": seed,
        "config": config,
        "requests": [{"id": str(i), "prompt_len": 64, "max_tokens": 32} for i in range(256)],
    }


def client_urls(runs: list[tuple[str, int]]) -> Urls:
    """One pass of a client: each run's overview, then each step and its slot_mapping as NPY."""
    urls: Urls = []
    for run_id, num_steps in runs:
        urls.append(("overview", f"/api/runs/{run_id}"))
        for n in range(1, num_steps + 1):
            urls.append(("step", f"/api/runs/{run_id}/steps/{n}"))
            urls.append(("array", f"/api/runs/{run_id}/steps/{n}/arrays/slot_mapping?format=npy"))
    return urls


async def lean_client(host: str, port: int, urls: Urls, rounds: int, deadline: float, out: list) -> None:
    """One keep-alive connection: each answer read whole (status line, headers, body)."""
    reader, writer = await asyncio.open_connection(host, port)
    requests = [
        (kind, f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept-Encoding: gzip\r\n\r\n".encode())
        for kind, path in urls
    ]
    try:
        for _round in range(rounds):
            for kind, request in requests:
                if time.monotonic() > deadline:
                    return
                t0 = time.perf_counter()
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                if length:
                    await reader.readexactly(length)
                out.append((kind, (time.perf_counter() - t0) * 1e3, head[9:12] == b"200"))
    finally:
        writer.close()


def lean_clients(url: str, clients: int, urls: Urls, rounds: int, seconds: float, conn: object) -> None:
    """The lean clients, in a process of their own; their (kind, ms, ok) records go to `conn`."""
    parts = urlsplit(url)
    out: list[tuple[str, float, bool]] = []

    async def main() -> None:
        deadline = time.monotonic() + seconds
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        await asyncio.gather(*(lean_client(host, port, urls, rounds, deadline, out) for _ in range(clients)))

    asyncio.run(main())
    conn.send((out, time.process_time()))  # type: ignore[attr-defined]


def httpx_clients(base: str, clients: int, urls: Urls, rounds: int, deadline: float) -> list:
    """The clients as threads of this process, each with its own httpx.Client."""
    out: list[tuple[str, float, bool]] = []
    lock = threading.Lock()

    def client(_: int) -> None:
        with httpx.Client(base_url=base, timeout=30) as c:
            for _round in range(rounds):
                for kind, path in urls:
                    if time.monotonic() > deadline:
                        return
                    t0 = time.perf_counter()
                    try:
                        ok = c.get(path).status_code == 200
                    except httpx.HTTPError:
                        ok = False
                    with lock:
                        out.append((kind, (time.perf_counter() - t0) * 1e3, ok))

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    return out


def load(args: argparse.Namespace, compute_in: str) -> dict[str, Any]:
    """One server (runs computing in `compute_in`), the clients and the creator of new runs."""
    clients = max(1, min(args.clients, 256))
    env = {"PAGEDVIZ_COMPUTE_IN": compute_in}
    if args.max_computing:
        env["PAGEDVIZ_MAX_COMPUTING"] = str(args.max_computing)
    with running_server(env=env) as server:
        base = server.url
        presets = httpx.get(f"{base}/api/presets").json()
        runs = []
        for p in presets:
            scenario = httpx.get(f"{base}/api/presets/{p['id']}").json()["scenario"]
            created = httpx.post(f"{base}/api/runs", json=scenario, timeout=120).json()
            runs.append((created["run_id"], created["num_steps"]))
        urls = client_urls(runs)
        new_runs: list[float] = []
        new_errors = 0
        deadline = time.monotonic() + args.seconds

        def creator() -> None:
            """New runs, one after another, while the clients read: each answers at its first step."""
            nonlocal new_errors
            with httpx.Client(base_url=base, timeout=120) as c:
                for seed in range(args.new_runs):
                    if time.monotonic() > deadline:
                        return
                    t0 = time.perf_counter()
                    r = c.post("/api/runs?wait=first", json=new_run(seed, args.heavy))
                    new_runs.append((time.perf_counter() - t0) * 1e3)
                    new_errors += r.status_code not in (201, 202)
                    time.sleep(0.5)

        t0 = time.perf_counter()
        tree0 = process_tree(server.pid)
        server_cpu0 = sum(cpu_seconds(p) for p in tree0)
        own_cpu0 = time.process_time()
        making = threading.Thread(target=creator)
        making.start()
        if args.client == "httpx":
            records = httpx_clients(base, clients, urls, args.rounds, deadline)
            client_cpu = time.process_time() - own_cpu0
        else:
            receive, send = mp.get_context("spawn").Pipe(duplex=False)
            proc = mp.get_context("spawn").Process(
                target=lean_clients, args=(base, clients, urls, args.rounds, args.seconds, send)
            )
            proc.start()
            records, client_cpu = receive.recv()
            proc.join()
        making.join()
        wall = time.perf_counter() - t0
        tree = process_tree(server.pid)
        # CPU of the server and its compute processes (one that ended meanwhile is not counted)
        server_cpu = sum(cpu_seconds(p) for p in tree) - server_cpu0
        lat: dict[str, list[float]] = {"step": [], "array": [], "overview": [], "new run": new_runs}
        errors = new_errors
        for kind, ms, ok in records:
            lat[kind].append(ms)
            errors += not ok
        return {
            "lat": lat,
            "errors": errors,
            "wall": wall,
            "server_cpu": server_cpu,
            "client_cpu": client_cpu,
            "server_mb": status_mb(server.pid, "VmHWM"),
            "workers_mb": [status_mb(p, "VmHWM") for p in tree if p != server.pid],
        }


def report(args: argparse.Namespace, compute_in: str, r: dict[str, Any]) -> None:
    lat, wall = r["lat"], r["wall"]
    total = sum(len(v) for v in lat.values())
    print(
        f"runs computing in {WHERE[compute_in]}: {args.clients} clients ({args.client}), {total} requests"
        f" in {wall:.1f} s: {total / wall:.0f} req/s, errors {r['errors']}"
    )
    for kind, v in lat.items():
        if v:
            print(
                f"  {kind:>8}: n={len(v):>6}  p50 {np.percentile(v, 50):7.1f} ms"
                f"  p99 {np.percentile(v, 99):7.1f} ms"
            )
    cores = os.cpu_count() or 1
    print(
        f"  CPU seconds over the {wall:.1f} s ({cores} cores = {cores * wall:.0f} s):"
        f" server and its compute processes {r['server_cpu']:.1f}, clients {r['client_cpu']:.1f}"
    )
    workers = " + ".join(f"{m:.0f}" for m in r["workers_mb"]) or "none"
    print(f"  peak memory (VmHWM): server {r['server_mb']:.0f} MB, its child processes {workers} MB")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rounds", type=int, default=5, help="passes over every preset per client, at most")
    ap.add_argument("--new-runs", type=int, default=8, help="new runs created during the load")
    ap.add_argument("--heavy", action="store_true", help="new runs through the tiny model (12 s each)")
    ap.add_argument("--client", choices=("lean", "httpx"), default="lean", help="how the clients run")
    ap.add_argument("--max-computing", type=int, help="runs computing at once (default: the server's)")
    ap.add_argument(
        "--compute-in",
        default="process",
        help="where the server computes runs: process, thread, or both (process,thread) side by side",
    )
    args = ap.parse_args()
    modes = [m.strip() for m in args.compute_in.split(",")]
    if not modes or any(m not in WHERE for m in modes):
        ap.error(f"--compute-in: process, thread or process,thread (got {args.compute_in!r})")
    results = {mode: load(args, mode) for mode in modes}
    for mode, r in results.items():
        report(args, mode, r)
    if len(results) == 2:
        (a, ra), (b, rb) = results.items()
        for kind in ("step", "new run"):
            if not (ra["lat"][kind] and rb["lat"][kind]):
                continue  # nothing of that kind was timed (--new-runs 0)
            pa, pb = (np.percentile(r["lat"][kind], 99) for r in (ra, rb))
            print(f"{kind} p99, {WHERE[a]} / {WHERE[b]}: {pa:.1f} / {pb:.1f} ms = {pa / pb:.2f}x")


if __name__ == "__main__":
    main()
