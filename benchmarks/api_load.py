"""Load on a real server: N concurrent clients step through every step of every preset and fetch
arrays, on loopback, bounded in clients, rounds and seconds; meanwhile another client creates new
runs (each a 256-request scenario computing for a while) with POST /api/runs?wait=first and
times their first step. Prints p50/p99 latency per request kind, throughput, the error count,
the CPU time the server and the clients used, and the server's peak memory (VmHWM). Targets:
cached steps p99 under 50 ms, a new run's first step under 1 s.

The clients share the machine with the server, so what they cost shows in the latencies. By
default they are lean: one process of their own, N keep-alive connections on one asyncio loop,
each request a prepared HTTP/1.1 GET (Accept-Encoding: gzip, as a browser sends) whose answer is
read by its Content-Length. `--client httpx` runs them as before, N threads of httpx.Client in
this process, for comparison: the difference is the clients' own share of the latencies. Run:

    .venv/bin/python benchmarks/api_load.py --clients 32 --seconds 20
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
from urllib.parse import urlsplit

import httpx
import numpy as np

from pagedviz.app.serve import running_server

Urls = list[tuple[str, str]]  # (kind, path)


def peak_rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (/proc/PID/stat), NaN where unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rounds", type=int, default=5, help="passes over every preset per client, at most")
    ap.add_argument("--new-runs", type=int, default=8, help="new runs created during the load")
    ap.add_argument("--client", choices=("lean", "httpx"), default="lean", help="how the clients run")
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
                    r = c.post("/api/runs?wait=first", json=new_run(seed))
                    new_runs.append((time.perf_counter() - t0) * 1e3)
                    new_errors += r.status_code not in (201, 202)
                    time.sleep(0.5)

        t0 = time.perf_counter()
        server_cpu0, own_cpu0 = cpu_seconds(server.pid), time.process_time()
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
        server_cpu = cpu_seconds(server.pid) - server_cpu0
        lat: dict[str, list[float]] = {"step": [], "array": [], "overview": [], "new run": new_runs}
        errors = new_errors
        for kind, ms, ok in records:
            lat[kind].append(ms)
            errors += not ok
        total = sum(len(v) for v in lat.values())
        print(
            f"clients {clients} ({args.client}), {total} requests in {wall:.1f} s: "
            f"{total / wall:.0f} req/s, errors {errors}"
        )
        for kind, v in lat.items():
            if v:
                print(
                    f"  {kind:>8}: n={len(v):>6}  p50 {np.percentile(v, 50):7.1f} ms"
                    f"  p99 {np.percentile(v, 99):7.1f} ms"
                )
        print(
            f"  CPU seconds over the {wall:.1f} s (2 cores = {2 * wall:.0f} s): server {server_cpu:.1f}, "
            f"clients {client_cpu:.1f}; per request: server {server_cpu / total * 1e3:.2f} ms, "
            f"clients {client_cpu / total * 1e3:.2f} ms"
        )
        print(f"  server peak memory (VmHWM): {peak_rss_mb(server.pid):.0f} MB")


if __name__ == "__main__":
    main()
