// The run page: steps, stages and linked views of one run. State lives in state.js and the URL;
// the numbers come from the REST API; this file only arranges and highlights them.

import { errorLines, getJSON, postJSON, unpackLink, withProgress } from "./api.js";
import { applyI18n, progressText, stageText, t } from "./i18n.js";
import { readState, writeState } from "./state.js";
import { cellShape, clear, colorOf, el, fmtList, gridTable, heatmap, loadPlotly, plotlyText, rowShape, tintOf } from "./views.js";

const state = readState();
const S = {
  created: null, overview: null, steps: new Map(), stages: [], trace: null, prev: null,
  sel: null, hover: null, timer: null, speed: 1, kvMetric: "owner", shapes: {},
  view: { token_ids_cpu: "heatmap", block_table: "table", kv: "heatmap", attn_mask: "heatmap" },
};
const $ = (id) => document.getElementById(id);
const L = (key) => t(state.lang, key);

// ------------------------------------------------------------------ loading
async function loadRun() {
  setStatus(L("loading"));
  let created, scenario, request;
  if (state.s) {
    request = getJSON(`/api/runs/from-link?s=${encodeURIComponent(state.s)}`);
    scenario = await unpackLink(state.s);
  } else {
    const preset = await getJSON(`/api/presets/${encodeURIComponent(state.preset || "seed-001")}`);
    if (!preset.ok) return showError(preset.data);
    scenario = preset.data.scenario;
    request = postJSON("/api/runs", scenario);
  }
  // a long run says how far it has come while the request waits for it
  const check = scenario ? await postJSON("/api/scenarios/validate", scenario) : null;
  const runId = check && check.ok && check.data.valid ? check.data.run_id : null;
  created = await withProgress(runId, request, (p) => setStatus(progressText(state.lang, p)));
  if (!created.ok) return showError(created.data);
  S.created = created.data;
  state.s = created.data.link;
  state.preset = "";
  const [ov, stages] = await Promise.all([
    getJSON(`/api/runs/${created.data.run_id}`), getJSON(`/api/stages?flavor=${created.data.flavor}`)]);
  if (!ov.ok || !stages.ok) return showError(ov.ok ? stages.data : ov.data);
  S.overview = ov.data;
  S.stages = stages.data;
  const sc = ov.data.scenario;
  $("run-title").textContent = sc.title || sc.name;
  if (state.lang === "zh") localTitle(sc);
  $("flavor-badge").textContent = sc.flavor;
  $("scenario-json").value = JSON.stringify(sc, null, 2);
  $("truncated").hidden = !ov.data.truncated;
  buildTimeline();
  setStatus("");
  await showStep(state.step);
}

// a preset's own title in Chinese, when the scenario is a preset's (same name and title)
async function localTitle(sc) {
  const [en, zh] = await Promise.all([getJSON("/api/presets"), getJSON("/api/presets?lang=zh")]);
  if (!en.ok || !zh.ok) return;
  const i = en.data.findIndex((p) => p.id === sc.name && p.title === sc.title);
  if (i >= 0) $("run-title").textContent = zh.data[i].title;
}

async function fetchStep(n) {
  if (!S.steps.has(n)) {
    const r = await getJSON(`/api/runs/${S.created.run_id}/steps/${n}`);
    if (!r.ok) throw new Error(errorLines(r.data).join("; "));
    S.steps.set(n, r.data);
  }
  return S.steps.get(n);
}

function setStatus(text) { $("status").textContent = text; }

function showError(data) {
  setStatus("");
  const box = clear($("error"));
  box.hidden = false;
  box.append(el("strong", { text: L("unknown_run") }), el("ul", {}, errorLines(data).map((l) => el("li", { text: l }))));
}

// ------------------------------------------------------------------ step and stage
const stageNames = () => (S.trace ? S.trace.stages.map((s) => s.name) : S.stages.map((s) => s.name));

// timings the UI benchmark reads: first render since navigation, and the last step change
window.pagedvizTiming = { firstRenderMs: null, heatmapsMs: null, lastStepMs: null };

async function showStep(n) {
  const t0 = performance.now();
  const total = S.overview.num_steps;
  n = Math.max(1, Math.min(total, n || 1));
  const [trace, prev] = await Promise.all([fetchStep(n), n > 1 ? fetchStep(n - 1) : Promise.resolve(null)]);
  state.step = n;
  S.trace = trace;
  S.prev = prev;
  const names = stageNames();
  if (!names.includes(state.stage)) state.stage = names[0] || "";
  if (state.tok >= tokenCount()) state.tok = -1;
  S.sel = state.tok >= 0 ? { kind: "token", index: state.tok } : (S.sel && S.sel.kind !== "token" ? S.sel : null);
  S.hover = null;
  renderStep();
  writeState(state);
  window.pagedvizTiming.lastStepMs = performance.now() - t0;
  document.body.dataset.step = String(n);
}

function setStage(name) {
  state.stage = name;
  renderStages();
  renderTokenTable();
  renderStageDetail();
  writeState(state);
}

function moveStage(delta) {
  const names = stageNames();
  const i = Math.max(0, Math.min(names.length - 1, names.indexOf(state.stage) + delta));
  setStage(names[i]);
}

// ------------------------------------------------------------------ derived views of a trace
const A = (name) => (S.trace && S.trace.arrays[name] ? S.trace.arrays[name].data : null);
const tokenCount = () => (S.trace ? (S.trace.scalars.total_num_scheduled_tokens || 0) : 0);
const blockSize = () => S.overview.scenario.config.block_size;
const btName = () => (S.trace.arrays.block_table ? "block_table" : "block_tables");

function reqOfTokens() {
  const T = tokenCount();
  if (A("req_indices")) return A("req_indices");
  const cu = A("cu_seqlens_q");
  const out = [];
  if (cu) { for (let r = 0; r + 1 < cu.length; r++) for (let i = cu[r]; i < cu[r + 1]; i++) out.push(r); return out; }
  for (let i = 0; i < T; i++) out.push(i);
  return out;
}

function stageIndex(name) { return stageNames().indexOf(name); }

function writerStage(arrayName) {
  const a = S.trace.arrays[arrayName];
  return a ? a.stage : "";
}

// ------------------------------------------------------------------ render
function renderStep() {
  renderTimelineActive();
  renderBadges();
  renderChanges();
  renderStages();
  renderStageDetail();
  renderRequestTable();
  renderTokenTable();
  renderSystem();
  applySelection({ plots: false });  // the heatmaps were drawn with the selection already
}

function buildTimeline() {
  const box = clear($("timeline"));
  for (const s of S.overview.steps) {
    const marks = [];
    if (s.preempted_req_ids.length) marks.push(el("span", { class: "mark mark-preempt", text: "!", "aria-hidden": "true" }));
    if (s.finished_req_ids.length) marks.push(el("span", { class: "mark mark-finish", text: "✓", "aria-hidden": "true" }));
    const label = `${L("step")} ${s.step}: ${L("kind_" + s.kind)}` +
      (s.preempted_req_ids.length ? `, ${L("preempted")} ${s.preempted_req_ids.join(", ")}` : "");
    box.append(el("button", {
      class: `tl-step kind-${s.kind}`, role: "tab", "aria-label": label, title: label,
      dataset: { step: s.step }, onclick: () => { stopPlay(); showStep(s.step); },
    }, [el("span", { text: s.step }), ...marks]));
  }
}

function renderTimelineActive() {
  for (const b of $("timeline").children) {
    const on = Number(b.dataset.step) === state.step;
    b.classList.toggle("active", on);
    b.setAttribute("aria-selected", on ? "true" : "false");
    if (on) b.scrollIntoView({ block: "nearest", inline: "nearest" });
  }
  $("step-label").textContent = `${L("step")} ${state.step} / ${S.overview.num_steps}`;
}

function renderBadges() {
  const tr = S.trace;
  const box = clear($("badges"));
  box.append(el("span", { class: "badge", text: `${L("device")}: ${tr.forward.device || S.created.device}` }));
  const prep = tr.timing_us.prepare_inputs || 0;
  box.append(el("span", { class: "badge", text: `${L("prepare_us")}: ${prep.toFixed(0)} µs` }));
  const diff = tr.forward.paged_vs_dense_max_abs_diff;
  if (diff !== undefined) {
    const ok = diff < 1e-4;
    box.append(el("span", { class: `badge ${ok ? "ok" : "bad"}`, id: "badge-dense",
      text: `${L("paged_dense")} ${ok ? "✓" : "✗"} (${Number(diff).toExponential(1)})` }));
  }
  if (tr.forward.slot_mapping_device_matches_cpu !== undefined) {
    const ok = tr.forward.slot_mapping_device_matches_cpu;
    box.append(el("span", { class: `badge ${ok ? "ok" : "bad"}`, text: `slot_mapping cpu = ${tr.forward.device} ${ok ? "✓" : "✗"}` }));
  }
  const k = S.trace.scalars.attn_state;
  if (k) box.append(el("span", { class: "badge", text: `attn_state: ${k}` }));
}

// A change chip lists at most `max` items; the whole list is in its tooltip.
function chip(cls, label, items, max = 12) {
  const full = `${label}: ${items.join(", ")}`;
  const shown = items.length > max ? `${items.slice(0, max).join(", ")} … (+${items.length - max} ${L("more")})` : items.join(", ");
  return el("span", { class: `chip ${cls}`, title: full }, [`${label}: `, shown]);
}

// block ids as listed; a long list writes its runs of consecutive ids as first–last
function blockList(ids) {
  if (ids.length <= 8) return ids.join(", ");
  const out = [];
  for (let i = 0; i < ids.length;) {
    let j = i;
    while (j + 1 < ids.length && ids[j + 1] === ids[j] + 1) j++;
    if (j - i >= 2) out.push(`${ids[i]}–${ids[j]}`);
    else for (let k = i; k <= j; k++) out.push(String(ids[k]));
    i = j + 1;
  }
  return out.join(", ");
}

function renderChanges() {
  const sch = S.trace.scheduler;
  const box = clear($("changes"));
  if (S.trace.idle) box.append(el("p", { class: "idle-note", text: L("idle_step") }));
  if (sch.new_req_ids && sch.new_req_ids.length) box.append(chip("new", L("new_reqs"), sch.new_req_ids));
  if (sch.resumed_req_ids && sch.resumed_req_ids.length) box.append(chip("resumed", L("resumed"), sch.resumed_req_ids));
  if (sch.preempted_req_ids && sch.preempted_req_ids.length) box.append(chip("preempted", L("preempted"), sch.preempted_req_ids));
  if (sch.finished_req_ids && sch.finished_req_ids.length) box.append(chip("finished", L("finished"), sch.finished_req_ids));
  const nb = sch.new_block_ids || {};
  const parts = Object.entries(nb).map(([r, b]) => `${r} → [${blockList(b)}]`);
  if (parts.length) box.append(chip("newblocks", L("new_blocks"), parts, 8));
  const moves = (S.trace.batch.moves || []).map((m) => `${L("req")} ${m.req_id} ${L("row")} ${m.from} → ${m.to}`);
  if (moves.length > 4) box.append(chip("moved", L("moved"), moves, 4));
  else for (const m of moves) box.append(el("span", { class: "chip moved", text: `${L("moved")}: ${m}` }));
}

function renderStages() {
  const list = clear($("stage-list"));
  stageNames().forEach((name, i) => {
    const [title] = stageText(state.lang, name, S.overview.flavor);
    const active = name === state.stage;
    list.append(el("li", {}, el("button", {
      class: `stage-btn${active ? " active" : ""}`, "aria-current": active ? "step" : null,
      dataset: { stage: name }, onclick: () => setStage(name),
    }, [el("span", { class: "stage-num", text: i + 1 }), el("span", { class: "stage-title", text: title }),
        el("code", { class: "stage-code", text: name })])));
  });
}

function renderStageDetail() {
  const name = state.stage;
  const info = S.trace.stages.find((s) => s.name === name) || { reads: [], writes: [], formula: "" };
  const src = S.stages.find((s) => s.name === name);
  const [title, expl] = stageText(state.lang, name, S.overview.flavor);
  $("stage-title").textContent = `${stageIndex(name) + 1}. ${title}`;
  $("stage-expl").textContent = expl;
  $("stage-formula").textContent = info.formula;
  $("stage-source").textContent = src ? src.source : "";
  const vals = clear($("stage-values"));
  for (const w of info.writes) {
    const arr = S.trace.arrays[w];
    if (arr && arr.level !== "system" && arr.shape.length === 1) {
      vals.append(el("div", { class: "value-line", dataset: { array: w } }, [el("code", { text: w }), " = ", fmtList(arr.data, 64)]));
    } else if (arr) {
      vals.append(el("div", { class: "value-line", dataset: { array: w } }, [el("code", { text: w }), ` : ${arr.dtype}[${arr.shape.join(" × ")}]`]));
    } else if (S.trace.scalars[w] !== undefined) {
      vals.append(el("div", { class: "value-line", dataset: { array: w } }, [el("code", { text: w }), ` = ${S.trace.scalars[w]}`]));
    }
  }
  renderSubstituted();
}

// The stage's formula with the selected token's (or request's) own numbers.
function substituted() {
  const sel = S.hover || S.sel;
  if (!sel || S.trace.idle) return "";
  const a = (n) => A(n);
  const bs = blockSize();
  const M = S.overview.scenario.config.max_model_len;
  const K = Math.ceil(M / bs);
  const name = state.stage;
  if (sel.kind === "token") {
    const i = sel.index;
    const r = reqOfTokens()[i];
    const pos = a("positions") ? a("positions")[i] : null;
    switch (name) {
      case "req_indices": return `req_indices[${i}] = ${r}   (query_start_loc[${r}] = ${a("query_start_loc")[r]} ≤ ${i} < query_start_loc[${r + 1}] = ${a("query_start_loc")[r + 1]})`;
      case "cu_num_tokens": { const cu = a("cu_num_tokens"), n = a("num_scheduled_tokens");
        return `arange[${i}] = ${i} - (cu_num_tokens[${r}] - num_scheduled_tokens[${r}]) = ${i} - (${cu[r]} - ${n[r]}) = ${a("arange")[i]}`; }
      case "positions": if (a("arange")) return `positions[${i}] = num_computed_tokens_cpu[req_indices[${i}]] + arange[${i}] = ${a("num_computed_tokens_cpu")[r]} + ${a("arange")[i]} = ${pos}`;
        return `positions[${i}] = ${pos}   (${L("req")} ${S.trace.batch.req_ids[r]})`;
      case "token_indices": return `token_indices[${i}] = positions[${i}] + req_indices[${i}] * M = ${pos} + ${r} * ${M} = ${a("token_indices")[i]}`;
      case "input_ids": if (a("token_indices")) return `input_ids[${i}] = token_ids_cpu.flatten()[${a("token_indices")[i]}] = token_ids_cpu[${r}][${pos}] = ${a("input_ids")[i]}`;
        return `input_ids[${i}] = ${a("input_ids")[i]}`;
      case "block_table_indices": return `block_table_indices[${i}] = req_indices[${i}] * K + positions[${i}] // block_size = ${r} * ${K} + ${pos} // ${bs} = ${a("block_table_indices")[i]}`;
      case "block_numbers": return `block_numbers[${i}] = block_table.flatten()[${a("block_table_indices")[i]}] = block_table[${r}][${Math.floor(pos / bs)}] = ${a("block_numbers")[i]}`;
      case "block_offsets": return `block_offsets[${i}] = positions[${i}] % block_size = ${pos} % ${bs} = ${a("block_offsets")[i]}`;
      case "slot_mapping": if (a("block_numbers")) return `slot_mapping[${i}] = block_numbers[${i}] * ${bs} + block_offsets[${i}] = ${a("block_numbers")[i]} * ${bs} + ${a("block_offsets")[i]} = ${a("slot_mapping")[i]}`;
        // nano-vllm: a prefill without a cache hit passes no block_tables; the block is read off the slot
        return `slot_mapping[${i}] = seq.block_table[${pos} // ${bs}] * ${bs} + ${pos} % ${bs} = ${Math.floor(a("slot_mapping")[i] / bs)} * ${bs} + ${pos % bs} = ${a("slot_mapping")[i]}`;
      case "attn_mask": { const m = a("attn_mask"); if (!m) return "";
        const row = m.length === tokenCount() ? i : pos; const S2 = m[0].length;
        return `attn_mask[${row}] = causal row of position ${pos}: columns 0..${Math.min(pos, S2 - 1)} visible, ${pos + 1 < S2 ? `${pos + 1}..${S2 - 1} masked` : "none masked"}`; }
      default: return subRequest(name, r);
    }
  }
  if (sel.kind === "request") return subRequest(name, sel.index);
  return "";
}

function subRequest(name, r) {
  const a = (n) => A(n);
  if (r === undefined || r === null) return "";
  switch (name) {
    case "query_start_loc": return `query_start_loc[${r + 1}] = cu_num_tokens[${r}] = ${a("query_start_loc")[r + 1]}   (query_start_loc[0] = 0)`;
    case "seq_lens": return `seq_lens[${r}] = num_computed_tokens_cpu[${r}] + num_scheduled_tokens[${r}] = ${a("num_computed_tokens_cpu")[r]} + ${a("num_scheduled_tokens")[r]} = ${a("seq_lens")[r]}`;
    case "logits_indices": return `logits_indices[${r}] = query_start_loc[${r + 1}] - 1 = ${a("query_start_loc")[r + 1]} - 1 = ${a("logits_indices")[r]};  discard_request_mask[${r}] = seq_lens[${r}] < num_tokens[${r}] = ${a("seq_lens")[r]} < ${a("num_tokens")[r]} = ${a("discard_request_mask")[r]}`;
    case "update_states": if (!a("num_computed_tokens_cpu")) return "";
      return `${L("row")} ${r} ← ${L("req")} ${S.trace.batch.req_ids[r]}: num_computed_tokens_cpu[${r}] = ${a("num_computed_tokens_cpu")[r]}, num_scheduled_tokens[${r}] = ${a("num_scheduled_tokens")[r]}`;
    case "attn_metadata": return `max_query_len = max(num_scheduled_tokens) = ${S.trace.scalars.max_query_len};  max_seq_len = max(seq_lens) = ${S.trace.scalars.max_seq_len}`;
    default: return "";
  }
}

function renderSubstituted() {
  $("stage-sub").textContent = substituted() || L("none_selected");
}

function exportLinks(name) {
  const base = `/api/runs/${S.created.run_id}/steps/${state.step}/arrays/${encodeURIComponent(name)}`;
  return el("span", { class: "export" }, ["json", "csv", "npy"].map((f) =>
    el("a", { href: `${base}?format=${f}`, download: "", "aria-label": `${name} ${f}`, text: f })));
}

function renderRequestTable() {
  const box = clear($("req-table"));
  const tr = S.trace;
  const ids = tr.batch.req_ids;
  if (!ids.length) { box.append(el("p", { class: "muted", text: L("idle_step") })); return; }
  const names = Object.keys(tr.arrays).filter((n) => tr.arrays[n].level === "request" && tr.arrays[n].shape[0] === ids.length);
  const extra = Object.keys(tr.arrays).filter((n) => tr.arrays[n].level === "request" && tr.arrays[n].shape[0] === ids.length + 1);
  const moved = new Set((tr.batch.moves || []).map((m) => m.req_id));
  const table = el("table", { class: "req-table", id: "request-table", "aria-label": L("request_level") });
  table.append(el("thead", {}, el("tr", {}, [el("th", { text: L("row") }), el("th", { text: L("req") }),
    ...names.map((n) => el("th", { title: n }, [el("code", { text: n }), exportLinks(n)]))])));
  const body = el("tbody");
  ids.forEach((rid, r) => {
    const row = el("tr", { dataset: { r }, tabindex: 0, class: moved.has(rid) ? "moved" : "",
      onmouseenter: () => setHover({ kind: "request", index: r }), onmouseleave: () => setHover(null),
      onclick: () => select({ kind: "request", index: r }), onfocus: () => setHover({ kind: "request", index: r }),
      onkeydown: (e) => { if (e.key === "Enter") select({ kind: "request", index: r }); } },
    [el("td", { text: r }), el("td", { class: "req-cell", style: `background:${tintOf(r)}`, text: rid }),
     ...names.map((n) => el("td", { text: String(tr.arrays[n].data[r]) }))]);
    body.append(row);
  });
  table.append(body);
  box.append(table);
  for (const n of extra) box.append(el("p", { class: "value-line" }, [el("code", { text: n }), " = ", fmtList(tr.arrays[n].data, 64), exportLinks(n)]));
}

const MAX_TOKEN_COLS = 512;

function renderTokenTable() {
  const box = clear($("tok-table"));
  const tr = S.trace;
  const T = tokenCount();
  if (!T) { box.append(el("p", { class: "muted", text: L("idle_step") })); return; }
  const reqOf = reqOfTokens();
  const cur = stageIndex(state.stage);
  const curInfo = tr.stages.find((s) => s.name === state.stage) || { reads: [], writes: [] };
  const names = Object.keys(tr.arrays).filter((n) => tr.arrays[n].level === "token");
  const order = (n) => { const i = stageIndex(writerStage(n)); return i < 0 ? 99 : i; };
  names.sort((x, y) => order(x) - order(y));
  const shown = Math.min(T, MAX_TOKEN_COLS);
  const table = el("table", { class: "tok-table", id: "token-table", "aria-label": L("token_level") });
  const head = el("tr", {}, [el("th", { scope: "col", text: L("token") })]);
  for (let i = 0; i < shown; i++) {
    head.append(el("th", { scope: "col", class: "tok-head", tabindex: 0, dataset: { t: i },
      style: `background:${tintOf(reqOf[i])}`, "aria-label": `${L("token")} ${i}, ${L("req")} ${tr.batch.req_ids[reqOf[i]]}`,
      text: i }));
  }
  table.append(el("thead", {}, head));
  const body = el("tbody");
  for (const n of names) {
    const data = tr.arrays[n].data;
    const idx = order(n);
    const cls = curInfo.writes.includes(n) ? "current" : curInfo.reads.includes(n) ? "reads" : idx > cur ? "future" : "";
    const row = el("tr", { class: cls, dataset: { array: n } }, [el("th", { scope: "row" }, [el("code", { text: n }), exportLinks(n)])]);
    const cols = Math.min(data.length, MAX_TOKEN_COLS);
    for (let i = 0; i < cols; i++) {
      const pad = i >= T;
      row.append(el("td", { dataset: { t: i }, class: pad ? "pad" : "", style: pad ? "" : `background:${tintOf(reqOf[i])}`,
        text: String(data[i]) }));
    }
    body.append(row);
  }
  table.append(body);
  box.append(table);
  if (T > MAX_TOKEN_COLS) box.append(el("p", { class: "muted", text: L("more_tokens").replace("{n}", T - MAX_TOKEN_COLS) }));
}

// ------------------------------------------------------------------ system level
function card(id, titleKey, { toggle = true, extra = null } = {}) {
  const body = el("div", { class: "card-body" }, [el("div", { id: `hm-${id}`, class: "heatmap" }), el("div", { id: `tbl-${id}`, class: "table-alt" })]);
  const tools = el("div", { class: "card-tools" });
  if (extra) tools.append(extra);
  if (toggle) {
    tools.append(el("button", { class: "small", "aria-pressed": S.view[id] === "table" ? "true" : "false",
      onclick: () => { S.view[id] = S.view[id] === "table" ? "heatmap" : "table"; renderSystem(); applySelection(); },
      text: S.view[id] === "table" ? L("heatmap") : L("table") }));
    tools.append(el("button", { class: "small", onclick: () => window.Plotly && $(`hm-${id}`).data && window.Plotly.downloadImage($(`hm-${id}`), { format: "png", filename: `${id}-step${state.step}` }),
      text: L("png"), "aria-label": `${id} PNG`, disabled: S.view[id] === "table" }));
  }
  return el("section", { class: "card", id: `card-${id}`, "aria-label": L(titleKey) }, [
    el("header", {}, [el("h3", { text: L(titleKey) }), tools]), body]);
}

function showView(id) {
  const table = S.view[id] === "table";
  $(`hm-${id}`).hidden = table;
  $(`tbl-${id}`).hidden = !table;
  return table;
}

function kvMetricSelect() {
  return el("label", { class: "small" }, [`${L("metric")} `, el("select", {
    id: "kv-metric", onchange: (e) => { S.kvMetric = e.target.value; renderSystem(); applySelection(); },
  }, ["owner", "ref_cnt", "written", "free"].map((m) => el("option", { value: m, selected: m === S.kvMetric, text: L(`m_${m}`) })))]);
}

// The cards are rebuilt only when their set, views or language change; a step change redraws
// into the same plot divs, which Plotly updates far faster than it draws new ones.
function renderSystem() {
  const tr = S.trace;
  const bt = btName();
  const cards = [];
  if (tr.arrays.token_ids_cpu) cards.push(["token_ids_cpu", "token_ids_cpu"]);
  if (tr.arrays[bt]) cards.push(["block_table", bt]);
  if (tr.kv_cache && tr.kv_cache.num_blocks) cards.push(["kv", "kv_cache"]);
  if (tr.arrays.attn_mask) cards.push(["attn_mask", "attn_mask"]);
  const key = JSON.stringify([cards, S.view, state.lang, S.kvMetric, Boolean(window.Plotly)]);
  if (key !== S.sysKey) {
    S.sysKey = key;
    const grid = clear($("sys-grid"));
    for (const [id, titleKey] of cards) grid.append(card(id, titleKey, id === "kv" ? { extra: kvMetricSelect() } : {}));
  }
  S.shapes = {};
  const draw = { token_ids_cpu: drawTokenIds, block_table: drawBlockTable, kv: drawKv, attn_mask: drawMask };
  for (const [id] of cards) draw[id]();
}

function rowLens() {
  const n = A("num_tokens");
  return n || [];
}

// per row, the range [from, to) of token_ids_cpu filled since the previous step
function newTokenRanges() {
  const lens = rowLens();
  const prevLen = {};
  if (S.prev && S.prev.arrays.num_tokens) S.prev.batch.req_ids.forEach((rid, r) => { prevLen[rid] = S.prev.arrays.num_tokens.data[r]; });
  const out = [];
  S.trace.batch.req_ids.forEach((rid, r) => {
    const from = prevLen[rid] !== undefined ? prevLen[rid] : 0;
    if (lens[r] > from) out.push([r, from, lens[r]]);
  });
  return out;
}

function newTokenCells() {
  const out = new Set();
  for (const [r, from, to] of newTokenRanges()) for (let c = from; c < to; c++) out.add(`${r},${c}`);
  return out;
}

function drawTokenIds() {
  const arr = S.trace.arrays.token_ids_cpu;
  const lens = rowLens();
  const rows = arr.data.slice(0, 64).map((row, r) => row.slice(0, 1024).map((v, c) => (c < (lens[r] || 0) ? v : null)));
  const fresh = newTokenCells();
  S.shapes.token_ids_cpu = newTokenRanges().map(([r, from, to]) => spanShape(from, to, r, "#D55E00"));
  if (showView("token_ids_cpu")) {
    clear($("tbl-token_ids_cpu")).append(gridTable("table-token_ids_cpu", rows, {
      label: L("token_ids_cpu"), cellText: (r, c) => (rows[r][c] === null ? "?" : rows[r][c]),
      cellClass: (r, c) => (fresh.has(`${r},${c}`) ? "new" : rows[r][c] === null ? "empty" : ""),
    }));
  } else {
    heatmap($("hm-token_ids_cpu"), rows, { title: "token_ids_cpu", xTitle: L("ax_position"), yTitle: L("ax_row"), shapes: shapesFor("token_ids_cpu"),
      hover: "row %{y}, position %{x}: id %{z}<extra></extra>", showscale: false });
    onCellClick("token_ids_cpu", (r) => (r < S.trace.batch.req_ids.length ? { kind: "request", index: r } : null));
  }
}

function newBlockSet() {
  const out = new Set();
  for (const blocks of Object.values(S.trace.scheduler.new_block_ids || {})) blocks.forEach((b) => out.add(b));
  return out;
}

function drawBlockTable() {
  const name = btName();
  const data = S.trace.arrays[name].data.slice(0, 64);
  // a block is new in the row of the request it was added to (a prefix-cache hit is new to the
  // request that found it, not to the one that wrote it)
  const added = S.trace.scheduler.new_block_ids || {};
  const freshIn = S.trace.batch.req_ids.map((rid) => new Set(added[rid] || []));
  const isNew = (r, v) => Boolean(freshIn[r] && freshIn[r].has(v));
  const empty = name === "block_table" ? 0 : -1;
  S.shapes.block_table = [];
  data.forEach((row, r) => row.forEach((v, c) => { if (v !== empty && isNew(r, v)) S.shapes.block_table.push(cellShape(c, r, "#D55E00", "dot", 2)); }));
  if (showView("block_table")) {
    clear($("tbl-block_table")).append(gridTable("table-block_table", data, {
      label: L(name), cellClass: (r, c) => (data[r][c] === empty ? "zero" : isNew(r, data[r][c]) ? "new" : ""),
    }));
  } else {
    const z = data.map((row) => row.map((v) => (v === empty ? null : v)));
    heatmap($("hm-block_table"), z, { title: name, xTitle: L("ax_logical"), yTitle: L("ax_row"), shapes: shapesFor("block_table"),
      hover: "row %{y}, logical block %{x}: physical block %{z}<extra></extra>" });
    onCellClick("block_table", (r, c, v) => (v !== null && v !== undefined ? { kind: "block", index: Number(v) } : null));
  }
}

const MAX_KV_BLOCKS = 256;

// Owner colours: one category per request of this step's batch (its row), then, when present, one
// for blocks shared by several requests (prefix-cache hits) and one, grey, for blocks held by a
// request that is not in the batch this step (waiting to be scheduled again, or a nano-vllm decode).
const OWNER_SHARED = "#444444", OWNER_OTHER = "#bbbbbb";

function kvGrid() {
  const kv = S.trace.kv_cache;
  const nb = Math.min(kv.num_blocks, MAX_KV_BLOCKS);
  const bs = Math.min(kv.block_size, 512);
  const reqRow = {};
  S.trace.batch.req_ids.forEach((rid, r) => { reqRow[rid] = r; });
  const freePos = {};
  kv.free_block_queue.forEach((b, i) => { freePos[b] = i; });
  const ownersOf = [], ownerKind = [];
  for (let b = 0; b < nb; b++) {
    const owners = kv.owners[String(b)] || [];
    ownersOf.push(owners);
    ownerKind.push(!owners.length ? null : owners.length > 1 ? "shared" : reqRow[owners[0]] !== undefined ? reqRow[owners[0]] : "other");
  }
  const cats = S.trace.batch.req_ids.map((rid, r) => ({ value: r, label: plotlyText(rid), color: colorOf(r) }));
  for (const [kind, color] of [["shared", OWNER_SHARED], ["other", OWNER_OTHER]]) {
    if (ownerKind.includes(kind)) cats.push({ value: cats.length, kind, label: L(kind === "shared" ? "shared_block" : "not_in_batch"), color });
  }
  const catOf = (k) => (k === null ? null : typeof k === "number" ? k : cats.find((c) => c.kind === k).value);
  const z = [], text = [];
  for (let b = 0; b < nb; b++) {
    const owners = ownersOf[b];
    const written = kv.written_slots ? kv.written_slots[b] : null;
    const label = `block ${b}` + (owners.length ? `, ${L("req")} ${owners.map(plotlyText).join("+")}` : freePos[b] !== undefined ? `, ${L("free")} #${freePos[b]}` : "") +
      `, ref ${kv.ref_cnt[b]}` + (written !== null ? `, written ${written}/${kv.block_size}` : "") + (b === 0 && S.overview.flavor !== "nanovllm" ? ` (${L("null_block")})` : "");
    const zr = [], tr = [];
    for (let s = 0; s < bs; s++) {
      let v;
      if (S.kvMetric === "owner") v = catOf(ownerKind[b]);
      else if (S.kvMetric === "ref_cnt") v = kv.ref_cnt[b];
      else if (S.kvMetric === "written") v = written === null ? null : s < written ? 1 : 0;
      else v = freePos[b] !== undefined ? freePos[b] : null;
      zr.push(v);
      tr.push(`slot ${b * kv.block_size + s}, ${label}`);
    }
    z.push(zr); text.push(tr);
  }
  return { z, text, nb, bs, owned: ownersOf.map((o) => o.join("+")), cats };
}

function drawKv() {
  const { z, text, nb, owned, cats } = kvGrid();
  const fresh = newBlockSet();
  const bs = S.trace.kv_cache.block_size;
  S.shapes.kv = runs([...fresh].filter((b) => b < nb)).map(([lo, hi]) => blockRunShape(lo, hi, Math.min(bs, 512), "#D55E00"));
  const id = "kv";
  const owner = S.kvMetric === "owner";
  if (showView(id)) {
    // the table names the owner request(s) itself; the other metrics are numbers
    clear($("tbl-kv")).append(gridTable("table-kv", z, {
      label: L("kv_cache"), rowHeader: (r) => `block ${r}`, maxRows: MAX_KV_BLOCKS,
      cellText: (r, c) => (z[r][c] === null ? "·" : owner ? owned[r] : z[r][c]),
      cellClass: (r, c) => (fresh.has(r) ? "new" : ""),
    }));
    $("tbl-kv").querySelectorAll("td").forEach((td) => { td.dataset.slot = Number(td.dataset.r) * bs + Number(td.dataset.c); });
  } else {
    const colors = cats.length ? cats.map((c) => c.color) : [OWNER_OTHER];
    // one labelled tick per category; past 16 requests every k-th request keeps its label
    const every = Math.ceil(cats.filter((c) => !c.kind).length / 16);
    const ticks = cats.filter((c) => c.kind || c.value % every === 0);
    const colorbar = owner ? { tickmode: "array", tickvals: ticks.map((c) => c.value), ticktext: ticks.map((c) => c.label) } : {};
    heatmap($("hm-kv"), z, { title: `KV cache (${L("m_" + S.kvMetric)})`, xTitle: L("ax_slot"), yTitle: L("ax_physical"), text,
      hover: "%{text}<extra></extra>", colorscale: owner ? discreteScale(colors) : "Viridis",
      zmin: owner ? -0.5 : undefined, zmax: owner ? colors.length - 0.5 : undefined, colorbar, shapes: shapesFor("kv") });
    onCellClick("kv", (r) => ({ kind: "block", index: r }));
  }
  if (S.trace.kv_cache.num_blocks > MAX_KV_BLOCKS && !$("kv-note")) {
    $("tbl-kv").after(el("p", { id: "kv-note", class: "muted", text: L("kv_note_cap").replace("{n}", MAX_KV_BLOCKS) }));
  }
}

// contiguous runs [lo, hi] of sorted block ids, so adjacent new blocks get one outline
function runs(ids) {
  const out = [];
  for (const b of ids.sort((x, y) => x - y)) {
    if (out.length && out[out.length - 1][1] === b - 1) out[out.length - 1][1] = b;
    else out.push([b, b]);
  }
  return out;
}

function blockRunShape(lo, hi, width, color) {
  return { type: "rect", x0: -0.5, x1: width - 0.5, y0: lo - 0.5, y1: hi + 0.5, line: { color, width: 2, dash: "dot" }, fillcolor: "rgba(0,0,0,0)" };
}

function spanShape(from, to, r, color) {
  return { type: "rect", x0: from - 0.5, x1: to - 0.5, y0: r - 0.5, y1: r + 0.5, line: { color, width: 2, dash: "dot" }, fillcolor: "rgba(0,0,0,0)" };
}

// clicking a heatmap cell selects what it stands for, as clicking the table view does
function onCellClick(id, pick) {
  const div = $(`hm-${id}`);
  if (!div || !div.on) return;
  if (div.removeAllListeners) div.removeAllListeners("plotly_click");
  div.on("plotly_click", (ev) => {
    const pt = ev.points && ev.points[0];
    const sel = pt ? pick(Number(pt.y), Number(pt.x), pt.z) : null;
    if (sel) select(sel);
  });
}

// a stepwise colour scale: category i (of colors.length) takes colors[i]
function discreteScale(colors) {
  const out = [], n = colors.length;
  colors.forEach((c, i) => out.push([i / n, c], [(i + 1) / n, c]));
  return out;
}

function drawMask() {
  const m = S.trace.arrays.attn_mask.data;
  if (showView("attn_mask")) {
    clear($("tbl-attn_mask")).append(gridTable("table-attn_mask", m, { label: L("attn_mask"), cellClass: (r, c) => (m[r][c] ? "masked" : "") }));
  } else {
    heatmap($("hm-attn_mask"), m, { shapes: shapesFor("attn_mask"), title: `attn_mask ${m.length} × ${m[0] ? m[0].length : 0}`, xTitle: L("ax_key"), yTitle: L("ax_row"),
      colorscale: [[0, "#ffffff"], [1, "#0072B2"]], zmin: 0, zmax: 1, hover: "row %{y}, key %{x}: %{z}<extra></extra>" });
  }
}

// ------------------------------------------------------------------ linked highlighting
function setHover(sel) { S.hover = sel; applySelection(); }

function select(sel) {
  S.sel = sel;
  state.tok = sel && sel.kind === "token" ? sel.index : -1;
  writeState(state);
  applySelection();
}

function targets(sel) {
  // what a selection touches: token indices, request rows, (row, col) cells and KV slots/blocks
  const out = { tokens: new Set(), rows: new Set(), tokCells: [], btCells: [], kvSlots: [], kvBlocks: new Set(), maskRows: new Set() };
  if (!sel || !S.trace || S.trace.idle) return out;
  const reqOf = reqOfTokens();
  const pos = A("positions") || [];
  const slots = A("slot_mapping") || [];
  const bs = blockSize();
  const bt = S.trace.arrays[btName()] ? S.trace.arrays[btName()].data : [];
  const T = tokenCount();
  const mask = A("attn_mask");
  const addToken = (i) => {
    const r = reqOf[i];
    out.tokens.add(i); out.rows.add(r);
    out.tokCells.push([r, pos[i]]);
    out.btCells.push([r, Math.floor(pos[i] / bs)]);
    out.kvSlots.push(slots[i]);
    if (mask) out.maskRows.add(mask.length === T ? i : pos[i]);
  };
  if (sel.kind === "token") addToken(sel.index);
  else if (sel.kind === "request") {
    for (let i = 0; i < T; i++) if (reqOf[i] === sel.index) addToken(i);
    out.rows.add(sel.index);
    (bt[sel.index] || []).forEach((b, c) => { if (b > 0 || (b === 0 && S.overview.flavor === "nanovllm")) { out.kvBlocks.add(b); out.btCells.push([sel.index, c]); } });
  } else if (sel.kind === "block") {
    for (let i = 0; i < T; i++) if (Math.floor(slots[i] / bs) === sel.index) addToken(i);
    out.kvBlocks.add(sel.index);
    bt.forEach((row, r) => row.forEach((b, c) => { if (b === sel.index) { out.btCells.push([r, c]); out.rows.add(r); } }));
  }
  return out;
}

function applySelection({ plots = true } = {}) {
  if (!S.trace) return;
  const sel = S.hover || S.sel;
  const tg = targets(sel);
  document.querySelectorAll(".hl").forEach((n) => n.classList.remove("hl"));
  const tokTable = $("token-table");
  if (tokTable) tg.tokens.forEach((i) => tokTable.querySelectorAll(`[data-t="${i}"]`).forEach((c) => c.classList.add("hl")));
  const reqTable = $("request-table");
  if (reqTable) tg.rows.forEach((r) => { const row = reqTable.querySelector(`tr[data-r="${r}"]`); if (row) row.classList.add("hl"); });
  const mark = (tableId, cells) => {
    const tb = $(tableId);
    if (tb) cells.forEach(([r, c]) => { const cell = tb.querySelector(`td[data-r="${r}"][data-c="${c}"]`); if (cell) cell.classList.add("hl"); });
  };
  mark("table-token_ids_cpu", tg.tokCells);
  mark("table-block_table", tg.btCells);
  const kvTable = $("table-kv");
  if (kvTable) {
    tg.kvSlots.forEach((s) => { const cell = kvTable.querySelector(`td[data-slot="${s}"]`); if (cell) cell.classList.add("hl"); });
    tg.kvBlocks.forEach((b) => { const row = kvTable.querySelector(`tr[data-r="${b}"]`); if (row) row.classList.add("hl"); });
  }
  const maskTable = $("table-attn_mask");
  if (maskTable) tg.maskRows.forEach((r) => { const row = maskTable.querySelector(`tr[data-r="${r}"]`); if (row) row.classList.add("hl"); });
  if (plots) relayoutShapes(tg);
  renderSelection(sel, tg);
  renderSubstituted();
}

// the outlines a selection puts on each heatmap
function selectionShapes(tg) {
  const bs = blockSize();
  const HL = "#000000";
  const kv = tg.kvSlots.map((s) => cellShape(s % bs, Math.floor(s / bs), HL));
  tg.kvBlocks.forEach((b) => kv.push(rowShape(b, Math.min(bs, 512), HL)));
  const m = A("attn_mask");
  return {
    token_ids_cpu: tg.tokCells.map(([r, c]) => cellShape(c, r, HL)),
    block_table: tg.btCells.map(([r, c]) => cellShape(c, r, HL)),
    kv,
    attn_mask: m ? [...tg.maskRows].map((r) => rowShape(r, m[0].length, HL)) : [],
  };
}

// change marks plus selection outlines, for drawing a heatmap in one go
function shapesFor(id) {
  return [...(S.shapes[id] || []), ...selectionShapes(targets(S.hover || S.sel))[id]];
}

function relayoutShapes(tg) {
  const extra = selectionShapes(tg);
  for (const id of Object.keys(extra)) {
    const div = $(`hm-${id}`);
    if (div && !div.hidden && div.data) window.Plotly.relayout(div, { shapes: [...(S.shapes[id] || []), ...extra[id]] });
  }
}

function renderSelection(sel, tg) {
  const box = $("selection");
  if (!sel) { box.textContent = L("none_selected"); return; }
  const bs = blockSize();
  if (sel.kind === "token") {
    const i = sel.index;
    const r = reqOfTokens()[i];
    const pos = A("positions")[i];
    const slot = A("slot_mapping")[i];
    const blk = Math.floor(slot / bs);
    box.textContent = `${L("sel_token")} ${i} · ${L("req")} ${S.trace.batch.req_ids[r]} (${L("row")} ${r}) · ${L("sel_position")} ${pos} · ` +
      `${btName()}[${r}][${Math.floor(pos / bs)}] = ${blk} · ${L("sel_slot")} ${slot} = ${blk} × ${bs} + ${slot % bs}`;
  } else if (sel.kind === "request") {
    box.textContent = `${L("req")} ${S.trace.batch.req_ids[sel.index]} (${L("row")} ${sel.index}) · ${tg.tokens.size} ${L("token")} · ${L("sel_block")} [${[...tg.kvBlocks].join(", ")}]`;
  } else {
    box.textContent = `${L("sel_block")} ${sel.index} · ${L("sel_slot")} ${sel.index * bs}..${sel.index * bs + bs - 1} · ${tg.tokens.size} ${L("token")}`;
  }
}

// ------------------------------------------------------------------ controls
function stopPlay() {
  if (S.timer) { clearInterval(S.timer); S.timer = null; }
  $("btn-play").textContent = "▶";
  $("btn-play").dataset.i18nAria = "play";
  $("btn-play").setAttribute("aria-label", L("play"));
}

function togglePlay() {
  if (S.timer) return stopPlay();
  $("btn-play").textContent = "⏸";
  $("btn-play").setAttribute("aria-label", L("pause"));
  S.timer = setInterval(() => {
    if (state.step >= S.overview.num_steps) return stopPlay();
    showStep(state.step + 1);
  }, 1000 / S.speed);
}

function setLang(lang) {
  state.lang = lang;
  applyI18n(document, lang);
  document.querySelectorAll("[data-lang]").forEach((b) => b.setAttribute("aria-pressed", b.dataset.lang === lang ? "true" : "false"));
  if (S.overview) {
    const sc = S.overview.scenario;
    $("run-title").textContent = sc.title || sc.name;
    if (lang === "zh") localTitle(sc);
    buildTimeline();
    renderStep();
  }
  writeState(state);
}

function setPresent(on) {
  state.present = on;
  document.body.classList.toggle("present", on);
  $("btn-present").textContent = L(on ? "leave_present" : "present");
  $("btn-present").dataset.i18n = on ? "leave_present" : "present";
  writeState(state);
  if (S.trace) {
    renderSystem();
    applySelection();
  }
}

async function copyLink() {
  const url = window.location.origin + writeState(state);
  const out = $("link-out");
  out.value = url;
  out.hidden = false;
  out.select();
  try { await navigator.clipboard.writeText(url); } catch (_) { /* the selected field is the fallback */ }
  setStatus(L("copied"));
}

async function rerun() {
  const msg = clear($("editor-msg"));
  const check = await postJSON("/api/scenarios/validate", $("scenario-json").value);
  if (!check.ok || !check.data.valid) {
    msg.append(el("ul", {}, errorLines(check.data).map((l) => el("li", { text: l }))));
    return;
  }
  const r = await postJSON("/api/runs", $("scenario-json").value);
  if (!r.ok) { msg.append(el("ul", {}, errorLines(r.data).map((l) => el("li", { text: l })))); return; }
  window.location.href = `/run?s=${encodeURIComponent(r.data.link)}${state.lang === "zh" ? "&lang=zh" : ""}`;
}

function onKey(e) {
  const tag = (e.target.tagName || "").toLowerCase();
  if (["input", "textarea", "select"].includes(tag)) return;
  if (!S.overview) return;
  if (e.key === "ArrowRight") { stopPlay(); showStep(state.step + 1); }
  else if (e.key === "ArrowLeft") { stopPlay(); showStep(state.step - 1); }
  else if (e.key === "ArrowDown") moveStage(1);
  else if (e.key === "ArrowUp") moveStage(-1);
  else if (e.key === " ") togglePlay();
  else if (e.key === "?") { $("help").hidden = !$("help").hidden; }
  else if (e.key === "Escape") { $("help").hidden = true; select(null); return; }
  else return;
  e.preventDefault();
}

function wire() {
  $("btn-first").onclick = () => { stopPlay(); showStep(1); };
  $("btn-prev").onclick = () => { stopPlay(); showStep(state.step - 1); };
  $("btn-next").onclick = () => { stopPlay(); showStep(state.step + 1); };
  $("btn-last").onclick = () => { stopPlay(); showStep(S.overview.num_steps); };
  $("btn-play").onclick = togglePlay;
  $("speed").onchange = (e) => { S.speed = Number(e.target.value); if (S.timer) { stopPlay(); togglePlay(); } };
  document.querySelectorAll("[data-lang]").forEach((b) => { b.onclick = () => setLang(b.dataset.lang); });
  $("btn-present").onclick = () => setPresent(!state.present);
  $("btn-copy").onclick = copyLink;
  $("btn-help").onclick = () => { $("help").hidden = !$("help").hidden; };
  $("btn-help-close").onclick = () => { $("help").hidden = true; };
  $("btn-rerun").onclick = rerun;
  const tok = $("tok-table");
  tok.addEventListener("mouseover", (e) => { const c = e.target.closest("[data-t]"); if (c && Number(c.dataset.t) < tokenCount()) setHover({ kind: "token", index: Number(c.dataset.t) }); });
  tok.addEventListener("mouseleave", () => setHover(null));
  tok.addEventListener("click", (e) => { const c = e.target.closest("[data-t]"); if (c && Number(c.dataset.t) < tokenCount()) select({ kind: "token", index: Number(c.dataset.t) }); });
  tok.addEventListener("focusin", (e) => { const c = e.target.closest("[data-t]"); if (c) select({ kind: "token", index: Number(c.dataset.t) }); });
  $("sys-grid").addEventListener("click", (e) => {
    const cell = e.target.closest("td[data-r]");
    if (!cell) return;
    const table = cell.closest("table");
    if (table.id === "table-block_table" && Number(cell.textContent) > 0) select({ kind: "block", index: Number(cell.textContent) });
    else if (table.id === "table-kv") select({ kind: "block", index: Number(cell.dataset.r) });
    else if (table.id === "table-token_ids_cpu") select({ kind: "request", index: Number(cell.dataset.r) });
  });
  document.addEventListener("keydown", onKey);
}

async function boot() {
  applyI18n(document, state.lang);
  document.querySelectorAll("[data-lang]").forEach((b) => b.setAttribute("aria-pressed", b.dataset.lang === state.lang ? "true" : "false"));
  document.body.classList.toggle("present", state.present);
  if (state.present) { $("btn-present").textContent = L("leave_present"); $("btn-present").dataset.i18n = "leave_present"; }
  wire();
  try {
    await loadRun();
  } catch (err) {
    showError({ detail: [{ field: "", message: String(err.message || err) }] });
  }
  window.pagedvizTiming.firstRenderMs = performance.now();
  document.body.dataset.content = "1";
  // let the tables paint before Plotly's evaluation takes the main thread
  await new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
  await loadPlotly();
  if (S.trace) {
    renderSystem();
    applySelection();
  }
  window.pagedvizTiming.heatmapsMs = performance.now();
  document.body.dataset.ready = "1";
}

boot();
