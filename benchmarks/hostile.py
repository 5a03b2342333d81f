"""The worst requests at the default limits, against a real server: for each of the costliest
scenarios the limits allow (tests/support/hostile_cases.py), and for requests just over the limits, the
answer, its time and the peak memory growth (VmHWM - VmRSS before) of the server, which keeps the
trace, and of its compute processes, which run the engine, on a fresh server each, so one case's
peak does not hide another's. Run:

    .venv/bin/python benchmarks/hostile.py            # default limits (runs may take up to 60 s)
    .venv/bin/python benchmarks/hostile.py --run-seconds 10
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from pagedviz.app.links import pack
from pagedviz.app.serve import running_server
from pagedviz.core.presets import preset_dict

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from common import tree_growth_mb, tree_rss_mb  # noqa: E402
from hostile_cases import worst_scenarios  # noqa: E402


def status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(field)


OVER: dict[str, Any] = {
    "capture size 1e18": {
        "config": {"cudagraph_capture_sizes": [10**18]},
        "requests": [{"id": "a", "prompt_len": 8}],
    },
    "8192-token prompt, model": {
        "config": {"max_model_len": 8200, "max_num_batched_tokens": 8192, "num_kv_blocks": 600},
        "requests": [{"id": "a", "prompt_len": 8190, "max_tokens": 2}],
    },
    "ascend mask 40k, no model": {
        "flavor": "ascend",
        "config": {
            "max_model_len": 40008,
            "max_num_reqs": 1,
            "max_num_batched_tokens": 16384,
            "num_kv_blocks": 2600,
            "model": None,
        },
        "requests": [{"id": "a", "prompt_len": 40000, "max_tokens": 8}],
    },
}
LINK = {
    "config": {"max_model_len": 1 << 20, "max_num_reqs": 1, "model": None},
    "requests": [{"id": str(i), "prompt_len": (1 << 20) - 8, "max_tokens": 8} for i in range(256)],
}


def measure(env: dict[str, str], send: Any) -> tuple[int, float, float, float]:
    """The answer's status and seconds, and the peak memory growth of the server and of its
    compute processes (MB)."""
    with running_server(env=env) as server, httpx.Client(base_url=server.url, timeout=600) as c:
        c.post("/api/runs", json=preset_dict("seed-001"))  # warm
        c.post("/api/runs", json=preset_dict("seed-002"))  # (both compute processes)
        before = tree_rss_mb(server.pid)
        start = time.monotonic()
        code = send(c).status_code
        seconds = time.monotonic() - start
        own = status_kb(server.pid, "VmHWM") / 1024 - before[server.pid]
        total = tree_growth_mb(server.pid, before)
    return code, seconds, own, total - max(0.0, own)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-seconds", type=int, help="PAGEDVIZ_MAX_RUN_SECONDS (default: the server's, 60)")
    args = ap.parse_args()
    env = {"PAGEDVIZ_MAX_RUN_SECONDS": str(args.run_seconds)} if args.run_seconds else {}
    rows = []
    for name, d in worst_scenarios().items():
        rows.append(("allowed: " + name, *measure(env, lambda c, d=d: c.post("/api/runs", json=d))))
    for name, d in OVER.items():
        rows.append(("over: " + name, *measure(env, lambda c, d=d: c.post("/api/runs", json=d))))
    rows.append(
        (
            "over: link, 256 x 1M prompt_len",
            *measure(env, lambda c: c.get("/api/runs/from-link", params={"s": pack(LINK)})),
        )
    )
    width = max(len(r[0]) for r in rows)
    print(f"{'request':<{width}}  status  seconds  peak growth MB: server  compute  both")
    for name, code, seconds, own, workers in rows:
        print(
            f"{name:<{width}}  {code:>6}  {seconds:>7.2f}  {own:>22.0f}  {workers:>7.0f}"
            f"  {own + workers:>4.0f}"
        )
    worst_mb = max(rows, key=lambda r: r[3] + r[4])
    worst_s = max(rows, key=lambda r: r[2])
    print(
        f"worst peak growth: {worst_mb[3] + worst_mb[4]:.0f} MB, server {worst_mb[3]:.0f} + compute processes"
        f" {worst_mb[4]:.0f} ({worst_mb[0]}); limit in issue 14: 1536 MB"
    )
    print(f"slowest answer: {worst_s[2]:.1f} s ({worst_s[0]})")
    refusals = [r for r in rows if r[0].startswith("over:")]
    print(
        f"refusals: at most {max(r[2] for r in refusals):.2f} s"
        f" and {max(r[3] + r[4] for r in refusals):.0f} MB "
        "(issue 14: under 1.5 s and 150 MB)"
    )


if __name__ == "__main__":
    main()
