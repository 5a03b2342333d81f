// The pages' languages, English and 简体中文: a string by key (t), the page's [data-i18n] text, the
// stages' titles and explanations (the engine's: stageText), the prose inside the engine's formulas,
// the server's own lines and plotly.js's words. The strings themselves are strings.js's, with
// strings_run.js's and strings_teach.js's added.

import { STRINGS } from "./strings.js";
import "./strings_run.js";
import "./strings_teach.js";


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
    [/^live: the recording is still arriving from the server; the agreement is said once it closes$/, "实时：录制仍在从服务器到来；结束后才会说明 pagedviz 的调度器是否与它一致"],
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
