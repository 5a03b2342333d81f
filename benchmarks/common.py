"""What the benchmarks share: the (requests, tokens) sizes and the scenario whose first step
schedules exactly that many requests and tokens (each request prefills tokens/requests tokens)."""

from __future__ import annotations

from typing import Any

from pagedviz.core import Limits, Scenario

SIZES = [(8, 256), (64, 2048), (256, 8192), (1024, 16384)]


def bench_scenario(
    requests: int, tokens: int, device: str = "cpu", model: bool = True, runner: str | None = None
) -> Scenario:
    """`runner` pins config.model_runner ("v1" | "v2") with synchronous scheduling; left out, the
    flavour's defaults apply."""
    return Scenario.from_dict(
        bench_dict(requests, tokens, device, model, runner),
        Limits(max_requests=requests + 1, max_step_mflop=1 << 30),  # timing sizes, past the server's bound
    )


def bench_dict(
    requests: int, tokens: int, device: str = "cpu", model: bool = True, runner: str | None = None
) -> dict[str, Any]:
    """bench_scenario's JSON, for benchmarks that change it (more steps, another request)."""
    per = tokens // requests
    config: dict[str, object] = {
        "block_size": 16,
        "max_model_len": per * 4,
        "max_num_reqs": requests,
        "max_num_batched_tokens": tokens,
        "num_kv_blocks": requests * (per // 4 + 2) + 1,
        "device": device,
    }
    if not model:
        config["model"] = None
    if runner is not None:
        config["model_runner"] = runner
        config["async_scheduling"] = False
    return {
        "name": f"bench-{requests}x{tokens}",
        "seed": 0,
        "config": config,
        "requests": [{"id": str(i), "prompt_len": per, "max_tokens": 1} for i in range(requests)],
        "max_steps": 4,
    }


def process_tree(pid: int) -> list[int]:
    """The process and all its descendants (a server and its compute processes), from /proc."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def status_mb(pid: int, field: str) -> float:
    """A /proc/PID/status memory field (VmRSS, VmHWM) in MB; NaN where unknown."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def tree_growth_mb(pid: int, before: dict[int, float]) -> float:
    """How far the process tree's memory peaked above `before` (VmRSS by pid, from tree_rss_mb):
    each process's VmHWM less its VmRSS before (all of it for a process started since)."""
    return sum(max(0.0, status_mb(p, "VmHWM") - before.get(p, 0.0)) for p in process_tree(pid))


def tree_rss_mb(pid: int) -> dict[int, float]:
    """VmRSS of the process and each of its descendants, by pid."""
    return {p: status_mb(p, "VmRSS") for p in process_tree(pid)}
