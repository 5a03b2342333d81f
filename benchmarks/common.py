"""What the benchmarks share: the (requests, tokens) sizes and the scenario whose first step
schedules exactly that many requests and tokens (each request prefills tokens/requests tokens),
the server processes' memory, and the trace capture as it was before capture by change (issue
40), for the "before" columns: every step copied the runners' whole persistent tables (V1's
token_ids_cpu[:n] and block_table[:n], V2's [max_num_reqs, max_model_len] all_token_ids and
per-slot block tables). `full_copy_v1` / `full_copy_v2` are main's `capture_state` bodies;
`full_copy(runner)` sets them on one runner (prepare_inputs.py), `use_full_copies()` on the runner
classes, and `sitecustomize_dir()` gives a folder that makes a Python process started with it on
PYTHONPATH do so (a server and its compute processes: big_runs.py)."""

from __future__ import annotations

import os
import tempfile
import types
from typing import Any

from pagedviz.core import Limits, Scenario
from pagedviz.core.runners.stages import group_name
from pagedviz.core.runners.v1 import ModelRunner
from pagedviz.core.runners.v2 import ModelRunnerV2

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


def full_copy_v1(self: Any, values: dict[str, Any]) -> None:
    ib, v = self.input_batch, self.v
    n = v["num_reqs"]
    num_tokens = values.get("num_tokens")
    if num_tokens is None or len(num_tokens) != n:
        num_tokens = ib.num_tokens[:n].copy()
    values["num_tokens"] = num_tokens
    values["num_computed_tokens_cpu"] = ib.num_computed_tokens_cpu[:n].copy()
    values["token_ids_cpu"] = ib.token_ids_cpu[:n].copy()
    values["block_table"] = ib.block_table.block_table_np[:n].copy()
    for g in range(1, self.num_groups):
        values[group_name("block_table", g)] = ib.block_tables[g].block_table_np[:n].copy()


def full_copy_v2(self: Any, values: dict[str, Any]) -> None:
    values["num_computed_tokens"] = self.num_computed_tokens.copy()
    values["prefill_len"] = self.prefill_len.copy()
    values["total_len"] = self.total_len.copy()
    values["num_blocks"] = self.num_blocks.copy()
    values["last_sampled_tokens"] = self.last_sampled_tokens.copy()
    values["all_token_ids"] = self.all_token_ids.copy()
    values["block_tables"] = self.block_tables.copy()
    for g in range(1, self.num_groups):
        values[group_name("block_tables", g)] = self.tables.tables[g].copy()
        values[group_name("num_blocks", g)] = self.tables.num_blocks[g].copy()
    if self.num_spec:
        values["draft_tokens"] = self.draft_tokens.copy()


def full_copy(runner: Any) -> None:
    """This runner captures as before (whole copies)."""
    body = full_copy_v2 if isinstance(runner, ModelRunnerV2) else full_copy_v1
    runner.capture_state = types.MethodType(body, runner)


def use_full_copies() -> None:
    """Every runner of this process captures as before (whole copies)."""
    ModelRunner.capture_state = full_copy_v1  # type: ignore[method-assign]
    ModelRunnerV2.capture_state = full_copy_v2  # type: ignore[method-assign]


def sitecustomize_dir() -> str:
    """A folder whose sitecustomize.py makes a Python process started with it on PYTHONPATH
    capture as before (a server and its compute processes)."""
    folder = tempfile.mkdtemp(prefix="pagedviz-capture-before-")
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(folder, "sitecustomize.py"), "w", encoding="utf-8") as f:
        f.write(f"import sys\nsys.path.append({here!r})\n")
        f.write("import common\ncommon.use_full_copies()\n")
    return folder
