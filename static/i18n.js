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
    mark_allocated: "allocated", mark_reused: "reused from the prefix cache (ref +1)", mark_freed: "freed",
    mark_preempted: "freed by a preemption", mark_read: "read by the selected token's attention, in logical order up to its position",
    legend: "Legend", slot_empty: "empty", slot_written: "written", mask_visible: "0 visible", mask_masked: "1 masked",
    reads: "attention reads blocks", causal_cut: "up to position", mirrors_upstream: "Mirrors upstream:",
    q_arriving: "not arrived", q_waiting: "waiting", q_running: "running", q_preempted: "preempted", q_finished: "finished",
    queue: "Queue", budget: "token budget", pool: "KV pool", blocks_used: "blocks in use",
    tl_legend_marks: "! a request was preempted · ✓ a request finished", export_menu: "Export",
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
    mark_allocated: "新分配", mark_reused: "前缀缓存复用（引用 +1）", mark_freed: "已释放",
    mark_preempted: "因抢占释放", mark_read: "选中 token 的注意力按逻辑顺序读取，直到它的位置",
    legend: "图例", slot_empty: "空", slot_written: "已写入", mask_visible: "0 可见", mask_masked: "1 屏蔽",
    reads: "注意力读取的块", causal_cut: "直到位置", mirrors_upstream: "对应上游：",
    q_arriving: "未到达", q_waiting: "等待中", q_running: "运行中", q_preempted: "被抢占", q_finished: "已完成",
    queue: "队列", budget: "token 预算", pool: "KV 池", blocks_used: "已用块",
    tl_legend_marks: "! 有请求被抢占 · ✓ 有请求完成", export_menu: "导出",
  },
};

export const STAGES = {
  en: {
    update_states: ["Update the persistent batch", "The persistent batch catches up with the scheduler: finished and unscheduled requests leave (their rows become holes), new ones take the lowest hole, and the last rows move into the holes (condense). Only what changed is written."],
    req_indices: ["Request index of each token", "Which request each scheduled token belongs to: request i repeated num_scheduled_tokens[i] times."],
    cu_num_tokens: ["Cumulative sum and batched arange", "The running total of scheduled tokens, and an arange that restarts at 0 for every request, both without a Python loop."],
    positions: ["Token positions", "Each token's position inside its own sequence: what the request had already computed plus its offset in this step. RoPE uses these."],
    token_indices: ["Token indices", "Where each token sits in the flattened token-id table: position + request row × max_model_len (M)."],
    input_ids: ["Input ids", "The model's input: token ids picked out of the token-id table with token_indices."],
    block_table_indices: ["Block-table indices", "Which cell of the flattened block table holds each token's block: row × K + position // block_size. Using the row keeps requests apart."],
    block_numbers: ["Physical block numbers", "Each token's physical KV block, read from the block table."],
    block_offsets: ["Offsets inside the block", "Each token's offset inside its block: position % block_size."],
    slot_mapping: ["Slot mapping", "The global KV-cache slot where each token's K and V are written: block number × block_size + offset."],
    query_start_loc: ["Query start locations", "Where each request's tokens start in the flat batch; one more entry than requests."],
    seq_lens: ["Sequence lengths", "Each request's length after this step: computed + scheduled tokens. Attention reads this many keys."],
    logits_indices: ["Logits indices", "The last token of each request gives the logits to sample from; a request still in a partial prefill discards its sample."],
    attn_metadata: ["Attention metadata", "Scalars the attention kernel needs: request and token counts (padded for CUDA graphs), the longest query and the longest sequence."],
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
    positions: ["token 位置", "每个 token 在其请求序列中的位置：已计算的 token 数加上本步内的偏移。RoPE（旋转位置编码）使用它。"],
    token_indices: ["token 下标", "每个 token 在展平的 token ID 表中的下标：位置 + 请求行号 × max_model_len（M）。"],
    input_ids: ["输入 ID", "模型的输入：用 token_indices 从 token ID 表（token_ids_cpu）中取出的 token ID。"],
    block_table_indices: ["块表下标", "每个 token 所在块在展平块表中的下标：行号 × K + position // block_size。按行计算保证了请求之间的隔离。"],
    block_numbers: ["物理块号", "每个 token 所在的物理 KV 块号，从块表中读出。"],
    block_offsets: ["块内偏移", "每个 token 在块内的偏移：position % block_size。"],
    slot_mapping: ["槽位映射", "槽位映射：每个 token 的 K/V 写入的全局 KV cache 槽位 = 物理块号 × block_size + 块内偏移。"],
    query_start_loc: ["查询起始位置", "每个请求的 token 在扁平批次中的起始位置；比请求数多一个元素。"],
    seq_lens: ["序列长度", "本步之后每个请求的序列长度：已计算 + 本步调度的 token 数。注意力会读取这么多个 key。"],
    logits_indices: ["logits 下标", "每个请求最后一个 token 的输出用于采样；仍处于分块预填充中的请求丢弃本次采样。"],
    attn_metadata: ["注意力元数据", "注意力算子需要的标量：请求数和 token 数（CUDA Graph 模式下会补齐）、最长的 query 和最长的序列。"],
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
