// The teaching views' strings in English and 简体中文, added to strings.js's: the lecturer's compare
// view, present mode and stage playback, the lesson as a student uses it, the page's frame in 中文,
// and the scenario form's field help (i18n.js imports this module once).

import { STRINGS } from "./strings.js";

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
