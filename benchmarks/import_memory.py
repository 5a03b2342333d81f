"""Memory of `pagedviz import` on long recordings (issue 30): the peak resident memory of the
command replaying a synthetic recording of 10^3, 10^4 and 10^5 steps (`--json` to /dev/null).

The synthetic recording is pagedviz's own scheduler written in the recorder's format
(core/recording.py): a stream of requests (64-token prompts, `--max-tokens` outputs, one arriving
every `--every` steps, at most 8 running), so the import's comparison agrees to the last step and
does its whole work. The import reads the file twice (arrivals, then the replay) and prints each
step as it is replayed; its peak should not grow with the number of steps beyond the requests'
own state. Printed: steps, file size, the command's wall time and peak RSS (ru_maxrss of the
child).

`--rest`: the same recordings imported through `POST /api/runs/import` of a real server
(`pagedviz serve` in a subprocess, a fresh one per recording, its store in a temporary folder):
the body streamed from the file, the progress polled until the replay is done, then the overview,
the first, middle and last steps read back. Printed: the server process's peak RSS (VmHWM) after
all that, the time to the 202 answer and to the end of the replay, and the store's size.

Seek (issue 40), `--seek`: for each recording (synthetic, or `--recording FILE`, e.g. vLLM's own
scheduler written by benchmarks/vllm_recording.py), through a fresh real server with `--store`: the
answer's time, then the first, a middle and the last step each read once right after the answer
(seconds since the answer when each is readable), a second visit of the three and a step near the
middle not read before (from a checkpoint), the replay's end with those reads (the replay pauses
while a reader computes a step), the store's size and the peak RSS of the server and of its compute
processes; then the replay's own pace: the same import into a fresh server and store with nothing
read, seconds from the answer to the replay's end and steps/s. With `--before PYTHON` (another
checkout's interpreter, e.g. main's `.venv/bin/python`, whose `pagedviz` is that checkout) the same
is measured against that server first, side by side in one run. `--replay`: the import's replay
alone, in one process with a temporary store (steps/s). Without
`--rest`, the CLI: `pagedviz import FILE --step N` for the same three steps, and the whole import
(`--json`, steps/s). Run:

    .venv/bin/python benchmarks/import_memory.py [--steps 1000,10000,100000] [--rest]
    .venv/bin/python benchmarks/import_memory.py --seek --rest --recording FILE [--before PYTHON]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from recording_cases import scenario, write_recording  # noqa: E402 (the synthetic recordings)


def measure(path: Path) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (KB) and the agreement line of `pagedviz import FILE --json`."""
    code = (
        "import resource, subprocess, sys;"
        "p = subprocess.run([sys.executable, '-m', 'pagedviz.app.cli', 'import', sys.argv[1], '--json'],"
        " stdout=subprocess.PIPE, stderr=subprocess.PIPE);"
        "tail = p.stdout[-2000:].decode(errors='replace');"
        "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss;"
        "print(rss, p.returncode, tail.split('\"text\": ')[-1][:90])"
    )
    # a fresh parent per measurement: ru_maxrss of RUSAGE_CHILDREN is the largest child it waited for
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    took = time.monotonic() - start
    rss, rc, text = r.stdout.split(" ", 2)
    if rc != "0":
        raise SystemExit(f"import failed: {r.stdout} {r.stderr}")
    return took, int(rss), text.strip()


def measure_rest(path: Path) -> tuple[float, float, int, int, str]:
    """(seconds to the answer, seconds to the replay's end, peak RSS KB of the server, store
    bytes, the agreement note) of importing `path` through a fresh real server."""
    import httpx

    from pagedviz.app.serve import running_server

    mb = os.path.getsize(path) // (1 << 20) + 2
    with tempfile.TemporaryDirectory() as store:
        env = {
            "PAGEDVIZ_MAX_IMPORT_MB": str(mb),
            "PAGEDVIZ_STORE_MB": "8192",
            "PAGEDVIZ_STORE_MAX_MB": "16384",
        }
        with (
            running_server("--store", store, env=env) as server,
            httpx.Client(base_url=server.url, timeout=600) as c,
        ):
            start = time.monotonic()
            with open(path, "rb") as f:
                r = c.post("/api/runs/import", content=f, headers={"Content-Type": "application/x-ndjson"})
            answered = time.monotonic() - start
            if r.status_code not in (201, 202):
                raise SystemExit(f"import failed: {r.status_code} {r.text[:300]}")
            rid = r.json()["run_id"]
            while c.get(f"/api/runs/{rid}/progress").json()["state"] == "computing":
                time.sleep(1)
            done = time.monotonic() - start
            ov = c.get(f"/api/runs/{rid}").json()
            n = ov["num_steps"]
            for k in (1, n // 2, n):
                assert c.get(f"/api/runs/{rid}/steps/{k}").status_code == 200
            with open(f"/proc/{server.pid}/status") as st:
                rss = next(int(x.split()[1]) for x in st if x.startswith("VmHWM:"))
            size = sum(p.stat().st_size for p in Path(store).iterdir())
            return answered, done, rss, size, ov["scenario"]["notes"][0][:90]


@contextlib.contextmanager
def serve(python: str, store: str, env: dict[str, str]) -> Iterator[tuple[str, int]]:
    """`pagedviz serve --store` of the checkout behind `python`, on a free port: (its URL, pid)."""
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = [python, "-m", "pagedviz.app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [*args, "--store", store], stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env}
        )
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                        break
                except OSError:
                    time.sleep(0.2)
            yield f"http://127.0.0.1:{port}", proc.pid
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def peak_rss_mb(pid: int) -> tuple[float, float]:
    """VmHWM of the process and the largest of its children (the compute processes), MB."""

    def hwm(p: int) -> float:
        with contextlib.suppress(OSError), open(f"/proc/{p}/status") as st:
            return next(int(x.split()[1]) for x in st if x.startswith("VmHWM:")) / 1024
        return 0.0

    kids: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(x) for x in f.read().split()]
    return hwm(pid), max((hwm(k) for k in kids), default=0.0)


def seek_rest(python: str, path: Path) -> dict[str, float]:
    """Seek figures of one import through a fresh server of `python`'s checkout."""
    import httpx

    mb = os.path.getsize(path) // (1 << 20) + 2
    env = {"PAGEDVIZ_MAX_IMPORT_MB": str(mb), "PAGEDVIZ_STORE_MB": "8192", "PAGEDVIZ_STORE_MAX_MB": "16384"}
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as store, serve(python, store, env) as (url, pid):
        with httpx.Client(base_url=url, timeout=3600) as c:
            start = time.monotonic()
            with open(path, "rb") as f:
                r = c.post("/api/runs/import", content=f, headers={"Content-Type": "application/x-ndjson"})
            answered = time.monotonic()
            out["answer s"] = answered - start
            if r.status_code not in (201, 202):
                raise SystemExit(f"import failed: {r.status_code} {r.text[:300]}")
            rid = r.json()["run_id"]
            n = c.get(f"/api/runs/{rid}/progress").json()["max_steps"]
            for name, k in (("first", 1), ("middle", n // 2), ("last", n)):
                got = c.get(f"/api/runs/{rid}/steps/{k}")
                assert got.status_code == 200 and got.json()["step"] == k, got.text[:200]
                out[f"{name} after s"] = time.monotonic() - answered
            t0 = time.monotonic()
            for k in (1, n // 2, n):
                assert c.get(f"/api/runs/{rid}/steps/{k}").status_code == 200
            out["again s"] = (time.monotonic() - t0) / 3
            t0 = time.monotonic()
            assert c.get(f"/api/runs/{rid}/steps/{n // 2 + 7}").status_code == 200
            out["nearby s"] = time.monotonic() - t0
            while c.get(f"/api/runs/{rid}/progress").json()["state"] != "done":
                time.sleep(0.1)
            # the replay pauses while a reader computes a step: this includes those pauses
            out["replay read meanwhile s"] = time.monotonic() - answered
            out["steps"] = n
            out["server MB"], out["worker MB"] = peak_rss_mb(pid)
        out["store MB"] = sum(p.stat().st_size for p in Path(store).iterdir()) / (1 << 20)
    # the replay's own pace: the same import into a fresh server and store, nothing read meanwhile
    with (
        tempfile.TemporaryDirectory() as store,
        serve(python, store, env) as (url, pid),
        httpx.Client(base_url=url, timeout=3600) as c,
    ):
        with open(path, "rb") as f:
            r = c.post("/api/runs/import", content=f, headers={"Content-Type": "application/x-ndjson"})
        answered = time.monotonic()
        rid = r.json()["run_id"]
        while c.get(f"/api/runs/{rid}/progress").json()["state"] != "done":
            time.sleep(0.05)
        out["replay s"] = time.monotonic() - answered
        out["steps/s"] = n / out["replay s"]
    return out


def seek_cli(python: str, path: Path, n: int) -> dict[str, float]:
    """`pagedviz import FILE --step K` for the first, a middle and the last step, and the whole
    import (`--json`), seconds each."""
    out: dict[str, float] = {}
    for name, k in (("first", 1), ("middle", n // 2), ("last", n)):
        t0 = time.monotonic()
        r = subprocess.run(
            [python, "-m", "pagedviz.app.cli", "import", str(path), "--json", "--step", str(k)],
            capture_output=True,
        )
        out[f"{name} s"] = time.monotonic() - t0 if r.returncode == 0 else float("nan")
    t0 = time.monotonic()
    subprocess.run(
        [python, "-m", "pagedviz.app.cli", "import", str(path), "--json"],
        stdout=subprocess.DEVNULL,
        check=True,
    )
    out["whole s"] = time.monotonic() - t0
    out["steps/s"] = n / out["whole s"]
    return out


REPLAY_CODE = """
import asyncio, sys, time
from pathlib import Path
from pagedviz.app.db import cleanup_temporary, temporary_db
from pagedviz.app.import_replay import ImportJob, first_pass, replay_into, scenario_bytes
from pagedviz.core.replay import scenario_from
path = Path(sys.argv[1])
header, summary = first_pass(path, 1 << 26)
db = temporary_db(1 << 40, 1 << 41)
db.put_recording("rec-0", scenario_bytes(scenario_from(header, summary)), path, summary.num_steps)
job = ImportJob("rec-0", summary.num_steps, time.monotonic(), asyncio.new_event_loop().create_future())
t0 = time.perf_counter()
replay_into(db, job, path, 1 << 26, summary, 1 << 40)
took = time.perf_counter() - t0
print(f"replay s={took:.2f} steps/s={summary.num_steps / took:.0f}")
cleanup_temporary(db)
"""


def replay_in_process(python: str, path: Path) -> str:
    """The import's replay into a temporary store in one process of `python`'s checkout (no
    server): its seconds and steps/s."""
    r = subprocess.run([python, "-c", REPLAY_CODE, str(path)], capture_output=True, text=True, check=True)
    return r.stdout.strip()


def seek_main(args: argparse.Namespace) -> None:
    paths: list[Path] = []
    d = tempfile.mkdtemp()
    if args.recording:
        paths.append(Path(args.recording))
    else:
        for steps in (int(x) for x in args.steps.split(",")):
            paths.append(Path(d) / f"rec-{steps}.jsonl")
            write_recording(scenario(steps, args.every, args.max_tokens), paths[-1])
    sides = ([("before", args.before)] if args.before else []) + [("after", sys.executable)]
    for path in paths:
        with open(path, "rb") as f:
            n = sum(1 for _ in f) - 1
        size = os.path.getsize(path) / (1 << 20)
        for side, python in sides:
            if args.replay:
                text = replay_in_process(python, path)
            else:
                figures = seek_rest(python, path) if args.rest else seek_cli(python, path, n)
                text = " ".join(f"{k}={v:.2f}" for k, v in figures.items())
            print(f"{path.name} ({n} steps, {size:.1f} MB) {side}: {text}", flush=True)
    shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="1000,10000,100000")
    ap.add_argument("--every", type=int, default=50, help="a request arrives every this many steps")
    ap.add_argument("--max-tokens", type=int, default=380)
    ap.add_argument(
        "--rest", action="store_true", help="import through POST /api/runs/import of a real server"
    )
    ap.add_argument("--seek", action="store_true", help="measure seek time and replay throughput (issue 40)")
    ap.add_argument("--recording", help="with --seek: this recording instead of synthetic ones")
    ap.add_argument("--before", help="with --seek: also measure this interpreter's checkout, first")
    ap.add_argument(
        "--replay", action="store_true", help="with --seek: the replay alone, in one process (steps/s)"
    )
    args = ap.parse_args()
    if args.seek:
        seek_main(args)
        return
    if args.rest:
        cols = f"{'answer s':>9} {'replay s':>9} {'server peak RSS MB':>19} {'store MB':>9}"
        print(f"{'steps':>8} {'file MB':>8} {cols}  agreement")
    else:
        print(f"{'steps':>8} {'file MB':>8} {'import s':>9} {'peak RSS MB':>12}  agreement")
    with tempfile.TemporaryDirectory() as d:
        for steps in (int(x) for x in args.steps.split(",")):
            path = Path(d) / f"rec-{steps}.jsonl"
            n = write_recording(scenario(steps, args.every, args.max_tokens), path)
            size = os.path.getsize(path) / (1 << 20)
            if args.rest:
                answered, done, rss, store, text = measure_rest(path)
                print(
                    f"{n:>8} {size:>8.1f} {answered:>9.1f} {done:>9.1f} {rss / 1024:>19.0f} "
                    f"{store / (1 << 20):>9.0f}  {text}",
                    flush=True,
                )
            else:
                took, rss, text = measure(path)
                print(f"{n:>8} {size:>8.1f} {took:>9.1f} {rss / 1024:>12.0f}  {text}", flush=True)
            path.unlink()


if __name__ == "__main__":
    main()
