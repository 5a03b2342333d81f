// Every string of the pages in English and 简体中文 (the stages' titles and explanations are the
// engine's: stageText below reads them).
// The Chinese follows the seed documents' own terms (块表, 槽位映射, 预填充, ...).

export const STRINGS = {
  en: {
    tagline: "Watch a vLLM-style engine prepare model inputs over a paged KV cache, step by step.",
    presets: "Presets", follows: "worked example of", array_guide: "guide to every array", open: "Open", editor: "Scenario editor",
    editor_hint: "Change the engine config and the requests; the server checks the scenario as you type.",
    config: "Engine config", requests: "Requests", add_request: "Add request", remove: "Remove",
    run: "Run", upload: "Upload JSON", download: "Download JSON", valid: "Valid scenario",
    stages: "Stages", request_level: "Request level", token_level: "Token level", system_level: "System level",
    step: "Step", prev: "Previous step", next: "Next step", first: "First step", last: "Last step",
    play: "Play", pause: "Pause", speed: "Speed", copy_link: "Copy link", copied: "Link copied",
    present: "Present", leave_present: "Leave presentation", help: "Keyboard help", lang: "Language",
    run_charts: "The whole run (click a step to open it)",
    edit_scenario: "Edit scenario", loading: "Loading…", idle_step: "Idle step: nothing could be scheduled.",
    json_bad: "line {line}, column {col}: not JSON ({why})", editor_valid: "✓ Valid scenario ({n} requests)",
    rec_open: "Open the imported run",
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
    none_selected: "Hover or select a token, a request, a block or a KV slot.",
    device: "device", prepare_us: "prepare_inputs", paged_dense: "paged = dense",
    help_text: "← / → step · ↑ / ↓ stage · space play/pause · p play the step's stages · Esc clear selection · ? this help",
    truncated: "The run was cut short at max_steps.", free: "free", not_run_yet: "later stage",
    unknown_run: "Could not load the run", close: "Close", null_block: "null block", not_in_batch: "not in this step's batch", shared_block: "shared (prefix cache)", computing: "Computing the run: step {n} of at most {max} ({t} s)", replaying: "Replaying the recording: step {n} of {max} ({t} s)", more: "more",
    kv_note_cap: "showing the first {n} blocks", default: "default", docs: "docs", mirrors: "mirrors",
    ax_position: "position", ax_row: "row", ax_logical: "logical block", ax_physical: "physical block",
    ax_slot: "slot in block", ax_key: "key position", more_tokens: "{n} more tokens: use the export links", refs_more: "and {n} more",
    paused_memory: "(paused: the runs computing now hold the server's memory; it goes on when some end)",
    narration: "What happens", this_stage: "This stage", no_stage_narration: "Nothing to add for this stage in this step.",
    ref_absent: "not in this step's batch",
    lesson: "Lesson", section: "Section", sections: "sections", sections_all: "All sections", minutes: "min",
    prev_section: "◀ Back", next_section: "Next ▶", share_link: "Share link", start_lesson: "Start the lesson",
    start_here: "Start here", load_lesson: "Load a lesson file (JSON)", lecturer_hint: "Lecturers: write a lesson as a JSON file (sections of scenario, step, stage, selection, paragraph), load it here and share the link.",
    predict_title: "Predict, then reveal", predict_hint: "Fill in the entries before they are shown; then check.",
    predict_check: "Check", predict_reveal: "Just show me", predict_score: "{n} of {total} right.",
    predict_yours: "you said", predict_expected: "it is", predict_array: "Array", predict_entries: "Entries",
    predict_start: "Predict", predict_number: "must be a number", predict_flat: "entries count row by row", predict_bad_entries: "give indices such as 7, 0-4 or 2, 5 (0 … {max})",
    wi_title: "What if…", wi_run: "Rerun here", wi_reset: "Back to the baseline", baseline: "baseline", wi_now: "this run",
    wi_delta: "This run against the baseline", wi_same: "Change a setting and rerun: the step and stage stay where they are.",
    wi_shown: "Now showing the rerun with {changes}, against the baseline below.", wi_back: "Now showing the baseline again.",
    wi_blocks_step: "blocks used", wi_frag_step: "internal fragmentation (slots)", wi_blocks_peak: "peak blocks used",
    wi_frag_peak: "peak internal fragmentation", wi_preemptions: "preemptions", wi_padded: "padded tokens", wi_steps: "steps",
    cmp_title: "Compare", cmp_close: "Close the comparison", cmp_with: "Compare side by side with…", cmp_flavor: "this flavour",
    cmp_settings: "these settings", cmp_no_change: "Change a setting above first.", cmp_bad_spec: "write it as key:value,key:value",
    cmp_totals: "B minus A over the whole run", cmp_no_step: "Run B has no step {n} (it ends after step {m}).",
    cmp_shape: "shapes differ", cmp_differ: "entries differ", cmp_only_one: "only one run has it", cmp_same: "same",
    cmp_arrays: "Arrays", cmp_blocks_differ: "blocks differ", cmp_absent: "not in this run", contrasts: "Compare side by side",
    cmp_prefix: "Prefix caching on vs off", cmp_chunked: "Chunked prefill on vs off", cmp_block: "Block size 16 vs 256",
    cmp_nano: "vLLM vs nano-vllm, same requests", cmp_ascend: "vLLM vs Ascend, same requests",
    cmp_runner: "V1 vs V2, same requests (vLLM's two model runners)", cmp_runner_word: "runner",
    cmp_batch: "Batch", cmp_same_order: "the same order", cmp_other_order: "another order", cmp_request: "request",
    cmp_order: "batch order (row 0 first)", cmp_row: "row", cmp_slot: "slot",
    cmp_req_same: "the same for every request", cmp_req_differ: "differs for", cmp_only_order: " (the entries differ only in their order)",
    stage: "Stage", pb_title: "Play this step stage by stage", pb_play: "▶ Play stages", pb_pause: "Pause",
    pb_continue: "▶ Continue", pb_stop: "■ Stop", pb_pause_at: "Pause at stage", pb_paused_at: "Paused at {stage}: read, then continue (p).",
    mark_allocated: "allocated", mark_reused: "reused from the prefix cache (ref +1)", mark_freed: "freed",
    mark_preempted: "freed by a preemption", mark_read: "read by the selected token's attention, in logical order up to its position",
    legend: "Legend", slot_empty: "empty", slot_written: "written", mask_visible: "0 visible", mask_masked: "1 masked",
    reads: "attention reads blocks", causal_cut: "up to position", mirrors_upstream: "Mirrors upstream:",
    q_arriving: "not arrived", q_waiting: "waiting", q_running: "running", q_preempted: "preempted", q_finished: "finished",
    queue: "Queue", budget: "token budget", pool: "KV pool", blocks_used: "blocks in use",
    tl_legend_marks: "! a request was preempted · ✓ a request finished", export_menu: "Export",
    ov_requests: "Requests this step", seg_cached: "cached (prefix hit)", seg_computed: "computed", seg_scheduled: "scheduled now",
    seg_remaining: "remaining", seg_waiting: "waiting", focus_on: "Focus on request", focus_placeholder: "id…",
    focus_only: "only this request", focus_only_of: "only request", minimap: "Token row", budget_bar: "tokens / budget",
    pool_bar: "KV blocks in use / pool", show_all_tokens: "Show all tokens", compress_runs: "Compress long runs",
    compressed_tokens: "{n} tokens compressed", block_starts: "block starts at position", more_columns: "{n} more columns: use the export links",
  },
  zh: {
    tagline: "逐步观察类 vLLM 引擎如何基于分页 KV cache 为模型前向准备输入。",
    presets: "预设场景", follows: "对应文档", array_guide: "数组指南", open: "打开", editor: "场景编辑器",
    editor_hint: "修改引擎配置和请求；输入时服务器会实时校验场景。",
    config: "引擎配置", requests: "请求", add_request: "添加请求", remove: "删除",
    run: "运行", upload: "上传 JSON", download: "下载 JSON", valid: "场景有效",
    stages: "阶段", request_level: "请求级", token_level: "Token 级", system_level: "系统级",
    step: "步", prev: "上一步", next: "下一步", first: "第一步", last: "最后一步",
    play: "播放", pause: "暂停", speed: "速度", copy_link: "复制链接", copied: "链接已复制",
    present: "演示模式", leave_present: "退出演示", help: "键盘帮助", lang: "语言",
    run_charts: "整个运行（点击某一步打开它）",
    edit_scenario: "编辑场景", loading: "加载中…", idle_step: "空闲步：没有可调度的请求。",
    json_bad: "第 {line} 行第 {col} 列：不是合法的 JSON", editor_valid: "✓ 场景有效（{n} 个请求）",
    rec_open: "打开导入的运行",
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
    none_selected: "悬停或选择一个 token、请求、块或 KV 槽位。",
    device: "设备", prepare_us: "prepare_inputs", paged_dense: "分页 = 稠密",
    help_text: "← / → 切换步 · ↑ / ↓ 切换阶段 · 空格 播放/暂停 · p 逐阶段播放 · Esc 清除选择 · ? 帮助",
    truncated: "运行在 max_steps 处被截断。", free: "空闲", not_run_yet: "后续阶段",
    unknown_run: "无法加载该运行", close: "关闭", null_block: "空块（null block）", not_in_batch: "不在本步批次中", shared_block: "共享（前缀缓存）", computing: "正在计算：第 {n} 步（最多 {max} 步，已用 {t} 秒）", replaying: "正在回放录制：第 {n} 步，共 {max} 步（已用 {t} 秒）", more: "项未显示",
    kv_note_cap: "仅显示前 {n} 个块", default: "默认", docs: "文档", mirrors: "对应上游",
    ax_position: "位置", ax_row: "行", ax_logical: "逻辑块", ax_physical: "物理块",
    ax_slot: "块内槽位", ax_key: "key 位置", more_tokens: "还有 {n} 个 token：请用导出链接查看", refs_more: "另有 {n} 个",
    paused_memory: "（暂停：正在计算的运行占满了服务器的内存，有运行结束后继续）",
    narration: "发生了什么", this_stage: "本阶段", no_stage_narration: "这一步在本阶段没有要补充的。",
    ref_absent: "不在本步的批次中",
    lesson: "课程", section: "小节", sections: "个小节", sections_all: "全部小节", minutes: "分钟",
    prev_section: "◀ 上一节", next_section: "下一节 ▶", share_link: "分享链接", start_lesson: "开始学习",
    start_here: "从这里开始", load_lesson: "加载课程文件（JSON）", lecturer_hint: "讲师：用 JSON 文件编写课程（由场景、步、阶段、选中对象和段落组成的小节），在这里加载并分享链接。",
    predict_title: "先预测，再揭晓", predict_hint: "在数值显示之前先填写这些元素，然后检查。",
    predict_check: "检查", predict_reveal: "直接看答案", predict_score: "答对 {n} / {total}。",
    predict_yours: "你的答案", predict_expected: "正确答案", predict_array: "数组", predict_entries: "元素",
    predict_start: "预测", predict_number: "必须是一个数", predict_flat: "按行展平计数", predict_bad_entries: "请填写下标，如 7、0-4 或 2, 5（0 … {max}）",
    wi_title: "如果……", wi_run: "就地重新运行", wi_reset: "回到基线", baseline: "基线", wi_now: "本次运行",
    wi_delta: "本次运行与基线对比", wi_same: "改变一个设置后重新运行：当前的步和阶段保持不变。",
    wi_shown: "现在显示按 {changes} 重新运行的结果，下表与基线对比。", wi_back: "现在重新显示基线。",
    wi_blocks_step: "已用块数", wi_frag_step: "内部碎片（槽位）", wi_blocks_peak: "已用块数峰值",
    wi_frag_peak: "内部碎片峰值", wi_preemptions: "抢占次数", wi_padded: "补齐的 token", wi_steps: "步数",
    cmp_title: "对比", cmp_close: "关闭对比", cmp_with: "并排对比：", cmp_flavor: "换成这个实现",
    cmp_settings: "换成上面的设置", cmp_no_change: "请先在上面改变一个设置。", cmp_bad_spec: "请写成 key:value,key:value",
    cmp_totals: "整个运行中 B 减 A", cmp_no_step: "运行 B 没有第 {n} 步（它在第 {m} 步后结束）。",
    cmp_shape: "形状不同", cmp_differ: "个元素不同", cmp_only_one: "只有一个运行有", cmp_same: "相同",
    cmp_arrays: "数组", cmp_blocks_differ: "个块不同", cmp_absent: "本运行中没有", contrasts: "并排对比",
    cmp_prefix: "前缀缓存：开 vs 关", cmp_chunked: "分块预填充：开 vs 关", cmp_block: "块大小 16 vs 256",
    cmp_nano: "vLLM vs nano-vllm，相同请求", cmp_ascend: "vLLM vs 昇腾，相同请求",
    cmp_runner: "V1 vs V2，相同请求（vLLM 的两个模型运行器）", cmp_runner_word: "运行器",
    cmp_batch: "批次", cmp_same_order: "顺序相同", cmp_other_order: "顺序不同", cmp_request: "请求",
    cmp_order: "批次顺序（第 0 行在前）", cmp_row: "行", cmp_slot: "槽位",
    cmp_req_same: "每个请求都相同", cmp_req_differ: "不同的请求：", cmp_only_order: "（逐个元素比较时的不同只是顺序不同）",
    stage: "阶段", pb_title: "逐阶段播放这一步", pb_play: "▶ 逐阶段播放", pb_pause: "暂停",
    pb_continue: "▶ 继续", pb_stop: "■ 停止", pb_pause_at: "在这些阶段暂停", pb_paused_at: "已在「{stage}」暂停：读完后继续（p）。",
    mark_allocated: "新分配", mark_reused: "前缀缓存复用（引用 +1）", mark_freed: "已释放",
    mark_preempted: "因抢占释放", mark_read: "选中 token 的注意力按逻辑顺序读取，直到它的位置",
    legend: "图例", slot_empty: "空", slot_written: "已写入", mask_visible: "0 可见", mask_masked: "1 屏蔽",
    reads: "注意力读取的块", causal_cut: "直到位置", mirrors_upstream: "对应上游：",
    q_arriving: "未到达", q_waiting: "等待中", q_running: "运行中", q_preempted: "被抢占", q_finished: "已完成",
    queue: "队列", budget: "token 预算", pool: "KV 池", blocks_used: "已用块",
    tl_legend_marks: "! 有请求被抢占 · ✓ 有请求完成", export_menu: "导出",
    ov_requests: "本步的请求", seg_cached: "缓存命中（前缀）", seg_computed: "已计算", seg_scheduled: "本步调度",
    seg_remaining: "剩余", seg_waiting: "等待中", focus_on: "聚焦请求", focus_placeholder: "id…",
    focus_only: "只看此请求", focus_only_of: "只看请求", minimap: "token 行", budget_bar: "token / 预算",
    pool_bar: "已用 KV 块 / 块池", show_all_tokens: "显示全部 token", compress_runs: "压缩长段",
    compressed_tokens: "已压缩 {n} 个 token", block_starts: "块起始位置", more_columns: "还有 {n} 列：请用导出链接查看",
  },
};


export function t(lang, key) {
  return (STRINGS[lang] && STRINGS[lang][key]) || STRINGS.en[key] || key;
}

// The status line of a run still computing (an answer of /api/runs/{id}/progress).
// An imported recording (run id rec-…) is replayed: its progress counts the recording's steps.
export function progressText(lang, p) {
  const key = String(p.run_id || "").startsWith("rec-") ? "replaying" : "computing";
  const text = t(lang, key).replace("{n}", p.steps_done).replace("{max}", p.max_steps).replace("{t}", Math.round(p.elapsed_s));
  return p.paused ? `${text} ${t(lang, "paused_memory")}` : text;
}

// The stages' titles and explanations come from the engine's @stage text (GET /api/stages/text), which
// the run page carries in its HTML (templates/run.html, #stage-texts) so that they show at first
// paint: key ("positions", or "v2:positions" where a flavour or Model Runner V2 has its own) ->
// {title: {en, zh}, why: {en, zh}}.
let stageTexts = null;
function stageTextMap() {
  if (stageTexts) return stageTexts;
  const box = typeof document === "undefined" ? null : document.getElementById("stage-texts");
  stageTexts = new Map((box ? JSON.parse(box.textContent).stages : []).map((s) => [s.key, s]));
  return stageTexts;
}

// [title, why] of a stage; a flavour's own text ("nanovllm:input_ids") wins over the shared one.
export function stageText(lang, name, flavor) {
  const texts = stageTextMap();
  const s = (flavor && texts.get(`${flavor}:${name}`)) || texts.get(name);
  return s ? [s.title[lang] || s.title.en, s.why[lang] || s.why.en] : [name, ""];
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
  root.querySelectorAll("a[href^='/docs-md/']").forEach((a) => { a.href = docHref(lang, a.getAttribute("href")); });
}

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

// The lecturer's views (issue 29): the compare view's panes and its line (comparepanes.js,
// comparewhy.js), present mode and stage playback
Object.assign(STRINGS.en, {
  cmp_view_title: "A vs B", cmp_sep: "; ", cmp_block_table: "Block table", cmp_blocks: "blocks", cmp_token_row: "Token row",
  cmp_no_tokens: "no tokens this step", cmp_first: "Step {n} is the first step where the runs differ.",
  cmp_at: "Step {n}:", cmp_no_diff: "No difference at step {n}.", cmp_go_first: "Go to the first difference (step {n})",
  cmp_w_sched: "A schedules {a} tokens, B {b}", cmp_w_reqs: "A batches {a}, B {b}", cmp_w_order: "batch order A {a}, B {b}",
  cmp_w_arrays: "arrays that differ:", cmp_w_kv: "KV blocks held otherwise: {blocks}", cmp_w_only: "only {side} has",
  cmp_b_ended: "Run B has ended.", cmp_why: "Why:", cmp_legend: "Outlined: differs from the other run at this step.",
  cmp_details: "Compare in detail",
  cmp_why_enable_prefix_caching: "With prefix caching off, a prompt that starts like an earlier one computes that prefix again, into blocks of its own, instead of sharing the cached blocks.",
  cmp_why_enable_chunked_prefill: "Without chunked prefill, a prompt that does not fit in what is left of the token budget waits for a later step instead of being split into chunks.",
  cmp_why_block_size: "A bigger block holds more tokens: each request needs fewer blocks and the block table is narrower, but each request's last block is mostly empty (internal fragmentation).",
  cmp_why_flavor: "Another engine prepares the same requests with its own scheduler and its own arrays: which requests run, in which order, and where their tokens go can differ.",
  cmp_why_model_runner: "V1 keeps each request in a persistent batch row; Model Runner V2 keeps it in a state slot and sorts the batch every step (decodes first), so the batch order and the token row's order can differ while each request's own slots stay the same.",
  cmp_m_steps: "steps", cmp_m_preemptions: "preemptions", cmp_m_peak_blocks_used: "peak blocks used",
  cmp_m_peak_internal_fragmentation: "peak internal fragmentation", cmp_m_padded_tokens: "padded tokens",
  wi_note_baseline: "the baseline's, before the what-if: it may not hold for these settings",
});
Object.assign(STRINGS.zh, {
  cmp_view_title: "A 与 B", cmp_sep: "；", cmp_block_table: "块表", cmp_blocks: "块", cmp_token_row: "token 行",
  cmp_no_tokens: "本步没有 token", cmp_first: "第 {n} 步是两个运行第一次出现不同的一步。",
  cmp_at: "第 {n} 步：", cmp_no_diff: "第 {n} 步没有不同。", cmp_go_first: "转到第一个不同（第 {n} 步）",
  cmp_w_sched: "A 调度 {a} 个 token，B 调度 {b} 个", cmp_w_reqs: "A 的批次 {a}，B 的批次 {b}", cmp_w_order: "批次顺序 A {a}，B {b}",
  cmp_w_arrays: "不同的数组：", cmp_w_kv: "归属不同的 KV 块：{blocks}", cmp_w_only: "只有 {side} 有",
  cmp_b_ended: "运行 B 已结束。", cmp_why: "原因：", cmp_legend: "加框：本步与另一个运行不同。",
  cmp_details: "详细对比",
  cmp_why_enable_prefix_caching: "关闭前缀缓存后，开头与之前某个提示相同的提示会把这段前缀重新计算一遍，写入自己的块，而不是共享已缓存的块。",
  cmp_why_enable_chunked_prefill: "不开分块预填充时，放不进剩余 token 预算的提示要等到后面的步，而不是被切成几块。",
  cmp_why_block_size: "块越大，每块容纳的 token 越多：每个请求需要的块更少，块表更窄，但每个请求的最后一块大部分是空的（内部碎片）。",
  cmp_why_flavor: "另一个引擎用自己的调度器和自己的数组处理相同的请求：哪些请求运行、按什么顺序、token 写到哪里都可能不同。",
  cmp_why_model_runner: "V1 把每个请求放在持久化批次的固定行里；模型运行器 V2 把它放在状态槽里，并且每一步都对批次重新排序（先解码），所以批次顺序和 token 行的顺序可能不同，而每个请求自己的槽位不变。",
  cmp_m_steps: "步数", cmp_m_preemptions: "抢占次数", cmp_m_peak_blocks_used: "峰值已用块数",
  cmp_m_peak_internal_fragmentation: "峰值内部碎片", cmp_m_padded_tokens: "补齐的 token 数",
  wi_note_baseline: "属于基线（what-if 之前）：在这些设置下可能不再成立",
});

// The lecturer's views (issue 37, point 7): what a compare ignores (stale entries no kernel reads),
// the attention state and mask a compare with vllm-ascend shows, the run page's header
Object.assign(STRINGS.en, {
  hdr_v1: "V1 runner", hdr_v2: "Model Runner V2",
  cmp_stale_h: "Not compared (stale, never read: past the row's num_blocks, struck out as in the main view):",
  cmp_stale_item: "{side} {req}: {array}[{row}][{col}] = {value}",
  cmp_stale_cell: "stale: past this row's num_blocks, never read by attention; not compared",
  cmp_attn: "Attention", cmp_attn_none: "none", cmp_mask_cap: "first {r} × {c} shown",
  cmp_w_attn: "attention state A {a}, B {b}", cmp_w_mask: "attn_mask A {a}, B {b}",
  cmp_why_flavor_ascend: "vllm-ascend schedules the same requests and prepares the same inputs as vLLM's V1 runner, then picks an attention state for the step ({state} here) and builds the attn_mask that state reads ({mask}); vLLM's runner builds neither (its attention kernel applies causality itself).",
});
Object.assign(STRINGS.zh, {
  hdr_v1: "V1 模型运行器", hdr_v2: "模型运行器 V2",
  cmp_stale_h: "未比较（陈旧条目，从不读取：超出该行 num_blocks，与主视图一样划掉）：",
  cmp_stale_item: "{side} {req}：{array}[{row}][{col}] = {value}",
  cmp_stale_cell: "陈旧：超出本行 num_blocks，注意力从不读取；不参与比较",
  cmp_attn: "注意力", cmp_attn_none: "无", cmp_mask_cap: "仅显示前 {r} × {c}",
  cmp_w_attn: "注意力状态 A {a}，B {b}", cmp_w_mask: "attn_mask A {a}，B {b}",
  cmp_why_flavor_ascend: "vllm-ascend 与 vLLM 的 V1 运行器调度相同的请求、准备相同的输入，然后为这一步选一个注意力状态（这里是 {state}），并构建该状态读取的 attn_mask（{mask}）；vLLM 的运行器两者都不构建（它的注意力内核自己实现因果关系）。",
});

// the lesson as a student uses it (lesson.js, predict.js): where the section looks, the way back,
// the hint before the answer, the wrap-up
Object.assign(STRINGS.en, {
  lesson_where: "On show", lesson_away: "This section is about step {n} · stage {s}; the page now shows step {m}.",
  lesson_back: "Back to the section's view", lesson_finish: "Finish ✓", lesson_end_h: "Lesson complete",
  lesson_end_text: "You went through {n} sections. Checkpoints right at the first try: {right} of {total}.",
  lesson_end_again: "Start again", lesson_end_home: "All lessons and presets", lesson_show: "Show it in the views",
  predict_hint_h: "Not yet: {n} of {total} right. A hint, then try again:", predict_try: "✗ try again",
  predict_cause: "Why", predict_shown: "The answer, shown:",
  kv_per_layer: "per layer (K and V)", kv_one_tensor: "(one tensor, all layers)",
  ref_row: "row {r} (request {rid}) as logical block {c}",
});
Object.assign(STRINGS.zh, {
  lesson_where: "当前显示", lesson_away: "本节讲的是第 {n} 步 · 阶段 {s}；页面现在显示第 {m} 步。",
  lesson_back: "回到本节的视图", lesson_finish: "完成 ✓", lesson_end_h: "课程完成",
  lesson_end_text: "你学完了 {n} 个小节。第一次就答对的检查点：{right} / {total}。",
  lesson_end_again: "从头再来", lesson_end_home: "全部课程与预设", lesson_show: "在视图中显示",
  predict_hint_h: "还不对：答对 {n} / {total}。先看提示，再试一次：", predict_try: "✗ 再试一次",
  predict_cause: "原因", predict_shown: "答案：",
  kv_per_layer: "每层一个（K 和 V）", kv_one_tensor: "（一个张量，包含所有层）",
  ref_row: "第 {r} 行（请求 {rid}）的第 {c} 个逻辑块", ref_by: "引用它的：",
});

// The prose inside the engine's formulas (the code around it stays as it is), in 中文.
const FORMULA_WORDS = {
  zh: [
    ["remove finished/unscheduled rows; add new rows into the lowest hole; condense", "移除已完成或本步未调度的行；新行放入最低的空洞；压缩（condense）"],
    ["(prefill: the slots of positions num_cached_tokens.. ; decode: ", "（预填充：位置 num_cached_tokens.. 的槽位；解码："],
    ["prefill: only if ", "预填充时仅当 "],
    [" (a prefix-cache hit), else None", "（前缀缓存命中）才传入，否则为 None"],
  ],
};
export function formulaText(lang, formula) {
  let out = formula || "";
  for (const [en, local] of FORMULA_WORDS[lang] || []) out = out.split(en).join(local);
  return out;
}

// 中文 complete (issue 37): the page's frame (skip link, brand, heatmap labels), the landing page's
// "your own vLLM server" section (recordings.js), the compare view's B head, the server's error
// lines, vllm-ascend's HEAD mask line, the scenario form's field help (landing.js, in place of the
// schema's English description), and the documents' links (?lang=zh)
Object.assign(STRINGS.en, {
  skip: "Skip to content", home: "pagedviz home", hm_label: "{title}: {rows} × {cols} heatmap; the Table button shows the numbers",
  rec_h: "Your own vLLM server", rec_text_a: "Steps recorded from a real vLLM 0.33 scheduler (", rec_text_b: "), replayed here.",
  rec_import: "Import a recording (JSONL)", rec_sending: "importing {name} ({kb} KB): sending it and checking every line…",
  cmp_b_with: "{title}, with {changes}", server_said: "The server said:",
});
Object.assign(STRINGS.zh, {
  skip: "跳到正文", home: "pagedviz 首页", hm_label: "{title}：{rows} × {cols} 热力图；点“表格”按钮查看数值",
  rec_h: "你自己的 vLLM 服务器", rec_text_a: "由真实的 vLLM 0.33 调度器录制的步骤（", rec_text_b: "），在这里回放。",
  rec_import: "导入录制文件（JSONL）", rec_sending: "正在导入 {name}（{kb} KB）：上传并逐行检查…",
  cmp_b_with: "{title}，改为 {changes}", server_said: "服务器的说明（英文）：",
  as_head_mask: "triu(ones(2048, 2048), 1) int8，所有因果状态共用一个掩码；算子（sparse_mode=3）按每个请求的最后一个 key 对齐它",
  as_head_decode: "；运行 _npu_paged_attention 时不用掩码",
});

// The field help of the scenario form in 中文 (landing.js: shown in place of the schema's English
// description; the bounds and the default still come from the schema), by field name
Object.assign(STRINGS.zh, {
  fh_name: "简短的名称", fh_flavor: "采用哪种引擎的规则",
  fh_engine: "由谁计算各步：pagedviz（它自己对该实现的模型）或 vllm（在 CPU 上进程内运行 vLLM 0.33.0 自己的调度器、块池和输入准备；需要 pip install 'pagedviz[vllm]'）",
  fh_seed: "用于生成 prompt_len 提示词和模型权重的随机种子", fh_max_steps: "运行最多这么多步后停止（并会说明）（不超过服务器的 max_steps）",
  fh_title: "页面显示的标题", fh_summary: "场景展示的内容", fh_document: "场景复现其示例的文档",
  fh_notes: "随场景显示的一行说明（例如文档中印错的数字）",
  fh_block_size: "每个 KV cache 块的 token 数（不超过服务器的 max_block_size）",
  fh_max_model_len: "一个请求的最长序列（提示词 + 输出）：token_ids_cpu 的宽度",
  fh_max_num_reqs: "持久化批次的行数：同时运行的请求最多这么多个",
  fh_max_num_batched_tokens: "调度器每步的 token 预算",
  fh_num_kv_blocks: "KV cache 池中的物理块数（vllm 和 ascend 把块 0 留作空块）（不超过服务器的 max_num_kv_blocks）",
  fh_long_prefill_token_threshold: "有其他请求等待时，单个请求每步 token 数的上限（0：不限）",
  fh_enable_chunked_prefill: "提示词可以分到多步处理", fh_enable_prefix_caching: "复用 token ID 之前出现过的满块",
  fh_cudagraph_capture_sizes: "num_input_tokens 补齐到的 CUDA Graph 大小：null（eager）、\"default\"（vLLM 的列表）或一组大小",
  fh_device: "prepare_inputs 和模型在哪里运行",
  fh_vocab_size: "token ID 的取值范围 [0, vocab_size)，有无模型都适用（也是模型的词表大小）；文本提示词至少需要 259",
  fh_model: "小型 transformer 的尺寸，或 null 表示快速模拟（不做前向计算）",
  fh_num_speculative_tokens: "n-gram（prompt lookup）草稿器每步给出的草稿 token 数；0：不用",
  fh_speculative_method: "草稿方法：ngram（vLLM 的 prompt lookup）；mtp（仅 ascend：vllm-ascend 因此选择 SpecDecoding 注意力状态；由 n-gram 的提议代替 MTP 头的草稿）",
  fh_prompt_lookup_min: "草稿器查找的最短 n-gram", fh_prompt_lookup_max: "草稿器查找的最长 n-gram",
  fh_model_runner: "vllm 实现：由 vLLM 0.33 的哪个 GPU 模型运行器准备输入：v2（模型运行器 V2，vllm/v1/worker/gpu/，0.33 的默认）或 v1（gpu_model_runner.py，文档所讲的）；ascend 和 nanovllm 只有 v1",
  fh_async_scheduling: "在第 n 步的输出到达调度器之前调度第 n+1 步（AsyncScheduler 和引擎核心的批次队列；vllm 实现上是 vLLM 0.33 的默认，V1 运行器开启投机解码时默认关闭，vLLM 0.33 拒绝把它与 n-gram 草稿器一起用）；ascend 和 nanovllm 同步运行",
  fh_scheduler_reserve_full_isl: "只有整个序列都放得进空闲块时才接纳等待中的请求（0.33）；false：只看它的第一块",
  fh_watermark: "有其他请求运行时接纳等待请求，块池中保留为空闲的比例",
  fh_free_queue_order: "lifo：没有哈希的释放块放到空闲队列头部（0.33）；fifo：全部放到尾部（旧版 vLLM）",
  fh_long_prefill_cap_lone_request: "即使只有一个运行或等待中的请求，也应用 long_prefill_token_threshold（旧版 vLLM）",
  fh_id: "唯一的请求 ID（数字按字符串处理；默认：列表中的下标）",
  fh_prompt_token_ids: "以 token ID 给出的提示词，取值在 [0, vocab_size) 内，最多 max_model_len 个",
  fh_prompt: "以文本给出的提示词（字节级分词器：每个 UTF-8 字节一个 token）",
  fh_prompt_len: "由种子生成这么多个 ID 的提示词（不超过 config.max_model_len）",
  fh_max_tokens: "要生成的 token 数（不超过 config.max_model_len）",
  fh_arrival_step: "请求到达的步（不超过服务器的 max_steps）",
  fh_image: "提示词中图像的占位 token：从 offset 开始的 t*h*w 个 token（M-RoPE，同 Qwen2-VL）",
});

// the largest value the server accepts with the other fields as they are (landing.js, under the bounds)
Object.assign(STRINGS.en, { fh_now_max: "At most {n} with the other fields as they are." });
Object.assign(STRINGS.zh, { fh_now_max: "其他字段保持现值时，最多为 {n}。" });

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

// Words of the server's own lines in 中文: the upstream the footer names (GET /healthz, a run's
// overview) and an imported recording's notes (core/replay.py); a line not listed stays as written
const SERVER_WORDS = {
  zh: [
    [/ by default, /g, "（默认）、"], [/ on request\b/g, "（可选）"],
    [/\bModel Runner V2\b/g, "模型运行器 V2"], [/\bV1 runner\b/g, "V1 模型运行器"],
    [/^pagedviz's scheduler agrees with the recording up to step (\d+)$/, "pagedviz 的调度器与录制一致，直到第 $1 步"],
    [/^pagedviz's scheduler diverges at step (\d+): /, "pagedviz 的调度器在第 $1 步与录制不同："],
    [/^pagedviz's scheduler was not compared: /, "没有与 pagedviz 的调度器对比："],
    [/^the recording is being replayed: whether pagedviz's scheduler agrees with it is said once it ends$/, "录制正在回放：回放结束后才会说明 pagedviz 的调度器是否与它一致"],
    [/^recorded by vLLM (\S+)'s (\w+) \((V1|V2) runner, async scheduling\)$/, "由 vLLM $1 的 $2 录制（$3 运行器，异步调度）"],
    [/^recorded by vLLM (\S+)'s (\w+) \((V1|V2) runner\)$/, "由 vLLM $1 的 $2 录制（$3 运行器）"],
    [/^a redacted recording: token ids are synthetic \(the recording kept only their counts\)$/, "脱敏的录制：token ID 是合成的（录制只保留了它们的数量）"],
    [/^speculative decoding: each step's drafts are the server's; .*$/, "投机解码：每一步的草稿来自服务器；请求第一个被拒绝的草稿之后的 target_token_ids 没有录制（服务器只保留被接受的前缀），以它的最后一个 token 重复填充"],
    [/^async scheduling: one step per recorded step .*$/, "异步调度：每个录制的步对应一步（每次 schedule() 及它之后收到的输出），按服务器调度的顺序同步回放：一步的输入里是前一步采样出的 token，而服务器的运行器是在设备上填入占位的"],
    [/^the recorded model's (\d+) layers stand in as (\d+) \((.*)\), which pagedviz plans into the same (\d+) KV cache groups$/, "录制的模型有 $1 层，这里以 $2 层（$3）代替，pagedviz 把它们规划成同样的 $4 个 KV 缓存组"],
    [/^the server's scheduling policy '(\w+)' is not modelled by this pagedviz$/, "这个版本的 pagedviz 没有模拟服务器的调度策略 '$1'"],
    [/^the requests' priorities are not modelled by this pagedviz$/, "这个版本的 pagedviz 没有模拟请求的优先级"],
    [/prefix_cache_retention_interval (\S+): pagedviz's scheduler caches a sliding window's blocks as vLLM's default 0 does$/, "prefix_cache_retention_interval 为 $1：pagedviz 的调度器按 vLLM 的默认值 0 缓存滑动窗口的块"],
  ],
};
export function serverText(lang, text) {
  let out = String(text || "");
  for (const [re, local] of SERVER_WORDS[lang] || []) out = out.replace(re, local);
  return out;
}

// a document's link (/docs-md/NAME) in the page's language: 中文 asks for ?lang=zh (its Chinese
// version, or the English text under a note in Chinese that says so)
export function docHref(lang, href) {
  const path = String(href).split("?")[0];
  return lang === "zh" ? `${path}?lang=zh` : path;
}

// plotly.js's own words on the run charts (its mode bar), as a locale for Plotly.react's config
export const PLOTLY_LOCALES = {
  zh: {
    "zh-CN": {
      dictionary: {
        "Download plot as a PNG": "下载为 PNG 图片", "Download plot": "下载图表", "Zoom": "缩放", "Pan": "平移",
        "Zoom in": "放大", "Zoom out": "缩小", "Autoscale": "自动缩放", "Reset axes": "重置坐标轴",
        "Double-click to zoom back out": "双击恢复缩放", "Box Select": "框选", "Lasso Select": "套索选择",
      },
      format: {},
    },
  },
};

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
