"""nano-vllm's `ModelRunner.prepare_prefill` / `prepare_decode` (`engine/model_runner.py`) and the LM
head's `last_indices` (`layers/embed_head.py`), as the nanovllm flavour's `@stage` methods
(core/runners/stages.py): the inputs under nano-vllm's names, from the step's sequences in
`self.v` (core/flavors/nanovllm.py's step fills it: the sequences, their starts and ends, the
padded block tables). A prefill passes `block_tables` only when some sequence has a cache hit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedviz.core.flavors.nanovllm_blocks import NanoBlockManager
from pagedviz.core.request import Request
from pagedviz.core.runners.stages import stage
from pagedviz.core.scenario import Scenario


class NanoInputs:
    """The nanovllm flavour's stages of prepare_inputs, in order (`STAGES`); mixed into its engine,
    whose fields below they read."""

    scenario: Scenario
    bm: NanoBlockManager
    v: dict[str, Any]

    STAGES = (
        "_positions",
        "_input_ids",
        "_cu_seqlens_q",
        "_cu_seqlens_k",
        "_slot_mapping",
        "_block_tables",
        "_last_indices",
    )

    @stage(
        "positions",
        "seqs",
        "positions",
        "prefill: positions = concat(range(num_cached_tokens, num_cached_tokens + num_scheduled_tokens)); "
        "decode: positions = len(seq) - 1",
    )
    def _positions(self) -> None:
        v = self.v
        n_q, start = v["n_q"], v["start"]
        cu = np.concatenate(([0], np.cumsum(n_q))).astype(np.int64)
        v["req_indices"] = np.repeat(np.arange(len(n_q)), n_q)
        offsets = np.arange(int(cu[-1]), dtype=np.int64) - np.repeat(cu[:-1], n_q)
        v["positions"] = np.repeat(start, n_q) + offsets

    @stage(
        "input_ids",
        "seqs",
        "input_ids",
        "prefill: input_ids = concat(seq[num_cached_tokens : num_cached_tokens + num_scheduled_tokens] "
        "for seq in seqs); decode: input_ids = [seq.last_token for seq in seqs]",
    )
    def _input_ids(self) -> None:
        v = self.v
        parts = [s.token_ids[a:b] for s, a, b in zip(v["seqs"], v["start"], v["end"])]
        v["input_ids"] = np.concatenate(parts).astype(np.int64)

    @stage(
        "cu_seqlens_q",
        "seqs",
        "cu_seqlens_q max_seqlen_q context_lens",
        "prefill: cu_seqlens_q = [0, *cumsum(seqlen_q)], seqlen_q = num_scheduled_tokens; "
        "max_seqlen_q = max(seqlen_q); decode: context_lens = len(seq)",
    )
    def _cu_seqlens_q(self) -> None:
        v = self.v
        if v["is_prefill"]:
            v["cu_seqlens_q"] = np.concatenate(([0], np.cumsum(v["n_q"]))).astype(np.int32)
            v["scalars"]["max_seqlen_q"] = int(v["n_q"].max())
        else:
            v["context_lens"] = v["end"].astype(np.int32)

    @stage(
        "cu_seqlens_k",
        "seqs",
        "cu_seqlens_k max_seqlen_k",
        "prefill: cu_seqlens_k = [0, *cumsum(seqlen_k)], seqlen_k = num_cached_tokens + "
        "num_scheduled_tokens; max_seqlen_k = max(seqlen_k); decode: none (context_lens)",
    )
    def _cu_seqlens_k(self) -> None:
        v = self.v
        if v["is_prefill"]:
            v["cu_seqlens_k"] = np.concatenate(([0], np.cumsum(v["end"]))).astype(np.int32)
            v["scalars"]["max_seqlen_k"] = int(v["end"].max())

    @stage(
        "slot_mapping",
        "seqs positions",
        "slot_mapping",
        "slot_mapping = seq.block_table[position // block_size] * block_size + position % block_size "
        "(prefill: the slots of positions num_cached_tokens.. ; decode: "
        "block_table[-1] * block_size + last_block_num_tokens - 1)",
    )
    def _slot_mapping(self) -> None:
        v = self.v
        bs = self.scenario.config.block_size
        bt = v["padded_tables"]
        idx = v["req_indices"] * bt.shape[1] + v["positions"] // bs
        v["slot_mapping"] = (bt.ravel()[idx].astype(np.int64) * bs + v["positions"] % bs).astype(np.int32)

    @stage(
        "block_tables",
        "seqs cu_seqlens_q cu_seqlens_k",
        "block_tables",
        "block_tables = [seq.block_table + [-1] * (max_len - len(seq.block_table))]; "
        "prefill: only if cu_seqlens_k[-1] > cu_seqlens_q[-1] (a prefix-cache hit), else None",
    )
    def _block_tables(self) -> None:
        v = self.v
        if not v["is_prefill"] or v["cu_seqlens_k"][-1] > v["cu_seqlens_q"][-1]:
            v["block_tables"] = v["padded_tables"]
            v["scalars"]["block_tables"] = "passed"
        else:
            v["scalars"]["block_tables"] = "None (no prefix-cache hit)"

    @stage(
        "last_indices",
        "cu_seqlens_q",
        "last_indices",
        "prefill: last_indices = cu_seqlens_q[1:] - 1 (the LM head keeps these rows); "
        "decode: every row (one token per sequence)",
    )
    def _last_indices(self) -> None:
        v = self.v
        if v["is_prefill"]:
            v["last_indices"] = (v["cu_seqlens_q"][1:] - 1).astype(np.int64)

    def _padded_tables(self, seqs: list[Request]) -> np.ndarray:
        """`prepare_block_tables`: every sequence's block table, padded with -1 to the longest."""
        tables = [self.bm.block_tables[s.req_id] for s in seqs]
        width = max(len(t) for t in tables)
        lens = np.array([len(t) for t in tables])
        bt = np.full((len(tables), width), -1, dtype=np.int32)
        bt[np.arange(width)[None, :] < lens[:, None]] = np.concatenate(tables)
        return bt
