// Every string of the pages in English and 简体中文, and each stage's title and explanation.
// The Chinese follows the seed documents' own terms (块表, 槽位映射, 预填充, ...).

export const STRINGS = {
  en: {
    tagline: "Watch a vLLM-style engine prepare model inputs over a paged KV cache, step by step.",
    presets: "Presets", follows: "follows", open: "Open", editor: "Scenario editor",
    editor_hint: "Change the engine config and the requests; the server checks the scenario as you type.",
    config: "Engine config", requests: "Requests", add_request: "Add request", remove: "Remove",
    run: "Run", upload: "Upload JSON", download: "Download JSON", valid: "Valid scenario",
    stages: "Stages", request_level: "Request level", token_level: "Token level", system_level: "System level",
    step: "Step", prev: "Previous step", next: "Next step", first: "First step", last: "Last step",
    play: "Play", pause: "Pause", speed: "Speed", copy_link: "Copy link", copied: "Link copied",
    present: "Present", leave_present: "Leave presentation", help: "Keyboard help", lang: "Language",
    edit_scenario: "Edit scenario", loading: "Loading…", idle_step: "Idle step: nothing could be scheduled.",
    kind_idle: "idle", kind_prefill: "prefill", kind_decode: "decode", kind_mixed: "mixed",
    preempted: "preempted", finished: "finished", new_reqs: "new", resumed: "resumed", moved: "moved",
    new_blocks: "new blocks", table: "Table", heatmap: "Heatmap", png: "PNG", export: "Export arrays",
    token_ids_cpu: "Token-id table (token_ids_cpu)", block_table: "Block table (block_table)",
    block_tables: "Block tables (block_tables)", kv_cache: "KV cache physical blocks",
    attn_mask: "Attention mask (attn_mask, 1 = masked)", metric: "Colour by",
    m_owner: "owner request", m_ref_cnt: "ref count", m_written: "written slots", m_free: "free-queue order",
    row: "row", req: "request", token: "token", formula: "Formula", with_values: "With the selected values",
    source: "Engine source", explanation: "What happens", selection: "Selection",
    sel_token: "token", sel_position: "position", sel_slot: "slot", sel_block: "block",
    none_selected: "Hover or select a token, a request or a block.",
    device: "device", prepare_us: "prepare_inputs", paged_dense: "paged = dense",
    help_text: "← / → step · ↑ / ↓ stage · space play/pause · Esc clear selection · ? this help",
    truncated: "The run was cut short at max_steps.", free: "free", not_run_yet: "later stage",
    unknown_run: "Could not load the run", close: "Close", null_block: "null block", not_in_batch: "not in this step's batch", shared_block: "shared (prefix cache)", computing: "Computing the run: step {n} of at most {max} ({t} s)", more: "more",
    kv_note_cap: "showing the first {n} blocks", default: "default", docs: "docs", mirrors: "mirrors",
    ax_position: "position", ax_row: "row", ax_logical: "logical block", ax_physical: "physical block",
    ax_slot: "slot in block", ax_key: "key position", more_tokens: "{n} more tokens: use the export links",
  },
  zh: {
    tagline: "逐步观察类 vLLM 引擎如何基于分页 KV cache 为模型前向准备输入。",
    presets: "预设场景", follows: "对应文档", open: "打开", editor: "场景编辑器",
    editor_hint: "修改引擎配置和请求；输入时服务器会实时校验场景。",
    config: "引擎配置", requests: "请求", add_request: "添加请求", remove: "删除",
    run: "运行", upload: "上传 JSON", download: "下载 JSON", valid: "场景有效",
    stages: "阶段", request_level: "请求级", token_level: "Token 级", system_level: "系统级",
    step: "步", prev: "上一步", next: "下一步", first: "第一步", last: "最后一步",
    play: "播放", pause: "暂停", speed: "速度", copy_link: "复制链接", copied: "链接已复制",
    present: "演示模式", leave_present: "退出演示", help: "键盘帮助", lang: "语言",
    edit_scenario: "编辑场景", loading: "加载中…", idle_step: "空闲步：没有可调度的请求。",
    kind_idle: "空闲", kind_prefill: "预填充", kind_decode: "解码", kind_mixed: "混合",
    preempted: "被抢占", finished: "已完成", new_reqs: "新请求", resumed: "恢复", moved: "行移动",
    new_blocks: "新分配的块", table: "表格", heatmap: "热力图", png: "PNG", export: "导出数组",
    token_ids_cpu: "Token ID 表 (token_ids_cpu)", block_table: "块表 (block_table)",
    block_tables: "块表 (block_tables)", kv_cache: "KV cache 物理块",
    attn_mask: "注意力掩码 (attn_mask，1 = 屏蔽)", metric: "着色依据",
    m_owner: "所属请求", m_ref_cnt: "引用计数", m_written: "已写入槽位", m_free: "空闲队列顺序",
    row: "行", req: "请求", token: "token", formula: "公式", with_values: "代入选中的数值",
    source: "引擎源码", explanation: "发生了什么", selection: "当前选择",
    sel_token: "token", sel_position: "位置", sel_slot: "槽位", sel_block: "块",
    none_selected: "悬停或选择一个 token、请求或块。",
    device: "设备", prepare_us: "prepare_inputs", paged_dense: "分页 = 稠密",
    help_text: "← / → 切换步 · ↑ / ↓ 切换阶段 · 空格 播放/暂停 · Esc 清除选择 · ? 帮助",
    truncated: "运行在 max_steps 处被截断。", free: "空闲", not_run_yet: "后续阶段",
    unknown_run: "无法加载该运行", close: "关闭", null_block: "空块（null block）", not_in_batch: "不在本步批次中", shared_block: "共享（前缀缓存）", computing: "正在计算：第 {n} 步（最多 {max} 步，已用 {t} 秒）", more: "项未显示",
    kv_note_cap: "仅显示前 {n} 个块", default: "默认", docs: "文档", mirrors: "对应上游",
    ax_position: "位置", ax_row: "行", ax_logical: "逻辑块", ax_physical: "物理块",
    ax_slot: "块内槽位", ax_key: "key 位置", more_tokens: "还有 {n} 个 token：请用导出链接查看",
  },
};

export const STAGES = {
  en: {
    update_states: ["Update the persistent batch", "The persistent batch catches up with the scheduler: finished and unscheduled requests leave (their rows become holes), new ones take the lowest hole, and the last rows move into the holes (condense). Only what changed is written."],
    req_indices: ["Request index of each token", "Which request each scheduled token belongs to: request i repeated num_scheduled_tokens[i] times."],
    cu_num_tokens: ["Cumulative sum and batched arange", "The running total of scheduled tokens, and an arange that restarts at 0 for every request, both without a Python loop."],
    positions: ["Token positions", "Each token's position inside its own sequence: what the request had already computed plus its offset in this step. RoPE rotates by it. vLLM 0.33 computes the same sum on the device from its device copy of num_computed_tokens."],
    token_indices: ["Token indices", "Where each token sits in the flattened token-id table: position + request row × max_model_len (M)."],
    input_ids: ["Input ids", "The model's input: token ids gathered from the token-id table with token_indices, in one torch.index_select (faster than np.take for large tables)."],
    block_table_indices: ["Block-table indices", "Which cell of the flattened block table [max_num_reqs, K] holds each token's block: row × K + position // block_size. This is vLLM's CPU path up to 0.10; vLLM 0.33 does this stage and the next two on the device in one Triton kernel (BlockTable.compute_slot_mapping) from query_start_loc, positions and the device block table. pagedviz does both and checks that they agree."],
    block_numbers: ["Physical block numbers", "Each token's physical KV block, read from the block table."],
    block_offsets: ["Offsets inside the block", "Each token's offset inside its block: position % block_size."],
    slot_mapping: ["Slot mapping", "The global KV-cache slot where each token's K and V are written: block number × block_size + offset. With CUDA graphs the token count T is padded to the next capture size (num_input_tokens): the padded tokens run through the graph, but their slot is -1 (PAD_SLOT_ID), which the cache-write kernel (reshape_and_cache_flash) skips. Attention reads the first T entries only."],
    query_start_loc: ["Query start locations", "Where each request's tokens start in the flat batch, plus the end: num_reqs + 1 entries, which FlashAttention's varlen kernel reads as cu_seqlens_q. The persistent buffer has max_num_reqs + 1 entries; past num_reqs it repeats the last value so that it stays non-decreasing, as FlashAttention requires: a padded request there has an empty query."],
    seq_lens: ["Sequence lengths", "Each request's length after this step: computed + scheduled tokens. Attention reads this many keys through the request's block-table row (FlashAttention's seqused_k). Past num_reqs the buffer is 0, so a padded request attends to nothing."],
    logits_indices: ["Logits indices", "The last token of each request gives the logits to sample from; a request still in a partial prefill discards its sample."],
    attn_metadata: ["Attention metadata", "Scalars the attention backend is built with: num_reqs, the real request count (not padded: with piecewise CUDA graphs attention runs outside the graph; vLLM pads request counts only for FULL graphs of uniform decode batches, which pagedviz does not model), total_num_scheduled_tokens (num_actual_tokens), num_input_tokens (the token count padded to a CUDA-graph capture size), the longest query and the longest sequence."],
    attn_mask: ["Attention state and mask", "Ascend (vllm-ascend's _build_attn_state, first match): PrefillNoCache when nothing was computed before, one max_seq_len × max_seq_len causal mask for all requests; DecodeOnly when every request has one token, no mask; SpecDecoding with an MTP drafter; ChunkedPrefill when chunked prefill is on, one mask row per token picked by its position ([T, max_seq_len]); otherwise PrefillCacheHit, a fixed 128 × 128 causal mask. Document 000 calls a decode token's row all zeros: it is zero over the request's own keys 0..seq_len-1, and its 1s lie past seq_len where the request has no keys, so it is literally all zeros only for the longest request. Current vllm-ascend passes one 2048 × 2048 mask for every state and lets the kernel align it to each request's last key (sparse_mode=3): the same rows."],
    block_tables: ["Block tables", "nano-vllm: each sequence's block list, padded with -1 to the longest."],
    "nanovllm:positions": ["Token positions", "nano-vllm builds them per sequence: a prefill covers positions num_cached_tokens up to num_cached_tokens + num_scheduled_tokens (a prefix-cache hit or an earlier chunk is skipped); a decode feeds position len(seq) - 1."],
    "nanovllm:input_ids": ["Input ids", "nano-vllm has no token-id table: it concatenates each sequence's own token ids, seq[num_cached_tokens : num_cached_tokens + num_scheduled_tokens], one sequence after another (a decode feeds seq.last_token). No gather through token_indices."],
    "nanovllm:cu_seqlens_q": ["Query boundaries (cu_seqlens_q)", "Where each sequence's query tokens start and end in the flat batch: [0, *cumsum(num_scheduled_tokens)]. flash_attn_varlen_func splits the queries with it; a decode step has none and passes context_lens instead."],
    "nanovllm:cu_seqlens_k": ["Key boundaries (cu_seqlens_k)", "The same for keys: each sequence has num_cached_tokens + num_scheduled_tokens keys. It equals cu_seqlens_q unless some keys are already in the cache (a prefix-cache hit or an earlier chunk)."],
    "nanovllm:slot_mapping": ["Slot mapping", "The KV-cache slot each new token is written to: block_table[position // block_size] * block_size + position % block_size. Cached tokens are not written again."],
    "nanovllm:block_tables": ["Block tables", "Each sequence's block list, padded with -1 to the longest. A prefill passes them only when cu_seqlens_k[-1] > cu_seqlens_q[-1] (some keys come from the cache); otherwise attention reads this step's K/V directly. A decode always passes them."],
    "nanovllm:last_indices": ["Last token of each sequence (last_indices)", "In a prefill the LM head keeps only the rows last_indices = cu_seqlens_q[1:] - 1; a decode has one row per sequence already. A sequence still in a partial prefill gets a logits row whose sample is dropped."],
  },
  zh: {
    update_states: ["更新持久化批次", "持久化批次（persistent batch）与调度结果同步：已完成和本步未被调度的请求移出（所在行成为空洞），新请求填入最低的空洞，再把末尾的行搬进空洞（condense）。只写入发生变化的部分。"],
    req_indices: ["请求索引", "每个被调度的 token 属于哪个请求：请求 i 重复 num_scheduled_tokens[i] 次。"],
    cu_num_tokens: ["前缀和与分段 arange", "调度 token 数的前缀和（cumsum），以及每个请求各自从 0 开始的 arange，全部向量化计算，没有 Python 循环。"],
    positions: ["token 位置", "每个 token 在其请求序列中的位置：已计算的 token 数加上本步内的偏移。RoPE（旋转位置编码）按它旋转。vLLM 0.33 在设备上用 num_computed_tokens 的设备副本计算同样的和。"],
    token_indices: ["token 下标", "每个 token 在展平的 token ID 表中的下标：位置 + 请求行号 × max_model_len（M）。"],
    input_ids: ["输入 ID", "模型的输入：用 token_indices 从 token ID 表（token_ids_cpu）中一次 torch.index_select 取出的 token ID（大表时比 np.take 快）。"],
    block_table_indices: ["块表下标", "每个 token 所在块在展平块表 [max_num_reqs, K] 中的下标：行号 × K + position // block_size。这是 vLLM 0.10 及以前的 CPU 路径；vLLM 0.33 在设备上用一个 Triton 内核（BlockTable.compute_slot_mapping）根据 query_start_loc、positions 和设备端块表一次完成这一阶段和后两个阶段。pagedviz 两种都算，并检查结果一致。"],
    block_numbers: ["物理块号", "每个 token 所在的物理 KV 块号，从块表中读出。"],
    block_offsets: ["块内偏移", "每个 token 在块内的偏移：position % block_size。"],
    slot_mapping: ["槽位映射", "槽位映射：每个 token 的 K/V 写入的全局 KV cache 槽位 = 物理块号 × block_size + 块内偏移。使用 CUDA Graph 时 token 数 T 被补齐到下一个捕获大小（num_input_tokens）：补齐的 token 也会跑过整个图，但槽位为 -1（PAD_SLOT_ID），写缓存的内核（reshape_and_cache_flash）会跳过它们。注意力只读前 T 个元素。"],
    query_start_loc: ["查询起始位置", "每个请求的 token 在扁平批次中的起始位置，再加上结束位置：共 num_reqs + 1 个元素，FlashAttention 的 varlen 内核把它当作 cu_seqlens_q。持久缓冲区有 max_num_reqs + 1 个元素；num_reqs 之后重复最后一个值，保持单调不减（FlashAttention 的要求）：那里补齐的请求 query 为空。"],
    seq_lens: ["序列长度", "本步之后每个请求的序列长度：已计算 + 本步调度的 token 数。注意力通过该请求的块表行读取这么多个 key（FlashAttention 的 seqused_k）。num_reqs 之后缓冲区为 0，补齐的请求不读任何 key。"],
    logits_indices: ["logits 下标", "每个请求最后一个 token 的输出用于采样；仍处于分块预填充中的请求丢弃本次采样。"],
    attn_metadata: ["注意力元数据", "构建注意力后端所需的标量：num_reqs 是真实的请求数（不补齐：分段 CUDA Graph 下注意力在图外执行；vLLM 只在 FULL 图的统一解码批次中补齐请求数，pagedviz 不模拟这种情况）、total_num_scheduled_tokens（num_actual_tokens）、num_input_tokens（补齐到 CUDA Graph 捕获大小的 token 数）、最长的 query 和最长的序列。"],
    attn_mask: ["注意力状态与掩码", "昇腾（vllm-ascend 的 _build_attn_state，按顺序取第一个匹配）：之前没有计算过任何 token 时为 PrefillNoCache，所有请求共用一个 max_seq_len × max_seq_len 的因果掩码；每个请求只有一个 token 时为 DecodeOnly，不需要掩码；使用 MTP 草稿模型时为 SpecDecoding；开启分块预填充时为 ChunkedPrefill，按每个 token 的位置取出对应的掩码行（[T, max_seq_len]）；否则为 PrefillCacheHit，使用固定的 128 × 128 因果掩码。文档 000 说解码 token 的掩码行全为 0：它在本请求自己的 key 0..seq_len-1 上为 0，值为 1 的位置都在 seq_len 之后，那里没有本请求的 key，所以只有最长的请求那一行才真正全为 0。当前的 vllm-ascend 对所有状态都传入同一个 2048 × 2048 掩码，由算子按每个请求最后一个 key 对齐（sparse_mode=3），效果与按位置取行相同。"],
    block_tables: ["块表", "nano-vllm：每个序列的块列表，用 -1 补齐到最长。"],
    "nanovllm:positions": ["token 位置", "nano-vllm 逐序列生成位置：预填充覆盖 num_cached_tokens 到 num_cached_tokens + num_scheduled_tokens（跳过前缀缓存命中的部分或之前已算过的块）；解码输入位置 len(seq) - 1。"],
    "nanovllm:input_ids": ["输入 ID", "nano-vllm 没有 token ID 表：它把每个序列自己的 token ID seq[num_cached_tokens : num_cached_tokens + num_scheduled_tokens] 依次拼接（解码时取 seq.last_token），不经过 token_indices 的 gather。"],
    "nanovllm:cu_seqlens_q": ["query 边界 (cu_seqlens_q)", "每个序列的 query token 在扁平批次中的起止位置：[0, *cumsum(num_scheduled_tokens)]。flash_attn_varlen_func 用它切分 query；解码步没有它，改传 context_lens。"],
    "nanovllm:cu_seqlens_k": ["key 边界 (cu_seqlens_k)", "key 的起止位置：每个序列有 num_cached_tokens + num_scheduled_tokens 个 key。除非有 key 已在缓存中（前缀缓存命中或之前的分块），它与 cu_seqlens_q 相同。"],
    "nanovllm:slot_mapping": ["槽位映射", "每个新 token 写入的 KV cache 槽位：block_table[position // block_size] * block_size + position % block_size。已缓存的 token 不再写入。"],
    "nanovllm:block_tables": ["块表", "每个序列的块列表，用 -1 补齐到最长。预填充只在 cu_seqlens_k[-1] > cu_seqlens_q[-1]（有 key 来自缓存）时传入；否则注意力直接读取本步的 K/V。解码总是传入。"],
    "nanovllm:last_indices": ["每个序列的最后一个 token (last_indices)", "预填充时 LM head 只保留 last_indices = cu_seqlens_q[1:] - 1 这几行；解码时每个序列本来就只有一行。仍在分块预填充中的序列也会得到一行 logits，但其采样结果被丢弃。"],
  },
};

export function t(lang, key) {
  return (STRINGS[lang] && STRINGS[lang][key]) || STRINGS.en[key] || key;
}

// The status line of a run still computing (an answer of /api/runs/{id}/progress).
export function progressText(lang, p) {
  return t(lang, "computing").replace("{n}", p.steps_done).replace("{max}", p.max_steps).replace("{t}", Math.round(p.elapsed_s));
}

// A flavour's own text ("nanovllm:input_ids") wins over the shared one.
export function stageText(lang, name, flavor) {
  const pick = (key) => (STAGES[lang] && STAGES[lang][key]) || STAGES.en[key];
  return (flavor && pick(`${flavor}:${name}`)) || pick(name) || [name, ""];
}

// Fill every [data-i18n] element's text and every [data-i18n-aria] element's aria-label.
export function applyI18n(root, lang) {
  document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
  root.querySelectorAll("[data-i18n]").forEach((el) => { el.textContent = t(lang, el.dataset.i18n); });
  root.querySelectorAll("[data-i18n-aria]").forEach((el) => {
    const label = t(lang, el.dataset.i18nAria);
    el.setAttribute("aria-label", label);
    el.title = label;
  });
}

// The feature views' strings and the stages that appear only when their feature is on (the what-if,
// async scheduling, speculative decoding, M-RoPE); features.js shows them.
Object.assign(STRINGS.en, {
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
Object.assign(STAGES.en, {
  token_indices_whatif: ["What if: the wrong token_indices", "A counterfactual, not what vLLM does: why token_indices multiplies by max_model_len. The token table's rows are M = max_model_len long; block-table rows hold K = ceil(M / block_size) blocks, i.e. K × block_size ≥ M slots. When M % block_size ≠ 0 the two differ, so striding by K × block_size lands every request past row 0 in the wrong cell (the next row's tokens, or past the table: -1) and input_ids_whatif reads wrong ids."],
  prepare_input_ids: ["Fill input_ids on the device (async)", "Async scheduling: the scheduler planned this step before the last step's sampled tokens reached the CPU, so a decode request's input token is only a placeholder in token_ids_cpu (0 here) and in the CPU input_ids. _prepare_input_ids copies input_ids to the device, then fills each such token from prev_sampled_token_ids (last step's rows): when the batch kept its order the requests are rows 0..n-1 in both steps and one slice copy does it; otherwise a scatter by (sample_flattened_indices, prev_common_req_indices)."],
  spec_decode_metadata: ["Speculative-decoding metadata", "_calc_spec_decode_metadata: a request with k drafts scheduled k + 1 tokens (its last known token, then the drafts) and needs the logits of all k + 1: the first k verify the drafts (target_logits_indices, rows of the logits), the last gives the bonus token if every draft is accepted (bonus_logits_indices). A request without drafts reads one row, as before."],
  rejection_sampler: ["Verify the drafts (rejection sampler)", "Greedy verification: the target model's own choice at each draft's row decides. Every request outputs its accepted drafts plus one token: the target's token where the first draft was wrong, or the bonus token when all were right. The scheduler rolls num_computed_tokens back by the rejected drafts; their KV slots stay allocated (as in vLLM) and are overwritten by later tokens."],
  mrope_positions: ["M-RoPE positions", "M-RoPE (Qwen2-VL): three position rows (t, h, w) per token. Text tokens count up equally on all three; an image's t × h × w placeholder tokens take their grid coordinates from the position the image starts at; the text after the image continues at max + 1, so the image uses max(t, h, w) positions instead of t·h·w (mrope_position_delta = max + 1 - num_prompt is negative). _calc_mrope_positions copies the prompt's precomputed columns and computes the decoded tokens' columns as position + delta. The tiny model still rotates by the 1-D positions."],
});
Object.assign(STAGES.zh, {
  token_indices_whatif: ["假如：错误的 token_indices", "反事实推演，并非 vLLM 的做法：说明 token_indices 为什么乘以 max_model_len。token 表每行长 M = max_model_len；块表每行有 K = ceil(M / block_size) 个块，即 K × block_size ≥ M 个槽位。当 M % block_size ≠ 0 时两者不同，按 K × block_size 跨行会让第 0 行之后的每个请求落到错误的单元格（下一行的 token，或超出表外：-1），input_ids_whatif 读到错误的 ID。"],
  prepare_input_ids: ["在设备上填入 input_ids（异步）", "异步调度：调度器在上一步采样出的 token 回到 CPU 之前就规划了本步，所以解码请求的输入 token 在 token_ids_cpu（此处为 0）和 CPU 的 input_ids 中只是占位。_prepare_input_ids 把 input_ids 拷到设备后，再用 prev_sampled_token_ids（上一步的各行）填入这些 token：批次顺序未变时，请求在两步中都是第 0..n-1 行，一次切片拷贝即可；否则按 (sample_flattened_indices, prev_common_req_indices) 做 scatter。"],
  spec_decode_metadata: ["投机解码元数据", "_calc_spec_decode_metadata：有 k 个草稿的请求调度了 k + 1 个 token（最后一个已知 token 加上草稿），需要全部 k + 1 行 logits：前 k 行验证草稿（target_logits_indices，logits 的行号），最后一行在全部草稿被接受时给出奖励 token（bonus_logits_indices）。没有草稿的请求照旧只读一行。"],
  rejection_sampler: ["验证草稿（拒绝采样）", "贪心验证：由目标模型在每个草稿所在行的选择决定。每个请求输出被接受的草稿再加一个 token：第一个错误草稿处目标模型的 token，或全部正确时的奖励 token。调度器按被拒绝的草稿数回退 num_computed_tokens；它们的 KV 槽位仍保留（与 vLLM 相同），之后被新 token 覆盖。"],
  mrope_positions: ["M-RoPE 位置", "M-RoPE（Qwen2-VL）：每个 token 有三行位置（t、h、w）。文本 token 在三行上同步递增；图像的 t × h × w 个占位 token 从图像起始位置开始取网格坐标；图像之后的文本从 max + 1 继续，因此图像只占 max(t, h, w) 个位置而不是 t·h·w 个（mrope_position_delta = max + 1 - num_prompt 为负）。_calc_mrope_positions 拷贝提示词预先算好的列，解码 token 的列为 position + delta。这个小模型仍按一维 positions 旋转。"],
});
