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
all that, the time to the 202 answer and to the end of the replay, and the store's size. Run:

    .venv/bin/python benchmarks/import_memory.py [--steps 1000,10000,100000] [--rest]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="1000,10000,100000")
    ap.add_argument("--every", type=int, default=50, help="a request arrives every this many steps")
    ap.add_argument("--max-tokens", type=int, default=380)
    ap.add_argument(
        "--rest", action="store_true", help="import through POST /api/runs/import of a real server"
    )
    args = ap.parse_args()
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
