"""Model Runner V2's `BlockTables` (vllm/v1/worker/gpu/block_table.py) as pagedviz keeps it: per KV
cache group, a per-slot block table and block count (`num_blocks` [G, M]), the per-step gathered copy
the attention kernel reads, a slot_mapping buffer, and their device copies. Group 0's arrays keep
vLLM's names in the trace; group g >= 1 adds the suffix _g{g}. With one group this is the single
table V2 always had."""

from __future__ import annotations

import numpy as np
import torch

from pagedviz.core.kv_groups import KVCacheGroup
from pagedviz.core.runners.stages import group_name
from pagedviz.core.runners.v2_stages import PAD_SLOT_ID
from pagedviz.core.table_changes import TableChanges
from pagedviz.core.trace import PlanItem, Stage


class SlotBlockTables:
    """One table per KV cache group over M state slots and K columns; `T_pad` tokens of
    slot_mapping."""

    def __init__(
        self, groups: tuple[KVCacheGroup, ...], M: int, K: int, T_pad: int, device: torch.device
    ) -> None:
        G = self.num_groups = len(groups)
        # sliding_window_reach: per group, the tokens below a request's first scheduled position
        # attention still reads (SlidingWindowSpec.num_retained_tokens = sliding_window - 1); 0 for
        # a full-attention group
        self.sliding_window_reach = [
            (g.sliding_window - 1) if g.sliding and g.sliding_window else 0 for g in groups
        ]
        self.tables = [np.zeros((M, K), dtype=np.int32) for _ in range(G)]
        self.num_blocks = np.zeros((G, M), dtype=np.int32)
        # what the trace records of each step (by change): appends are read from num_blocks (each
        # says it grew), a new request's blocks from column 0 are told
        self.changes = [TableChanges(t, self.num_blocks[g]) for g, t in enumerate(self.tables)]
        self.input_tables = [np.zeros((M, K), dtype=np.int32) for _ in range(G)]
        self.slot_mapping_np = [np.full(T_pad, PAD_SLOT_ID, dtype=np.int64) for _ in range(G)]
        self.tables_dev = [torch.zeros((M, K), dtype=torch.int32, device=device) for _ in range(G)]
        self.slot_mapping_dev = [
            torch.full((T_pad,), PAD_SLOT_ID, dtype=torch.int64, device=device) for _ in range(G)
        ]
        # the gathered table each group's attention reads (input_block_tables on the device)
        self.input_tables_dev = [torch.zeros((M, K), dtype=torch.int32, device=device) for _ in range(G)]
        self.device = device

    def append_block_ids(self, slot: int, group_block_ids: list[list[int]], overwrite: bool) -> None:
        """BlockTables.append_block_ids: each group's ids after the slot's blocks, or from column 0
        (overwrite: a new or resumed request; the tail past them stays stale)."""
        for g, ids in enumerate(group_block_ids):
            if not ids and not overwrite:
                continue
            start = 0 if overwrite else int(self.num_blocks[g, slot])
            self.tables[g][slot, start : start + len(ids)] = ids
            if overwrite:
                self.changes[g].rewrote(slot, len(ids))
            else:
                self.changes[g].grew()
            self.num_blocks[g, slot] = start + len(ids)

    def stage_to_device(self, touched: list[int]) -> None:
        """apply_staged_writes for the tables: the written heads of the touched slots' rows."""
        if not touched:
            return
        idx = np.asarray(touched, dtype=np.int64)
        rows = torch.from_numpy(idx).to(self.device)
        for g, table in enumerate(self.tables):
            w = int(self.num_blocks[g, idx].max())
            src = torch.from_numpy(table[idx, :w]).to(self.device)
            self.tables_dev[g][:, :w].index_copy_(0, rows, src)

    def capture(self, values: dict[str, object]) -> None:
        """Groups 1.. per-slot tables (by change) and block counts (copies) for the trace (group
        0's are recorded with the slot state)."""
        for g in range(1, self.num_groups):
            values[group_name("block_tables", g)] = self.changes[g].capture()
            values[group_name("num_blocks", g)] = self.num_blocks[g].copy()

    def group_records(self, finish: Stage) -> tuple[Stage, list[PlanItem]]:
        """With several groups: the finish_and_add stage writing every group's table and count, and
        what the trace records of groups 1.. (block_tables_g{g} a table, num_blocks_g{g} per slot)."""
        if self.num_groups == 1:
            return finish, []
        names = [group_name(a, g) for g in range(1, self.num_groups) for a in ("block_tables", "num_blocks")]
        plan: list[PlanItem] = [
            (n, "system" if n.startswith("block_tables") else "slot", finish.name, "cpu", None) for n in names
        ]
        stage = Stage(
            finish.name,
            finish.reads,
            [*finish.writes, *names],
            finish.formula + "; for each KV cache group g, its own block ids into block_tables_g{g} and "
            "num_blocks_g{g} (BlockTables.append_block_ids, one table a group)",
            finish.why,
        )
        return stage, plan
