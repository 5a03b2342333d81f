"""The stages of the V1 runner's `prepare_inputs` (gpu_model_runner.py `_prepare_inputs`), one
method each: what it reads and writes, its formula and why (`@stage`), computed with vectorised
numpy on views of the runner's persistent CPU buffers. `ModelRunner` (v1.py) holds the buffers and
the persistent batch; this mixin only declares what it reads of them."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pagedviz.core.input_batch import InputBatch
from pagedviz.core.kv_groups import KVCacheGroup
from pagedviz.core.runners.mrope import MRope
from pagedviz.core.runners.stages import stage
from pagedviz.core.runners.v1_feature_stages import V1FeatureStages
from pagedviz.core.scenario_parts import EngineConfig

# below this many tokens input_ids is gathered with numpy's take (torch's index_select has a
# larger fixed cost; it wins on big batches): benchmarks/prepare_inputs.py measures both sides
SMALL_GATHER = 2048


class V1Stages(V1FeatureStages):
    """The stage methods of V1's prepare_inputs (with the feature stages of V1FeatureStages);
    `ModelRunner` supplies the state below."""

    config: EngineConfig
    input_batch: InputBatch
    v: dict[str, Any]
    pad: dict[str, tuple[int, np.ndarray | None]]
    mrope: dict[str, MRope]
    block_size: int
    block_shift: int | None
    max_model_len: int
    max_num_blocks_per_req: int
    arange_np: np.ndarray
    row_starts_m: np.ndarray  # arange_np * max_model_len: each row's start in the flat token table
    row_starts_k: np.ndarray  # arange_np * max_num_blocks_per_req: in the flat block table
    positions_np: np.ndarray
    input_ids_np: np.ndarray
    query_start_loc_np: np.ndarray
    seq_lens_np: np.ndarray
    slot_mapping_np: np.ndarray
    group_slot_mapping_np: list[np.ndarray]
    slot_mapping_names: tuple[tuple[str, str], ...]  # each group's block_numbers and slot_mapping
    kv_cache_groups: tuple[KVCacheGroup, ...]
    token_ids_flat: torch.Tensor
    token_ids_flat_np: np.ndarray
    prev_req_id_to_index: dict[str, int]
    prev_sampled_token_ids: torch.Tensor | None
    pending_sampled: dict[str, int]

    @property
    def uses_mrope(self) -> bool:
        return bool(self.mrope)

    @stage(
        "req_indices",
        "num_scheduled_tokens",
        "req_indices",
        "req_indices = repeat(arange(num_reqs), num_scheduled_tokens)",
        "Which batch row each scheduled token belongs to: row i repeated num_scheduled_tokens[i] "
        "times (np.repeat in GPUModelRunner._prepare_inputs).",
        title=("Request index of each token", "请求索引"),
        why_zh=(
            "每个被调度的 token 属于批次的哪一行：第 i 行重复 num_scheduled_tokens[i] 次"
            "（GPUModelRunner._prepare_inputs 中的 np.repeat）。"
        ),
    )
    def _req_indices(self) -> None:
        v = self.v
        v["req_indices"] = self.arange_np[: v["num_reqs"]].repeat(v["num_scheduled_tokens"])

    @stage(
        "cu_num_tokens",
        "num_scheduled_tokens",
        "cu_num_tokens arange",
        "cu_num_tokens = cumsum(num_scheduled_tokens); "
        "arange = arange(T) - repeat(cu_num_tokens - num_scheduled_tokens, num_scheduled_tokens)",
        "_get_cumsum_and_arange: the running total of scheduled tokens and an arange that restarts "
        "at 0 for every request (vLLM keeps it in query_pos), without a Python loop.",
        title=("Cumulative sum and batched arange", "前缀和与分段 arange"),
        why_zh=(
            "调度 token 数的前缀和（cumsum），以及每个请求各自从 0 开始的 arange，全部向量化计算，没有 "
            "Python 循环。"
        ),
    )
    def _cu_num_tokens(self) -> None:
        v = self.v
        n = v["num_scheduled_tokens"]
        cu = np.add.accumulate(n, dtype=np.int64)  # = n.cumsum(dtype=np.int64), in half the time
        T = v["T"] = int(cu[-1]) if len(cu) else 0
        v["cu_num_tokens"] = cu
        if len(n) == T:  # one token a request (every scheduled request has one at least): zeros
            v["arange"] = np.zeros(T, dtype=np.int64)
            return
        offsets = (cu - n).repeat(n)
        v["arange"] = np.subtract(self.arange_np[:T], offsets, out=offsets)

    @stage(
        "positions",
        "num_computed_tokens_cpu req_indices arange",
        "positions",
        "positions = num_computed_tokens_cpu[req_indices] + arange",
        "Each token's position in its own sequence: what the request had computed before this step "
        "plus its offset in this step. RoPE rotates by it. vLLM 0.33 computes the same sum on the "
        "device from its device copy of num_computed_tokens.",
        views="positions",
        title=("Token positions", "token 位置"),
        why_zh=(
            "每个 token 在其请求序列中的位置：已计算的 token 数加上本步内的偏移。RoPE（旋转位置编码）按"
            "它旋转。vLLM 0.33 在设备上用 num_computed_tokens 的设备副本计算同样的和。"
        ),
    )
    def _positions(self) -> None:
        v = self.v
        out = self.positions_np[: v["T"]]
        np.add(self.input_batch.num_computed_tokens_cpu[v["req_indices"]], v["arange"], out=out)
        v["positions"] = out

    @stage(
        "token_indices",
        "positions req_indices",
        "token_indices",
        "token_indices = positions + req_indices * M",
        "Where each token sits in the flattened token table token_ids_cpu [max_num_reqs, M]: its row "
        "times the row length M = max_model_len (token_ids_cpu.shape[1]) plus its position.",
        title=("Token indices", "token 下标"),
        why_zh="每个 token 在展平的 token ID 表中的下标：位置 + 请求行号 × max_model_len（M）。",
    )
    def _token_indices(self) -> None:
        v = self.v
        if v["T"] == v["num_reqs"]:  # one token a request: req_indices is arange(T)
            v["token_indices"] = self.row_starts_m[: v["T"]] + v["positions"]
            return
        token_indices = v["req_indices"] * self.max_model_len
        token_indices += v["positions"]
        v["token_indices"] = token_indices

    @stage(
        "input_ids",
        "token_ids_cpu token_indices",
        "input_ids",
        "input_ids = token_ids_cpu.flatten()[token_indices]",
        "The model's input ids, gathered from the token table with token_indices in one "
        "torch.index_select (faster than np.take for large tables).",
        views="input_ids",
        title=("Input ids", "输入 ID"),
        why_zh=(
            "模型的输入：用 token_indices 从 token ID 表（token_ids_cpu）中一次 torch.index_select 取出"
            "的 token ID（大表时比 np.take 快）。"
        ),
    )
    def _input_ids(self) -> None:
        v = self.v
        T = v["T"]
        out = self.input_ids_np[:T]  # a numpy slice wraps as a tensor faster than torch slices
        if T < SMALL_GATHER:  # a small batch: numpy's take, whose fixed cost is a third of torch's
            self.token_ids_flat_np.take(v["token_indices"], out=out)
        else:
            torch.index_select(
                self.token_ids_flat, 0, torch.from_numpy(v["token_indices"]), out=torch.from_numpy(out)
            )
        v["input_ids"] = out

    @stage(
        "block_table_indices",
        "req_indices positions",
        "block_table_indices",
        "block_table_indices = req_indices * K + positions // block_size",
        "Which cell of the flattened block table [max_num_reqs, K] holds each token's block. This is "
        "the CPU path of vLLM up to 0.10; vLLM 0.33 does this and the next two stages on the device "
        "in one Triton kernel (BlockTable.compute_slot_mapping) from query_start_loc, positions and "
        "the device block table. pagedviz does both and checks they agree.",
        title=("Block-table indices", "块表下标"),
        why_zh=(
            "每个 token 所在块在展平块表 [max_num_reqs, K] 中的下标：行号 × K + position // block_size"
            "。这是 vLLM 0.10 及以前的 CPU 路径；vLLM 0.33 在设备上用一个 Triton 内核（BlockTable.compu"
            "te_slot_mapping）根据 query_start_loc、positions 和设备端块表一次完成这一阶段和后两个阶段"
            "。pagedviz 两种都算，并检查结果一致。"
        ),
    )
    def _block_table_indices(self) -> None:
        v = self.v
        positions = v["positions"]
        # a power-of-two block size divides by a shift (positions are never negative)
        shift = self.block_shift
        indices = positions // self.block_size if shift is None else positions >> shift
        if v["T"] == v["num_reqs"]:  # one token a request: req_indices is arange(T)
            indices += self.row_starts_k[: v["T"]]
        else:
            indices += v["req_indices"] * self.max_num_blocks_per_req
        v["block_table_indices"] = indices

    @stage(
        "block_numbers",
        "block_table block_table_indices",
        "block_numbers",
        "block_numbers = block_table.flatten()[block_table_indices]",
        "Each token's physical KV block, read from its request's block-table row.",
        per_group="block_table block_numbers",
        group_formula="block_numbers_g{g} = block_table_g{g}.flatten()[block_table_indices] for each KV "
        "cache group g (group 0: block_numbers from block_table)",
        title=("Physical block numbers", "物理块号"),
        why_zh="每个 token 所在的物理 KV 块号，从其请求的块表行中读出。",
    )
    def _block_numbers(self) -> None:
        v = self.v
        idx = v["block_table_indices"]
        tables = self.input_batch.block_tables.block_tables
        v["block_numbers"] = tables[0].block_table_np.ravel()[idx]
        for g in range(1, len(tables)):  # every group's table has the same columns and block size
            v[f"block_numbers_g{g}"] = tables[g].block_table_np.ravel()[idx]

    @stage(
        "block_offsets",
        "positions",
        "block_offsets",
        "block_offsets = positions % block_size",
        "Each token's slot inside its block.",
        title=("Offsets inside the block", "块内偏移"),
        why_zh="每个 token 在其块内的槽位。",
    )
    def _block_offsets(self) -> None:
        v = self.v
        if self.block_shift is None:
            v["block_offsets"] = v["positions"] % self.block_size
        else:
            v["block_offsets"] = v["positions"] & (self.block_size - 1)

    @stage(
        "slot_mapping",
        "block_numbers block_offsets",
        "slot_mapping",
        "slot_mapping = block_numbers * block_size + block_offsets; "
        "slot_mapping[T:num_input_tokens] = -1 (PAD_SLOT_ID)",
        "The global KV-cache slot where each token's K and V are written. With CUDA graphs the "
        "token count T is padded to the next capture size, num_input_tokens: the padded tokens run "
        "through the graph's layers, but their slot is -1, which the cache-write kernel "
        "(reshape_and_cache_flash) skips, so they write nothing. Attention reads the first T "
        "entries only (`valid` in the trace).",
        views="slot_mapping",
        per_group="block_numbers slot_mapping",
        group_formula="slot_mapping_g{g} = block_numbers_g{g} * block_size + block_offsets for each KV "
        "cache group g (group 0: slot_mapping); slot_mapping_g{g}[T:num_input_tokens] = -1. Each "
        "group's layers write their K and V at their group's slots: a sliding-window group's table "
        "holds the null block 0 only below the window, where no token of this step is written",
        title=("Slot mapping", "槽位映射"),
        why_zh=(
            "槽位映射：每个 token 的 K/V 写入的全局 KV cache 槽位 = 物理块号 × block_size + 块内偏移。"
            "使用 CUDA Graph 时 token 数 T 被补齐到下一个捕获大小（num_input_tokens）：补齐的 token 也"
            "会跑过整个图，但槽位为 -1（PAD_SLOT_ID），写缓存的内核（reshape_and_cache_flash）会跳过它"
            "们。注意力只读前 T 个元素。"
        ),
    )
    def _slot_mapping(self) -> None:
        v = self.v
        T = v["T"]
        # with CUDA graphs the batch is padded to a capture size; padded slots are -1 (written nowhere)
        P = v["num_input_tokens"] = self.config.pad_for_cudagraph(T) if T else 0
        offsets, bs = v["block_offsets"], self.block_size
        for (numbers, name), buf in zip(self.slot_mapping_names, self.group_slot_mapping_np):
            out = buf[:T]
            np.multiply(v[numbers], bs, out=out, dtype=np.int64)
            np.add(out, offsets, out=out)
            if P > T:
                buf[T:P] = -1
                self.pad[name] = (T, None)
                out = buf[:P]
            v[name] = out

    @stage(
        "query_start_loc",
        "cu_num_tokens",
        "query_start_loc",
        "query_start_loc = [0, *cu_num_tokens]; query_start_loc[num_reqs + 1:] = cu_num_tokens[-1]",
        "Where each request's tokens start in the flat batch, plus the end: num_reqs + 1 entries, "
        "which FlashAttention's varlen kernel reads as cu_seqlens_q. The persistent buffer has "
        "max_num_reqs + 1 entries; past num_reqs it repeats the last value so it stays "
        "non-decreasing, as FlashAttention requires: a kernel launched over more (padded) requests "
        "sees empty queries there (`buffer` in the trace).",
        views="query_start_loc",
        title=("Query start locations", "查询起始位置"),
        why_zh=(
            "每个请求的 token 在扁平批次中的起始位置，再加上结束位置：共 num_reqs + 1 个元素，FlashAtte"
            "ntion 的 varlen 内核把它当作 cu_seqlens_q。持久缓冲区有 max_num_reqs + 1 个元素；num_reqs "
            "之后重复最后一个值，保持单调不减（FlashAttention 的要求）：那里补齐的请求 query 为空。"
        ),
    )
    def _query_start_loc(self) -> None:
        v = self.v
        n = v["num_reqs"]
        self.query_start_loc_np[0] = 0
        self.query_start_loc_np[1 : n + 1] = v["cu_num_tokens"]
        self.query_start_loc_np[n + 1 :] = v["T"]
        v["query_start_loc"] = self.query_start_loc_np[: n + 1]
        if n:
            self.pad["query_start_loc"] = (n + 1, self.query_start_loc_np)

    @stage(
        "seq_lens",
        "num_computed_tokens_cpu num_scheduled_tokens",
        "seq_lens",
        "seq_lens[:num_reqs] = num_computed_tokens_cpu + num_scheduled_tokens; seq_lens[num_reqs:] = 0",
        "Each request's length after this step, computed + scheduled tokens: attention reads this "
        "many keys through the request's block-table row (FlashAttention's seqused_k). Past "
        "num_reqs the buffer is 0, so a padded request attends to nothing.",
        views="seq_lens",
        title=("Sequence lengths", "序列长度"),
        why_zh=(
            "本步之后每个请求的序列长度：已计算 + 本步调度的 token 数。注意力通过该请求的块表行读取这么"
            "多个 key（FlashAttention 的 seqused_k）。num_reqs 之后缓冲区为 0，补齐的请求不读任何 key。"
        ),
    )
    def _seq_lens(self) -> None:
        v = self.v
        n = v["num_reqs"]
        np.add(
            self.input_batch.num_computed_tokens_cpu[:n], v["num_scheduled_tokens"], out=self.seq_lens_np[:n]
        )
        self.seq_lens_np[n:] = 0
        v["seq_lens"] = self.seq_lens_np[:n]
        if n:
            self.pad["seq_lens"] = (n, self.seq_lens_np)

    @stage(
        "logits_indices",
        "seq_lens num_tokens query_start_loc",
        "discard_request_mask logits_indices",
        "discard_request_mask = seq_lens < num_tokens; logits_indices = query_start_loc[1:] - 1",
        "The hidden state of each request's last scheduled token goes to the LM head. A request in "
        "the middle of a chunked prefill (seq_lens < num_tokens) is sampled too, for simplicity, "
        "and its token discarded (discard_request_mask).",
        views="num_tokens",
        title=("Logits indices", "logits 下标"),
        why_zh="每个请求最后一个 token 的输出用于采样；仍处于分块预填充中的请求丢弃本次采样。",
    )
    def _logits_indices(self) -> None:
        v = self.v
        n = v["num_reqs"]
        v["num_tokens"] = self.input_batch.num_tokens[:n]
        v["discard_request_mask"] = v["seq_lens"] < v["num_tokens"]
        v["logits_indices"] = np.subtract(v["query_start_loc"][1:], 1, dtype=np.int64)

    @stage(
        "attn_metadata",
        "num_scheduled_tokens seq_lens slot_mapping",
        "num_reqs total_num_scheduled_tokens num_input_tokens max_query_len max_seq_len",
        "num_input_tokens = pad_for_cudagraph(T); max_query_len = max(num_scheduled_tokens); "
        "max_seq_len = max(seq_lens); num_reqs is not padded",
        "Scalars the attention backend is built with: num_reqs, the real request count (with "
        "piecewise CUDA graphs attention runs outside the graph, so request counts are not padded; "
        "vLLM pads them only for FULL graphs of uniform decode batches, which pagedviz does not "
        "model), total_num_scheduled_tokens (num_actual_tokens), num_input_tokens (the token count "
        "padded to a capture size), the longest query and the longest sequence.",
        per_group="block_table slot_mapping",
        group_reads="block_table",
        group_formula="num_input_tokens = pad_for_cudagraph(T); max_query_len = max(num_scheduled_tokens); "
        "max_seq_len = max(seq_lens); num_reqs is not padded; one CommonAttentionMetadata per KV cache "
        "group g, these scalars shared, with block_table_tensor = block_table_g{g} and slot_mapping = "
        "slot_mapping_g{g} (group 0: block_table, slot_mapping); the layers of a sliding-window group "
        "attend to keys at positions > position - sliding_window; num_kv_cache_groups = G",
        title=("Attention metadata", "注意力元数据"),
        why_zh=(
            "构建注意力后端所需的标量：num_reqs 是真实的请求数（不补齐：分段 CUDA Graph 下注意力在图外"
            "执行；vLLM 只在 FULL 图的统一解码批次中补齐请求数，pagedviz 不模拟这种情况）、total_num_sc"
            "heduled_tokens（num_actual_tokens）、num_input_tokens（补齐到 CUDA Graph 捕获大小的 token "
            "数）、最长的 query 和最长的序列。"
        ),
    )
    def _attn_metadata(self) -> None:
        v = self.v
        n = v["num_reqs"]
        scalars = v["scalars"]
        scalars["num_reqs"] = n
        scalars["total_num_scheduled_tokens"] = v["T"]
        scalars["num_input_tokens"] = v["num_input_tokens"]
        # a[a.argmax()] is a.max() without the ufunc reduction's fixed cost (a third of it)
        q, s = v["num_scheduled_tokens"], v["seq_lens"]
        scalars["max_query_len"] = int(q[q.argmax()]) if n else 0
        scalars["max_seq_len"] = int(s[s.argmax()]) if n else 0
        if len(self.kv_cache_groups) > 1:
            scalars["num_kv_cache_groups"] = len(self.kv_cache_groups)
