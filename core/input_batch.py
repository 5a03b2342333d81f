"""The persistent batch (docs/architecture.md), as vLLM's gpu_input_batch keeps it.

Rows of `token_ids_cpu` (max_num_reqs, max_model_len) and of the block table
(max_num_reqs, ceil(max_model_len / block_size)) belong to requests and persist across steps, so a
decode step only writes what changed. Removing a request leaves a hole; adding one fills the
lowest hole; `condense` moves the last rows into the holes so the active rows are 0..num_reqs-1.
Each write to `token_ids_cpu` or a block table also tells the table's `TableChanges`
(core/table_changes.py), from which the trace records each step's tables by change.
Each table is a torch tensor (`x_cpu_tensor`) with a numpy view (`x_cpu` / `x_np`) on the same
memory, pinned when the device is CUDA.
"""

from __future__ import annotations

import heapq

import numpy as np
import torch

from pagedviz.core.table_changes import TableChanges


def cpu_tensor(shape: tuple[int, ...], dtype: torch.dtype, pin: bool) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype, device="cpu", pin_memory=pin)


class BlockTable:
    """Block ids per batch row; entries past a request's blocks are 0 (the null block)."""

    def __init__(self, max_num_reqs: int, max_num_blocks_per_req: int, pin: bool) -> None:
        self.max_num_blocks_per_req = max_num_blocks_per_req
        self.block_table_cpu = cpu_tensor((max_num_reqs, max_num_blocks_per_req), torch.int32, pin)
        self.block_table_np = self.block_table_cpu.numpy()
        self.num_blocks_per_row = np.zeros(max_num_reqs, dtype=np.int32)
        # what the trace records of each step: appends are read from num_blocks_per_row (each
        # says it grew); a row cleared or moved is told before it changes
        self.changes = TableChanges(self.block_table_np, self.num_blocks_per_row)

    def add_row(self, block_ids: list[int], row: int) -> None:
        self.changes.reset(row)
        n = len(block_ids)
        self.block_table_np[row, :n] = block_ids
        self.block_table_np[row, n:] = 0
        self.num_blocks_per_row[row] = n

    def append_row(self, block_ids: list[int], row: int) -> None:
        start = int(self.num_blocks_per_row[row])
        self.block_table_np[row, start : start + len(block_ids)] = block_ids
        self.num_blocks_per_row[row] = start + len(block_ids)
        self.changes.grew()

    def clear_row(self, row: int) -> None:
        self.changes.reset(row)
        self.block_table_np[row] = 0
        self.num_blocks_per_row[row] = 0

    def move_row(self, src: int, dst: int) -> None:
        self.changes.move(src, dst)
        self.block_table_np[dst] = self.block_table_np[src]
        self.num_blocks_per_row[dst] = self.num_blocks_per_row[src]
        self.block_table_np[src] = 0
        self.num_blocks_per_row[src] = 0


class MultiGroupBlockTable:
    """One BlockTable per KV cache group (vLLM's MultiGroupBlockTable, block_table.py): a request's
    row is added, appended, cleared and moved in every group's table at once, each from its own
    group's block ids. A sliding-window group's row holds the null block 0 where the window
    dropped a block."""

    def __init__(
        self, max_num_reqs: int, max_num_blocks_per_req: int, pin: bool, num_groups: int = 1
    ) -> None:
        self.block_tables = [BlockTable(max_num_reqs, max_num_blocks_per_req, pin) for _ in range(num_groups)]

    def __getitem__(self, g: int) -> BlockTable:
        return self.block_tables[g]

    def __len__(self) -> int:
        return len(self.block_tables)

    def add_row(self, group_block_ids: list[list[int]], row: int) -> None:
        for table, ids in zip(self.block_tables, group_block_ids):
            table.add_row(ids, row)

    def append_row(self, group_block_ids: list[list[int]], row: int) -> None:
        for table, ids in zip(self.block_tables, group_block_ids):
            if ids:
                table.append_row(ids, row)

    def clear_row(self, row: int) -> None:
        for table in self.block_tables:
            table.clear_row(row)

    def move_row(self, src: int, dst: int) -> None:
        for table in self.block_tables:
            table.move_row(src, dst)


class InputBatch:
    def __init__(
        self,
        max_num_reqs: int,
        max_model_len: int,
        max_num_blocks_per_req: int,
        pin: bool,
        num_groups: int = 1,
    ) -> None:
        self.max_num_reqs = max_num_reqs
        self.max_model_len = max_model_len
        self.token_ids_cpu_tensor = cpu_tensor((max_num_reqs, max_model_len), torch.int32, pin)
        self.token_ids_cpu = self.token_ids_cpu_tensor.numpy()
        # every write to token_ids_cpu tells token_changes (the trace records each step's by change)
        self.token_changes = TableChanges(self.token_ids_cpu)
        self.num_computed_tokens_cpu_tensor = cpu_tensor((max_num_reqs,), torch.int32, pin)
        self.num_computed_tokens_cpu = self.num_computed_tokens_cpu_tensor.numpy()
        self.num_tokens = np.zeros(max_num_reqs, dtype=np.int32)
        self.num_prompt_tokens = np.zeros(max_num_reqs, dtype=np.int32)
        # one block table per KV cache group; `block_table` is the first group's (the only one
        # with one group), as vLLM's input_batch.block_table[0]
        self.block_tables = MultiGroupBlockTable(max_num_reqs, max_num_blocks_per_req, pin, num_groups)
        self.block_table = self.block_tables[0]
        self._req_ids: list[str | None] = []
        self._holes: list[int] = []  # a min-heap of the rows left by removed requests
        self.req_id_to_index: dict[str, int] = {}

    @property
    def req_ids(self) -> list[str]:
        return [r for r in self._req_ids if r is not None]

    @property
    def num_reqs(self) -> int:
        return len(self.req_id_to_index)

    def add_request(
        self,
        req_id: str,
        token_ids: np.ndarray,
        num_prompt_tokens: int,
        num_computed: int,
        block_ids: list[int],
        group_block_ids: list[list[int]] | None = None,
    ) -> int:
        """Add a request into the lowest hole (or a new row); `group_block_ids`: its blocks per KV
        cache group (None: `block_ids` is the only group's)."""
        if self._holes:
            row = heapq.heappop(self._holes)
            self._req_ids[row] = req_id
        else:
            row = len(self._req_ids)
            self._req_ids.append(req_id)
        self.req_id_to_index[req_id] = row
        n = len(token_ids)
        self.token_ids_cpu[row, :n] = token_ids
        self.token_ids_cpu[row, n:] = 0
        self.token_changes.reset(row)
        self.token_changes.wrote(row, 0, n)
        self.num_tokens[row] = n
        self.num_prompt_tokens[row] = num_prompt_tokens
        self.num_computed_tokens_cpu[row] = num_computed
        self.block_tables.add_row(group_block_ids or [block_ids], row)
        return row

    def remove_request(self, req_id: str) -> int | None:
        row = self.req_id_to_index.pop(req_id, None)
        if row is None:
            return None
        self._req_ids[row] = None
        heapq.heappush(self._holes, row)
        self.token_ids_cpu[row] = 0
        self.token_changes.reset(row)
        self.num_tokens[row] = 0
        self.num_computed_tokens_cpu[row] = 0
        self.block_tables.clear_row(row)
        return row

    def condense(self) -> list[dict[str, object]]:
        """Move the last active row into the lowest hole until the rows are dense."""
        moves: list[dict[str, object]] = []
        while self._holes:
            while self._req_ids and self._req_ids[-1] is None:
                self._req_ids.pop()
            dst = heapq.heappop(self._holes)
            if dst >= len(self._req_ids):
                continue  # the hole was past the last active row
            src = len(self._req_ids) - 1
            req_id = self._req_ids.pop()
            assert req_id is not None
            self._req_ids[dst] = req_id
            self.req_id_to_index[req_id] = dst
            for arr in (
                self.token_ids_cpu,
                self.num_tokens,
                self.num_prompt_tokens,
                self.num_computed_tokens_cpu,
            ):
                arr[dst] = arr[src]
                arr[src] = 0
            self.token_changes.move(src, dst)
            self.block_tables.move_row(src, dst)
            moves.append({"req_id": req_id, "from": src, "to": dst})
        while self._req_ids and self._req_ids[-1] is None:
            self._req_ids.pop()
        return moves
