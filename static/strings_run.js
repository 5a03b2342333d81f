// The run page's strings of its feature views, in English and 简体中文, added to strings.js's: the
// features a scenario turns on, a slot's writers and readers, Model Runner V2's slots and tables, the
// engine core's batch queue, and the KV cache groups (i18n.js imports this module once).

import { STRINGS } from "./strings.js";

// The feature views' strings (the what-if, async scheduling, speculative decoding, M-RoPE);
// features.js shows them.
Object.assign(STRINGS.en, {
  engine_vllm: "Computed by {version}'s own code.",
  engine_vllm_parts: "vLLM's scheduler decided this step (scheduled tokens, block ids, preemptions, the free queue) and vLLM's input preparation made its final arrays (input_ids, positions, slot_mapping, query_start_loc, seq_lens, the block table, logits_indices); the stage-by-stage intermediates, the tiny model's forward, its K/V and the sampled tokens are pagedviz's, whose runner replays vLLM's scheduler output.",
  engine_vllm_diff: "At this step pagedviz's replay computed other values for: {names} (shown: vLLM's).",
  features: "Inside this step", note: "Note", kv_shape: "KV cache tensor", kv_layers: "layers",
  index: "index", f_padding: "Padded buffers: what the kernels read",
  pad_real: "read", pad_padded: "padding",
  pad_q_real: "num_reqs + 1 = {n} entries: FlashAttention's cu_seqlens_q",
  pad_q_pad: "to max_num_reqs + 1: the last value repeated (non-decreasing), empty queries",
  pad_s_real: "num_reqs = {n}: FlashAttention's seqused_k (keys per request)",
  pad_s_pad: "0: a padded request attends to no key",
  pad_m_real: "T = {n} tokens: written to the KV cache, read by attention",
  pad_m_pad: "CUDA-graph padding to num_input_tokens = {n}: -1 = PAD_SLOT_ID, skipped by the cache-write kernel",
  f_whatif: "What if token_indices strided by K × block_size instead of M?",
  whatif_right: "right: positions + req_indices × M = {m}", whatif_wrong: "wrong: positions + req_indices × K × block_size = {k}",
  whatif_count: "{n} of {t} tokens gather the wrong id (marked ✗).", whatif_none: "No token differs in this step: only rows past 0 go wrong.",
  f_spec: "Speculative decoding: drafts, logits rows, verification",
  logits_row: "logits row", kind: "kind", target: "target", bonus: "bonus", draft: "draft",
  accepted: "accepted", rejected: "rejected", not_checked: "not checked", bonus_used: "bonus taken", bonus_unused: "unused",
  drafts: "drafts", generated: "generated", verdict: "verdict",
  spec_legend: "A request with k drafts schedules k + 1 tokens and reads k + 1 logits rows: k target rows verify the drafts in order, the last (bonus) row gives one more token only when every draft was accepted. The first rejected draft is replaced by the target's token; the drafts after it are not checked, and num_computed_tokens rolls back by the rejected ones.",
  f_async: "Async scheduling: decode input_ids filled on the device",
  prev_batch: "previous step's batch", placeholder: "placeholder", filled: "filled on the device",
  async_one_copy: "The batch kept its order: one slice copy, input_ids[:n] = prev_sampled_token_ids[:n].",
  async_scatter: "The batch changed order: a scatter, input_ids[sample_flattened_indices] = prev_sampled_token_ids[prev_common_req_indices].",
  async_cpu: "No request carries over from the last step: input_ids are the CPU's, no device fill.",
  f_mrope: "M-RoPE: mrope_positions (3 × T) beside positions", image_token: "image token",
  mrope_legend: "Text tokens are equal on all three rows (and to positions); image tokens take their (t, h, w) grid coordinates; the text after an image resumes at max + 1.",
  f_nano: "nano-vllm: what flash-attention receives", bt_passed: "block_tables passed", bt_none: "block_tables = None (no prefix-cache hit: attention reads this step's K/V)",
  bt_pad: "-1 pads each row of block_tables to the longest sequence's block count.",
  f_ascend: "Ascend attention state (first match wins) and its mask", as_state: "state", as_when: "when", as_mask: "mask",
  as_PrefillNoCache: ["no request has computed tokens (seq_lens == num_scheduled_tokens)", "one causal [max_seq_len, max_seq_len] mask for all requests"],
  as_DecodeOnly: ["every request schedules one token", "none (paged attention reads keys 0..seq_len-1)"],
  as_SpecDecoding: ["every request has one non-draft token and the drafter is MTP", "none here; a separate 2048 × 2048 spec_attn_mask"],
  as_ChunkedPrefill: ["chunked prefill is on", "the causal rows picked by positions: [T, max_seq_len]"],
  as_PrefillCacheHit: ["otherwise: chunked prefill off and some prefill over cached tokens", "a fixed causal [128, 128] mask"],
  as_decode_claim: "Document 000 says a decode token's mask row is all zeros. Its row (position seq_len - 1) is 0 over its own keys 0..seq_len-1; the 1s lie past seq_len, where the request has no keys, so it is literally all zeros only for the longest request.",
});
Object.assign(STRINGS.zh, {
  engine_vllm: "由 {version} 自己的代码计算。",
  engine_vllm_parts: "本步由 vLLM 的调度器决定（调度的 token、块号、抢占、空闲队列），最终数组（input_ids、positions、slot_mapping、query_start_loc、seq_lens、块表、logits_indices）由 vLLM 的输入准备代码生成；逐阶段的中间数组、小模型的前向计算、它的 K/V 和采样出的 token 来自 pagedviz，其 runner 重放 vLLM 的调度输出。",
  engine_vllm_diff: "本步 pagedviz 重放算出的值与 vLLM 不同：{names}（显示的是 vLLM 的值）。",
  features: "本步细节", note: "说明", kv_shape: "KV cache 张量", kv_layers: "层",
  index: "下标", f_padding: "补齐的缓冲区：各内核读取哪一部分",
  pad_real: "有效", pad_padded: "补齐",
  pad_q_real: "num_reqs + 1 = {n} 个元素：FlashAttention 的 cu_seqlens_q",
  pad_q_pad: "补到 max_num_reqs + 1：重复最后一个值（单调不减），query 为空",
  pad_s_real: "num_reqs = {n}：FlashAttention 的 seqused_k（每个请求的 key 数）",
  pad_s_pad: "0：补齐的请求不读任何 key",
  pad_m_real: "T = {n} 个 token：写入 KV cache，注意力读取",
  pad_m_pad: "CUDA Graph 补齐到 num_input_tokens = {n}：-1 = PAD_SLOT_ID，写缓存的内核跳过",
  f_whatif: "假如 token_indices 按 K × block_size 而不是 M 跨行？",
  whatif_right: "正确：positions + req_indices × M = {m}", whatif_wrong: "错误：positions + req_indices × K × block_size = {k}",
  whatif_count: "{t} 个 token 中有 {n} 个取到了错误的 ID（标 ✗）。", whatif_none: "本步没有 token 出错：只有第 0 行之后的请求会出错。",
  f_spec: "投机解码：草稿、logits 行与验证",
  logits_row: "logits 行", kind: "类型", target: "目标", bonus: "奖励", draft: "草稿",
  accepted: "接受", rejected: "拒绝", not_checked: "未检查", bonus_used: "采用奖励 token", bonus_unused: "未使用",
  drafts: "草稿", generated: "生成", verdict: "结果",
  spec_legend: "有 k 个草稿 token 的请求调度 k + 1 个 token，读取 k + 1 行 logits：前 k 行（目标行）依次验证草稿，最后一行（奖励行）只在全部草稿被接受时多给一个 token。第一个被拒绝的草稿由目标模型的 token 替换，其后的草稿不再检查，num_computed_tokens 按被拒绝的个数回退。",
  f_async: "异步调度：解码的 input_ids 在设备上填入",
  prev_batch: "上一步的批次", placeholder: "占位", filled: "在设备上填入",
  async_one_copy: "批次顺序未变：一次切片拷贝，input_ids[:n] = prev_sampled_token_ids[:n]。",
  async_scatter: "批次顺序改变：scatter，input_ids[sample_flattened_indices] = prev_sampled_token_ids[prev_common_req_indices]。",
  async_cpu: "没有请求延续自上一步：input_ids 就是 CPU 上的值，无需设备填入。",
  f_mrope: "M-RoPE：mrope_positions（3 × T）与 positions 对照", image_token: "图像 token",
  mrope_legend: "文本 token 在三行上相等（也等于 positions）；图像 token 取其 (t, h, w) 网格坐标；图像之后的文本从 max + 1 继续。",
  f_nano: "nano-vllm：flash-attention 收到什么", bt_passed: "传入 block_tables", bt_none: "block_tables = None（没有前缀缓存命中：注意力直接读取本步的 K/V）",
  bt_pad: "-1 把 block_tables 的每一行补齐到最长序列的块数。",
  f_ascend: "昇腾注意力状态（按顺序取第一个匹配）及其掩码", as_state: "状态", as_when: "条件", as_mask: "掩码",
  as_PrefillNoCache: ["没有请求计算过 token（seq_lens == num_scheduled_tokens）", "所有请求共用一个 [max_seq_len, max_seq_len] 因果掩码"],
  as_DecodeOnly: ["每个请求只调度一个 token", "无（分页注意力读取 key 0..seq_len-1）"],
  as_SpecDecoding: ["每个请求只有一个非草稿 token，且草稿模型为 MTP", "此处无；另有 2048 × 2048 的 spec_attn_mask"],
  as_ChunkedPrefill: ["开启了分块预填充", "按 positions 取出的因果掩码行：[T, max_seq_len]"],
  as_PrefillCacheHit: ["其他情况：关闭分块预填充，且有预填充覆盖已缓存的 token", "固定的 [128, 128] 因果掩码"],
  as_decode_claim: "文档 000 说解码 token 的掩码行全为 0。它的行（位置 seq_len - 1）在本请求自己的 key 0..seq_len-1 上为 0；值为 1 的位置都在 seq_len 之后，那里没有本请求的 key，所以只有最长的请求那一行才真正全为 0。",
});
// motion & embed: a slot's writer and readers, a block's references, the Δ of the previous step,
// links to a note, the embeddable figure
Object.assign(STRINGS.en, {
  ref_by: "referenced by", ref_by_none: "referenced by no row of this step",
  read_by: "read this step by", tokens_n: "tokens", cols_left_out: "columns left out here (the export links have every value)", read_by_none: "read by no query of this step",
  written_by: "written by", written_none: "not written yet", written_before: "not written since step",
  written_stale: "by a request that has since freed the block",
  delta_toggle: "Δ previous step", delta_was: "was", delta_new: "new this step",
  note_link: "Link to this note", note_linked: "linked note",
  embed_link: "Embed link", embed_step: "step", embed_help: "← / → step",
});
Object.assign(STRINGS.zh, {
  ref_by: "引用它的行", ref_by_none: "本步没有行引用它",
  read_by: "本步读取它的", tokens_n: "个 token", cols_left_out: "列未在此显示（导出链接含全部数值）", read_by_none: "本步没有查询读取它",
  written_by: "写入者", written_none: "尚未写入", written_before: "自该步起未写入：第",
  written_stale: "该请求之后已释放此块",
  delta_toggle: "Δ 上一步", delta_was: "原为", delta_new: "本步新加入",
  note_link: "链接到此说明", note_linked: "链接的说明",
  embed_link: "嵌入链接", embed_step: "步", embed_help: "← / → 切换步",
});
// Model Runner V2 views: the slot panel (slots.js), V2's tables (v2tables.js), and the runner each
// stage link names
Object.assign(STRINGS.en, {
  runner_v1: "V1 runner", runner_v2: "Model Runner V2",
  v2_slots_title: "State slots and batch order (Model Runner V2)",
  v2_batch_order: "Batch order (sorted this step)", v2_slots: "State slots", v2_slot: "slot", v2_holder: "held by",
  v2_this_step: "this step", v2_free: "free", v2_next_n: "handed out #{n}", v2_next: "next:",
  v2_freed: "freed", v2_added: "added", v2_kept: "kept its slot",
  v2_more_free: "{n} more free slots", v2_more_rows: "{n} more batch rows", v2_none_free: "none free",
  v2_free_order: "Free slots, in the order they are handed out",
  v2_mapping_legend: "Each arrow is idx_mapping[row] = slot: the batch is sorted afresh every step (decodes first, then prefill chunks by length), and row i reads its request's state (tokens, computed count, block table) from slot idx_mapping[i]. A new or resumed request takes the next free slot, from the top; a slot just freed is handed out first.",
  v2_slot_state: "Per-slot state (one column per state slot, [max_num_reqs]); struck: left by an earlier holder",
  v2_block_tables: "Per-slot block tables (block_tables, a row per state slot)",
  v2_input_block_tables: "Gathered block table (input_block_tables, a row per batch row: what attention reads)",
  v2_all_token_ids: "Tokens of each slot (all_token_ids, up to total_len)",
  v2_padding: "padding", v2_decode_next_stage: "a decode row: its input comes from last_sampled_tokens in the next stage",
});
Object.assign(STRINGS.zh, {
  runner_v1: "V1 模型运行器", runner_v2: "模型运行器 V2",
  v2_slots_title: "状态槽与批次顺序（模型运行器 V2）",
  v2_batch_order: "批次顺序（本步重新排序）", v2_slots: "状态槽", v2_slot: "状态槽", v2_holder: "占用者",
  v2_this_step: "本步", v2_free: "空闲", v2_next_n: "第 {n} 个分出", v2_next: "下一个：",
  v2_freed: "释放", v2_added: "加入", v2_kept: "保留原状态槽",
  v2_more_free: "另有 {n} 个空闲状态槽", v2_more_rows: "另有 {n} 个批次行", v2_none_free: "没有空闲状态槽",
  v2_free_order: "空闲状态槽（按分出顺序）",
  v2_mapping_legend: "每个箭头是 idx_mapping[行] = 状态槽：每一步批次都重新排序（先解码，再按分块长度升序排预填充），第 i 行从状态槽 idx_mapping[i] 读取其请求的状态（token、已计算数、块表）。新请求或恢复的请求从顶部取下一个空闲状态槽；刚释放的状态槽最先被再次分出。",
  v2_slot_state: "每个状态槽的状态（每列一个状态槽，[max_num_reqs]）；删除线：之前占用者留下的值",
  v2_block_tables: "按状态槽的块表（block_tables，每个状态槽一行）",
  v2_input_block_tables: "收集后的块表（input_block_tables，每个批次行一行：注意力读取的就是它）",
  v2_all_token_ids: "各状态槽的 token（all_token_ids，到 total_len 为止）",
  v2_padding: "补齐", v2_decode_next_stage: "解码行：它的输入在下一阶段取自 last_sampled_tokens",
});

// The engine core's batch queue on the step bar (async scheduling); enginecore.js shows them.
Object.assign(STRINGS.en, {
  ec_consumed: "update_from_output ← step {k}",
  ec_tip: "At the end of this step the engine core took step {k}'s sampled tokens out of its batch queue and handed them to the scheduler's update_from_output: with async scheduling each step is scheduled before the previous step's output arrives, so finishes and frees come a step after the token.",
  ec_waits: "update_from_output waits",
  ec_wait_tip: "The batch queue is not full: this step returns without calling update_from_output, so the next step is planned before this one's output reaches the scheduler.",
  ec_queue: "batch queue", ec_drain: "nothing scheduled: drains the queue", ec_finished: "finished in this update",
});
Object.assign(STRINGS.zh, {
  ec_consumed: "update_from_output ← 第 {k} 步",
  ec_tip: "这一步结束时，引擎核心从批次队列中取出第 {k} 步的采样结果，交给调度器的 update_from_output：异步调度时每一步都在上一步的输出到达之前被调度，所以请求完成和块释放比 token 晚一步。",
  ec_waits: "update_from_output 暂不执行",
  ec_wait_tip: "批次队列未满：这一步不调用 update_from_output 就返回，所以下一步会在这一步的输出到达调度器之前被规划。",
  ec_queue: "批次队列", ec_drain: "未调度：只排空队列", ec_finished: "本次 update 中完成",
});

// KV cache groups on the run page (issue 38): the block table of each group, the pool by group and
// owner, the null block and the sliding window (groups.js, grouptables.js, poolgroups.js, windowrow.js)
Object.assign(STRINGS.en, {
  grp_block_tables: "Block tables, one per KV cache group", grp_group: "group", grp_layer: "layer", grp_layers: "layers",
  grp_full: "full attention", grp_sliding: "sliding window ({w} tokens)", grp_full_short: "full", grp_sliding_short: "sliding {w}",
  grp_window_short: "sliding window", m_group: "KV cache group", grp_pool_legend: "KV pool colours",
  null_block_what: "null block: placeholder for blocks a sliding window dropped",
  mark_moved: "moved to another KV cache group since the previous step", grp_moved_title: "moved: {from} → {to}",
  win_title: "Token rows in {group}: the positions it still holds, the last token's window outlined",
  win_held: "held", win_in: "in the window of the last token", win_dropped: "dropped (null block)",
  win_note: "window {lo}–{hi} · {n} dropped",
  grp_runner_keeps: "the runner's {name} still holds block {b} here: vLLM's runner is not told of a window's drops, and sliding-window attention no longer reads it",
});
Object.assign(STRINGS.zh, {
  grp_block_tables: "块表：每个 KV cache 组一张", grp_group: "组", grp_layer: "层", grp_layers: "层",
  grp_full: "全注意力", grp_sliding: "滑动窗口（{w} 个 token）", grp_full_short: "全注意力", grp_sliding_short: "滑动 {w}",
  grp_window_short: "滑动窗口", m_group: "KV cache 组", grp_pool_legend: "KV 块池的颜色",
  null_block_what: "空块（null block）：滑动窗口丢弃的块的占位",
  mark_moved: "自上一步起转到另一个 KV cache 组", grp_moved_title: "转移：{from} → {to}",
  win_title: "{group} 中各请求的 token 行：仍持有的位置，框出最后一个 token 的窗口",
  win_held: "仍持有", win_in: "最后一个 token 的窗口内", win_dropped: "已丢弃（空块）",
  win_note: "窗口 {lo}–{hi} · 丢弃 {n} 个",
  grp_runner_keeps: "runner 的 {name} 在这里仍是块 {b}：vLLM 的 runner 不会得知窗口丢弃了哪些块，滑动窗口注意力也不再读取它",
});

// KV cache groups taught (issue 38, point 4): the contrast "full attention vs sliding window, same
// requests" and the memory line of its compare view (comparememory.js)
Object.assign(STRINGS.en, {
  cmp_sliding: "Full attention vs sliding window, same requests: the memory each holds",
  cmp_why_layer_types: "A full-attention layer keeps the K and V of every token; a sliding-window layer reads only the last window's tokens, so its KV cache group gives the blocks that fall out of the window back to the pool (the null block takes their places in its block table). With several groups each block serves one group's layers, so the memory is counted in blocks of one layer.",
  mem_h: "Memory:", mem_step: "at step {n}, in blocks of one layer ({bs} tokens of one layer's K and V), A holds {a} and B {b}.",
  mem_side: "{n} ({blocks} blocks × {layers} {unit})", mem_layer: "layer", mem_layers_unit: "layers",
  mem_peak: "At the peak: A {a}, B {b}.", mem_saves: "The sliding window ({side}) saves {d} blocks of one layer ({pct}%).",
  mem_costs: "The sliding window ({side}) holds {d} more ({pct}%).",
  mem_layers: "layers", mem_sliding: "sliding window", mem_full: "full attention",
});
Object.assign(STRINGS.zh, {
  cmp_sliding: "全注意力 vs 滑动窗口，相同请求：各占多少显存",
  cmp_why_layer_types: "全注意力层保留每个 token 的 K 和 V；滑动窗口层只读最近一个窗口内的 token，所以它的 KV cache 组把落出窗口的块交还给块池（空块在它的块表中顶替这些位置）。有多个组时，每个块只服务一个组的层，所以显存按单层块计。",
  mem_h: "显存：", mem_step: "第 {n} 步按单层块计（一块装 {bs} 个 token 的一层 K 和 V），A 占 {a}，B 占 {b}。",
  mem_side: "{n}（{blocks} 个块 × {layers} {unit}）", mem_layer: "层", mem_layers_unit: "层",
  mem_peak: "峰值：A {a}，B {b}。", mem_saves: "滑动窗口（{side}）省下 {d} 个单层块（{pct}%）。",
  mem_costs: "滑动窗口（{side}）多占 {d} 个单层块（{pct}%）。",
  mem_layers: "各层", mem_sliding: "滑动窗口", mem_full: "全注意力",
  // the landing form's help of the scenario's layer fields (core/scenario.py)
  fh_layer_types: "各层的注意力，按顺序：\"full_attention\" 或 \"sliding_attention\"（Hugging Face 的 layer_types）；null：每层都是全注意力，一个 KV cache 组。vLLM 为每个 KV cache 组规划一张块表（core/kv_groups.py）；model.num_layers 随列表而定",
  fh_sliding_window: "sliding_attention 层关注的 token 数（含查询自身）；有 sliding_attention 层时必填",
  fh_scheduling_policy: "仅 vllm 风格：fcfs（先来先服务）或 priority（vLLM 的 --scheduling-policy：等待队列按每个请求的 (priority, arrival) 排序，抢占时选 (priority, arrival) 最大的运行请求，而不是最后一个）",
});
