"""The trace capture as it was before capture by change (issue 40), for the benchmarks' "before"
column: every step copied the runners' whole persistent tables (V1's token_ids_cpu[:n] and
block_table[:n], V2's [max_num_reqs, max_model_len] all_token_ids and per-slot block tables).

`full_copy_v1` / `full_copy_v2` are main's `capture_state` bodies, word for word except for the
names; `use_full_copies()` installs them on the runner classes (benchmarks/prepare_inputs.py sets
them on one runner; benchmarks/big_runs.py starts a server whose processes install them through
`sitecustomize_dir()`).
"""

from __future__ import annotations

import os
import tempfile
import types
from typing import Any

from pagedviz.core.runners.stages import group_name
from pagedviz.core.runners.v1 import ModelRunner
from pagedviz.core.runners.v2 import ModelRunnerV2


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
        f.write("import capture_before\ncapture_before.use_full_copies()\n")
    return folder
