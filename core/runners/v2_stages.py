"""The stages of Model Runner V2's `prepare_inputs` (vllm/v1/worker/gpu/model_runner.py:1388-1593),
one method each, with the semantics of its Triton kernels computed in vectorised numpy: the sort and
`idx_mapping`, the CUDA-graph dispatch, `query_start_loc`, `seq_lens`, positions, the input ids from
the per-slot state, `logits_indices`, the gathered block table and `slot_mapping`. `ModelRunnerV2`
(v2.py) holds the state slots and buffers; this mixin only declares what it reads of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pagedviz.core.runners.stages import stage
from pagedviz.core.scenario_parts import EngineConfig

PAD_SLOT_ID = -1


class V2Stages:
    """The stage methods of V2's prepare_inputs; `ModelRunnerV2` supplies the state below."""

    config: EngineConfig
    v: dict[str, Any]
    pad: dict[str, tuple[int, np.ndarray | None]]
    req_id_to_index: dict[str, int]
    row_req_ids: list[str]
    block_size: int
    block_shift: int | None
    max_model_len: int
    max_num_reqs: int
    max_num_blocks: int
    num_spec: int
    dirty_rows: int
    dirty_tokens: int  # slot_mapping entries written past which the buffers hold PAD_SLOT_ID
    slot_mapping_names: tuple[str, ...]
    all_token_ids: np.ndarray
    prefill_len: np.ndarray
    num_computed_tokens: np.ndarray
    num_computed_tokens_np: np.ndarray
    last_sampled_tokens: np.ndarray
    block_tables: np.ndarray
    num_blocks: np.ndarray
    input_block_tables: np.ndarray
    group_block_tables: list[np.ndarray]
    group_num_blocks: np.ndarray
    group_input_block_tables: list[np.ndarray]
    group_slot_mapping_np: list[np.ndarray]
    sliding_window_reach: list[int]
    query_start_loc_np: np.ndarray
    seq_lens_np: np.ndarray
    input_ids_np: np.ndarray
    positions_np: np.ndarray
    slot_mapping_np: np.ndarray
    arange_np: np.ndarray
    arange_i32: np.ndarray
    block_cols: np.ndarray
    _combine_drafts: Callable[[np.ndarray], None]  # V2SpecDecode (v2_spec.py)

    @stage(
        "idx_mapping",
        "num_scheduled_tokens scheduled_spec_decode_tokens",
        "idx_mapping num_scheduled_tokens",
        "req_ids = sorted(num_scheduled_tokens, key=(no drafts, n != decode_query_len, n)); "
        "idx_mapping = [req_id_to_index[r] for r in req_ids]",
        "gather_batch_req_state / sort_batch_req_ids (model_runner.py:1306-1386, 2507-2519): every "
        "step the batch is re-sorted, requests with drafts first, then decodes (one token), then "
        "prefill chunks by ascending length; ties keep the scheduler's order. idx_mapping links each "
        "batch row to the request's state slot; every per-request read of the kernels goes through it.",
        title=("Sort the batch, map rows to slots", "批次排序，行映射到状态槽"),
        why_zh=(
            "每一步都对被调度的请求排序：先是带草稿的请求，再是解码（一个 token），最后按分块长度升序排"
            "预填充；长度相同的保持调度器的顺序。解码和短分块排在前面，批次形状更规整（统一解码的批次可"
            "以重放 CUDA Graph）。idx_mapping[i] 是批次第 i 行的状态槽：内核对每个请求的读取都经过它。"
        ),
    )
    def _idx_mapping(self) -> None:
        v = self.v
        n = v["scheduler_num_scheduled"]
        drafts = v["scheduler_num_draft"]
        decode_query_len = 1 + self.config.num_speculative_tokens
        # np.lexsort is stable and sorts by its last key first (the drafts key only when some have)
        some_drafts = self.config.num_speculative_tokens and drafts.any()
        keys = (n, n != decode_query_len, drafts == 0) if some_drafts else (n, n != decode_query_len)
        order = np.lexsort(keys)
        ids = v["scheduled_req_ids"]
        self.row_req_ids = rows = [ids[i] for i in order.tolist()]
        v["num_scheduled_tokens"] = n[order]
        v["batch_num_draft"] = drafts[order] if some_drafts else drafts  # all zero: any order
        v["idx_mapping"] = idx = np.fromiter(
            map(self.req_id_to_index.__getitem__, rows), dtype=np.int64, count=len(rows)
        )
        v["num_reqs"] = len(rows)
        v["T"] = int(np.add.reduce(n))
        # the slots' state every later stage reads, gathered once (internal, not traced)
        v["slot_num_computed"] = self.num_computed_tokens[idx]
        v["slot_prefill_len"] = self.prefill_len[idx]
        v["is_prefilling"] = v["slot_num_computed"] < v["slot_prefill_len"]

    @stage(
        "cudagraph_dispatch",
        "num_scheduled_tokens cudagraph_capture_sizes",
        "num_reqs_padded num_tokens_after_padding cudagraph_mode",
        "uniform decode (every row 1 token, each a decode or a one-token prefill chunk over existing "
        "context) of q = 1 + num_speculative_tokens tokens a row, and a decode graph of "
        "round_up(s, q) tokens (s a capture size; at most max_num_reqs * q and the largest size) "
        "with at least T: FULL, num_tokens_after_padding = the smallest such, num_reqs_padded = it / q; "
        "else the smallest capture size >= T: PIECEWISE, num_reqs_padded = num_reqs; else NONE",
        "CudaGraphManager.dispatch (cudagraph_utils.py:523-553) picks a captured graph. A full decode "
        "graph replays a fixed number of requests, so the request count is padded: padded rows get "
        "empty queries, seq_len 0, a zero block-table row and slot -1. A piecewise graph pads only the "
        "tokens (attention runs outside it). With no capture sizes the step runs eagerly. A prefill "
        "chunk of one token after the first runs as a decode (gather_batch_req_state, "
        "model_runner.py:1356-1368), so it does not keep the batch off the decode graph. With "
        "speculative decoding the decode graphs replay q tokens a request (the last sampled token and "
        "its drafts), so their sizes are rounded up to multiples of q (_init_candidates, "
        "cudagraph_utils.py:256-393).",
        title=("Pick a CUDA graph", "选择 CUDA Graph"),
        why_zh=(
            "CudaGraphManager.dispatch 选择一个已捕获的图。统一解码批次的完整图重放固定数量的请求，所以"
            "请求数也要补齐（补齐的行：query 为空、seq_len 为 0、块表行为 0、槽位为 -1）；分段图只补齐 "
            "token。没有捕获大小时本步直接执行。"
        ),
    )
    def _cudagraph_dispatch(self) -> None:
        v = self.v
        R, T = v["num_reqs"], v["T"]
        sizes = self.config.cudagraph_capture_sizes or ()
        mode, R_pad, T_pad = "NONE", R, T
        q = 1 + self.num_spec  # decode_query_len
        uniform = bool(sizes) and R > 0 and R * q == T
        if uniform:  # the per-row test only when a decode graph could apply
            n, computed = v["num_scheduled_tokens"], v["slot_num_computed"]
            new = n - v["batch_num_draft"]  # placeholder drafts may pad a one-token chunk
            runs_as_decode = ~v["is_prefilling"] | ((new == 1) & (computed > 0))
            uniform = bool(runs_as_decode.all())
        full: list[int] = []
        if uniform:
            top = min(self.max_num_reqs * q, max(sizes))
            full = sorted({g for g in (-(-s // q) * q for s in sizes) if T <= g <= top})
        if full:
            mode, R_pad, T_pad = "FULL", full[0] // q, full[0]
        else:
            fits = [s for s in sizes if s >= T]
            if fits and T:
                mode, T_pad = "PIECEWISE", fits[0]
        v["num_reqs_padded"], v["num_tokens_after_padding"] = R_pad, T_pad
        v["scalars"].update(cudagraph_mode=mode, num_reqs_padded=R_pad, num_tokens_after_padding=T_pad)

    @stage(
        "query_start_loc",
        "num_scheduled_tokens",
        "query_start_loc",
        "query_start_loc[0] = 0; query_start_loc[1:R+1] = cumsum(n); query_start_loc[R+1:] = T",
        "Where each batch row's tokens start (model_runner.py:1463-1470). The whole max_num_reqs + 1 "
        "buffer is written: past the real rows it repeats T, non-decreasing as FlashAttention needs, "
        "so padded rows have empty queries.",
        views="query_start_loc",
        title=("Query start locations", "查询起始位置"),
        why_zh=(
            "每个批次行的 token 从哪里开始：按排序后的顺序对 num_scheduled_tokens 求前缀和。整个 max_nu"
            "m_reqs + 1 的缓冲区都被写入：真实行之后重复 T，保持 FlashAttention 要求的单调不减，补齐的"
            "行 query 为空。"
        ),
    )
    def _query_start_loc(self) -> None:
        v = self.v
        R = v["num_reqs"]
        q = self.query_start_loc_np
        q[0] = 0
        np.add.accumulate(v["num_scheduled_tokens"], out=q[1 : R + 1])  # np.cumsum, without its wrapper
        q[R + 1 :] = v["T"]
        v["query_start_loc"] = q[: R + 1]
        if R:
            self.pad["query_start_loc"] = (R + 1, q)
        v["cu_num_tokens"] = q[1 : R + 1].astype(np.int64)

    @stage(
        "seq_lens",
        "idx_mapping num_computed_tokens query_start_loc",
        "seq_lens",
        "seq_lens[i] = num_computed_tokens[idx_mapping[i]] + n[i]; seq_lens[R:] = 0",
        "prepare_pos_seq_lens (input_batch.py:356-411): each row's length after this step, from the "
        "runner's own num_computed_tokens of its slot (the device's, not the scheduler's). An extra "
        "program of the kernel zeroes the rest of the buffer, so padded rows attend to nothing.",
        views="seq_lens",
        title=("Sequence lengths", "序列长度"),
        why_zh=(
            "prepare_pos_seq_lens：每行在本步之后的长度，从它的状态槽读取：num_computed_tokens[idx_mapp"
            "ing[i]] + num_scheduled_tokens[i]。这个计数是运行器自己在设备上的（由 post_update 推进），"
            "不是调度器的。缓冲区其余部分清零。"
        ),
    )
    def _seq_lens(self) -> None:
        v = self.v
        R = v["num_reqs"]
        np.add(v["slot_num_computed"], v["num_scheduled_tokens"], out=self.seq_lens_np[:R])
        self.seq_lens_np[R:] = 0
        v["seq_lens"] = self.seq_lens_np[:R]
        if R:
            self.pad["seq_lens"] = (R, self.seq_lens_np)

    @stage(
        "positions",
        "idx_mapping num_computed_tokens query_start_loc",
        "positions",
        "positions[qsl[i] : qsl[i+1]] = num_computed_tokens[idx_mapping[i]] + arange(n[i])",
        "prepare_pos_seq_lens again: a token's position is its slot's computed count plus its offset "
        "in the row. V2 builds positions only on the device; the CPU never holds them.",
        views="positions",
        title=("Token positions", "token 位置"),
        why_zh=(
            "同一个内核：token 的位置是其状态槽的 num_computed_tokens 加上它在本行内的偏移。V2 只在设备"
            "上生成 positions。"
        ),
    )
    def _positions(self) -> None:
        v = self.v
        T = v["T"]
        n = v["num_scheduled_tokens"]
        # each row's computed count less its start, once per token, plus the token's index
        base = (v["slot_num_computed"].astype(np.int64) - (v["cu_num_tokens"] - n)).repeat(n)
        out = self.positions_np[:T]
        np.add(base, self.arange_np[:T], out=out)
        # the slot of each token (internal: V2 has no such array)
        v["token_slots"] = v["idx_mapping"].repeat(n)
        v["positions"] = out

    @stage(
        "prefill_inputs",
        "idx_mapping all_token_ids num_computed_tokens prefill_len query_start_loc",
        "input_ids",
        "for rows with num_computed_tokens[j] < prefill_len[j] (j = idx_mapping[i]): "
        "input_ids[qsl[i] : qsl[i+1]] = all_token_ids[j, nc : nc + n[i]]",
        "prepare_prefill_inputs (input_batch.py:279-353): a prefilling row reads its tokens from its "
        "slot's all_token_ids, which holds the prompt (and, for a resumed request, the outputs so "
        "far). Decode rows are left for the next stage.",
        views="input_ids",
        title=("Prefill input ids from the slot", "从状态槽取预填充输入"),
        why_zh=(
            "prepare_prefill_inputs：处于预填充的行从其状态槽的 all_token_ids 复制 token，那里保存着提"
            "示（对恢复的请求，还有目前为止的输出）。解码行留给下一阶段。"
        ),
    )
    def _prefill_inputs(self) -> None:
        v = self.v
        T = v["T"]
        slots, pos = v["token_slots"], v["positions"]
        out = self.input_ids_np[:T]
        # one gather for every token, as cheap as a masked one: a decode row's tokens are then
        # overwritten by combine_sampled_and_draft_tokens, the next stage, before anything reads
        # them (the trace records input_ids once, as that stage leaves them)
        np.take(self.all_token_ids.reshape(-1), slots * self.max_model_len + pos, out=out)
        v["input_ids"] = out

    @stage(
        "combine_sampled_and_draft_tokens",
        "idx_mapping seq_lens prefill_len last_sampled_tokens draft_tokens query_start_loc cu_num_logits",
        "input_ids cu_num_logits logits_indices",
        "num_logits[i] = cu_num_logits[i+1] - cu_num_logits[i] (1 without drafts); "
        "logits_indices[cu_num_logits[i] + j] = qsl[i+1] - num_logits[i] + j; for rows with "
        "seq_lens[i] > prefill_len[j]: input_ids[qsl[i+1] - num_logits[i]] = last_sampled_tokens[j] "
        "(if that position is past the prompt) and input_ids[qsl[i+1] - d + k] = draft_tokens[j, k] "
        "for the row's d = num_logits[i] - 1 drafts",
        "combine_sampled_and_draft_tokens (input_batch.py:414-513): a decode row's input is the token "
        "its slot sampled last step, kept on the device (last_sampled_tokens): the CPU never waits "
        "for it, which is what lets the scheduler run a step ahead. A row that verifies drafts is "
        "[last sampled, d1 .. dk]: the drafts come from the slot's draft_tokens, which the "
        "speculator wrote on the worker after the last step. The last num_logits tokens of each row "
        "give the logits: one per row without drafts, one per draft plus the bonus with them.",
        views="cu_num_logits",  # without drafts, a view of a persistent arange
        title=("Decode input ids, logits indices", "解码输入与 logits 下标"),
        why_zh=(
            "解码行的输入是其状态槽上一步采样出的 token，保存在设备上（last_sampled_tokens），CPU 无需"
            "等待它。每行最后一个 token 给出 logits：logits_indices = query_start_loc[1:] - 1。验证草稿"
            "的行是 [上次采样的 token, 槽位的 draft_tokens]，其最后 d + 1 个 token 给出 logits。"
        ),
    )
    def _combine_sampled(self) -> None:
        v = self.v
        R = v["num_reqs"]
        idx = v["idx_mapping"]
        qend = v["cu_num_tokens"]
        prefill_len = v["slot_prefill_len"]
        decoding = v["seq_lens"] > prefill_len
        if "num_draft_tokens" not in v:
            v["cu_num_logits"] = self.arange_i32[: R + 1]
            last = qend - 1
            v["logits_indices"] = last
            if decoding.any():
                v["input_ids"][last[decoding]] = self.last_sampled_tokens[idx[decoding]]
        else:
            self._combine_drafts(decoding)
        # a partial prefill samples nothing (get_num_sampled_and_rejected)
        v["discard_request_mask"] = v["seq_lens"] < prefill_len

    @stage(
        "gather_block_tables",
        "idx_mapping block_tables num_blocks",
        "input_block_tables",
        "for b < R: input_block_tables[b, :num_blocks[j]] = block_tables[j, :num_blocks[j]] "
        "(j = idx_mapping[b]); rows R..max(R_pad, rows used last step) zeroed",
        "BlockTables.gather_block_tables (block_table.py:160-211): the attention kernel reads a "
        "block table in batch order, so each step copies the batch's slot rows into a persistent "
        "input buffer. Only a row's own blocks are copied: cells past them keep what an earlier step "
        "left there (stale, never read: attention reads cdiv(seq_len, block_size) entries).",
        views="input_block_tables",
        per_group="block_tables num_blocks input_block_tables",
        group_reads="num_computed_tokens",
        group_formula="for each KV cache group g (group 0 unsuffixed), for b < R, j = idx_mapping[b]: "
        "input_block_tables_g{g}[b, :num_blocks_g{g}[j]] = block_tables_g{g}[j, :num_blocks_g{g}[j]], "
        "and for a sliding-window group its first max(num_computed_tokens[j] - (sliding_window - 1), 0) "
        "// block_size entries = 0 (the null block); rows R..max(R_pad, rows used last step) zeroed",
        title=("Gather the block table", "收集块表"),
        why_zh=(
            "注意力内核按批次顺序读取块表，所以每一步都通过 idx_mapping 把每行对应状态槽的 block_tables"
            " 行（其 num_blocks 个元素）复制到 input_block_tables。超出本行自身块的单元格保留之前某一步"
            "留下的值：已过期，但从不被读取（注意力只读 cdiv(seq_len, block_size) 个元素）。"
        ),
    )
    def _gather_block_tables(self) -> None:
        v = self.v
        R, R_pad = v["num_reqs"], v["num_reqs_padded"]
        idx = v["idx_mapping"]
        rows = max(R_pad, self.dirty_rows)
        self.dirty_rows = R
        for g, out in enumerate(self.group_input_block_tables):
            nb = self.group_num_blocks[g, idx]
            own = self.block_cols < nb[:, None]
            gathered = np.take(self.group_block_tables[g], idx, axis=0)
            reach = self.sliding_window_reach[g]
            if reach:
                # entries wholly below the window of the row's first scheduled token are nulled: the
                # sliding-window manager may have freed them already (gather_block_tables'
                # MASK_SLIDING_WINDOW)
                num_null = np.maximum(v["slot_num_computed"] - reach, 0) // self.block_size
                gathered[self.block_cols < num_null[:, None]] = 0
            np.copyto(out[:R], gathered, where=own)
            out[R:rows] = 0
            v["input_block_tables" + (f"_g{g}" if g else "")] = out[:R_pad]

    @stage(
        "slot_mappings",
        "idx_mapping block_tables positions query_start_loc",
        "slot_mapping is_padding",
        "slot_mapping[t] = block_tables[idx_mapping[i], positions[t] // block_size] * block_size + "
        "positions[t] % block_size; slot_mapping[T:] = -1",
        "compute_slot_mappings (block_table.py:232-263): where each token's K and V are written, read "
        "from the persistent per-slot table through idx_mapping (not from the gathered one). The last "
        "program pads the rest of the buffer with -1 from the real token count, so the padded tokens "
        "of a CUDA graph write nowhere.",
        views="slot_mapping",
        per_group="block_tables slot_mapping",
        group_formula="for each KV cache group g (group 0 unsuffixed): slot_mapping_g{g}[t] = "
        "block_tables_g{g}[idx_mapping[i], positions[t] // block_size] * block_size + positions[t] % "
        "block_size; slot_mapping_g{g}[T:] = -1 (the kernel's grid is (num_kv_cache_groups, R + 1))",
        title=("Slot mapping", "槽位映射"),
        why_zh=(
            "每个 token 的 K/V 写到哪里：block_tables[idx_mapping[行], position // block_size] * block_"
            "size + position % block_size，读取的是持久的按状态槽的块表（不是收集后的那张）。真实 token"
            " 之后缓冲区为 -1，CUDA Graph 的补齐不会写入任何位置。"
        ),
    )
    def _slot_mappings(self) -> None:
        v = self.v
        T, P = v["T"], v["num_tokens_after_padding"]
        bs = self.block_size
        pos = v["positions"]
        shift = self.block_shift
        cell = v["token_slots"] * self.max_num_blocks
        if shift is None:
            cell += pos // bs
            offsets = pos % bs
        else:  # a power-of-two block size: shifts and masks
            cell += pos >> shift
            offsets = pos & (bs - 1)
        # the buffers hold PAD_SLOT_ID past the tokens written last step: only those are padded again
        dirty = max(self.dirty_tokens, P)
        self.dirty_tokens = T
        for name, table, out in zip(
            self.slot_mapping_names, self.group_block_tables, self.group_slot_mapping_np
        ):
            blocks = np.take(table.reshape(-1), cell)
            slots = out[:T]
            if shift is None:
                np.multiply(blocks, bs, out=slots, dtype=np.int64)
                slots += offsets
            else:
                np.left_shift(blocks, shift, out=slots, dtype=np.int64)
                slots |= offsets
            out[T:dirty] = PAD_SLOT_ID
            v[name] = out[:P]
            self.pad[name] = (T, None)
        v["is_padding"] = self.arange_np[:P] >= T

    @stage(
        "attn_metadata",
        "num_scheduled_tokens seq_lens",
        "num_reqs total_num_scheduled_tokens max_query_len max_seq_len",
        "max_query_len = max(n); max_seq_len = max(num_computed_tokens_np[idx_mapping] + n)",
        "The scalars the attention metadata is built with. max_seq_len comes from the CPU's upper "
        "bound (the scheduler's num_computed_tokens plus the scheduled tokens), since the device's "
        "count is not read back (model_runner.py:1535-1542).",
        per_group="input_block_tables slot_mapping",
        group_reads="input_block_tables slot_mapping",
        group_formula="max_query_len = max(n); max_seq_len = max(num_computed_tokens_np[idx_mapping] + n); "
        "one CommonAttentionMetadata per KV cache group g (build_attn_metadata), these scalars shared, "
        "with block_table_tensor = input_block_tables_g{g} and slot_mapping = slot_mapping_g{g} (group "
        "0 unsuffixed); the layers of a sliding-window group attend to keys at positions > position - "
        "sliding_window; num_kv_cache_groups = G",
        title=("Attention metadata", "注意力元数据"),
        why_zh=(
            "构建注意力所需的标量：真实的请求数和 token 数、最长的 query，以及 max_seq_len。max_seq_len"
            " 取 CPU 上的上界（调度器的已计算数加上本步调度的 token 数），因为设备上的计数不会读回。"
        ),
    )
    def _attn_metadata(self) -> None:
        v = self.v
        R = v["num_reqs"]
        s = v["scalars"]
        s["num_reqs"] = R
        s["total_num_scheduled_tokens"] = v["T"]
        n = v["num_scheduled_tokens"]
        upper = self.num_computed_tokens_np[v["idx_mapping"]]
        upper += n
        # a[a.argmax()] is a.max() without the ufunc reduction's fixed cost (a third of it)
        s["max_query_len"] = int(n[n.argmax()]) if R else 0
        s["max_seq_len"] = int(upper[upper.argmax()]) if R else 0
        s["num_input_tokens"] = v["num_tokens_after_padding"]
        if len(self.group_block_tables) > 1:
            s["num_kv_cache_groups"] = len(self.group_block_tables)
