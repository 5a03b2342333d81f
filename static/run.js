// The run page's glue: loads the run, walks its steps and stages, and wires the views together.
// Each view lives in its own module -- timeline.js (steps, badges, changes), stages.js (stage list
// and formulas), tables.js (request and token tables), heatmaps.js (token_ids_cpu, block table,
// attention mask), kvgrid.js (KV cache), hover.js (linked hover and selection), export.js (array
// downloads, PNG, copied link) -- and reads the run from trace.js, which this file fills.

import { errorLines, getJSON, postJSON, unpackLink, withProgress } from "./api.js";
import { copyLink } from "./export.js";
import { renderFeatures, showNotes } from "./features.js";
import { card, drawBlockTable, drawMask, drawTokenIds } from "./heatmaps.js";
import { applySelection, lightArray, select, selectionFromState, wireHover } from "./hover.js";
import { applyI18n, progressText } from "./i18n.js";
import { drawKv, kvMetricSelect } from "./kvgrid.js";
import { renderStageDetail, renderStages } from "./stages.js";
import { writeState } from "./state.js";
import { renderRequestTable, renderTokenTable } from "./tables.js";
import { $, L, S, btName, stageNames, state } from "./trace.js";
import { buildTimeline, renderBadges, renderChanges, renderQueue, renderTimelineActive } from "./timeline.js";
import { clear, el, loadPlotly, showUpstream } from "./views.js";
import { ctl, emitView } from "./bus.js";
import { initTeach } from "./teach.js";
import { placeWindow, renderOverview } from "./overview.js";

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
  showNotes(sc);
  $("flavor-badge").textContent = sc.flavor;
  $("scenario-json").value = JSON.stringify(sc, null, 2);
  $("truncated").hidden = !ov.data.truncated;
  buildTimeline(pickStep);
  setStatus("");
  await showStep(state.step);
  emitView("run");
}

// another run in place (a lesson's section, a what-if): {preset} or {link}, at {step, stage}
async function loadInPlace(src, at = {}) {
  stopPlay();
  if (src.preset) { state.preset = src.preset; state.s = ""; } else { state.s = src.link; state.preset = ""; }
  S.steps = new Map();
  S.sysKey = null;
  S.sel = null;
  state.tok = -1;
  if (at.step) state.step = at.step;
  if (at.stage) state.stage = at.stage;
  clear($("error")).hidden = true;
  await loadRun();
  if (window.Plotly && S.trace) redrawSystem();
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
  S.sel = selectionFromState();
  S.hover = null;
  renderStep();
  writeState(state);
  window.pagedvizTiming.lastStepMs = performance.now() - t0;
  document.body.dataset.step = String(n);
  emitView("step");
}

function setStage(name) {
  state.stage = name;
  renderStages(setStage);
  renderTokenTable();
  renderStageDetail();
  writeState(state);
  emitView("stage");
}

function moveStage(delta) {
  const names = stageNames();
  const i = Math.max(0, Math.min(names.length - 1, names.indexOf(state.stage) + delta));
  setStage(names[i]);
}

// every view of the step; the heatmaps were drawn with the selection already
// (each view's time goes to window.pagedvizTiming.parts, each system card's to .systemParts)
function renderStep() {
  const parts = {};
  const timed = (name, f) => { const t = performance.now(); f(); parts[name] = performance.now() - t; };
  timed("timeline", () => { renderTimelineActive(); renderBadges(); renderChanges(); renderQueue(pickRequest); });
  timed("stages", () => { renderStages(setStage); renderStageDetail(); });
  timed("requests", renderRequestTable);
  timed("tokens", renderTokenTable);
  timed("overview", () => renderOverview(pickRequest));
  timed("system", renderSystem);
  timed("selection", () => { applySelection({ plots: false }); lightArray(state.array || null); });
  window.pagedvizTiming.parts = parts;
}

function pickStep(n) { stopPlay(); showStep(n); }

// focus on one request: select it where it is in the batch, else keep it for the steps it is in
function pickRequest(rid) {
  const r = S.trace.batch.req_ids.map(String).indexOf(rid);
  if (r >= 0) { select({ kind: "request", index: r }); refocus(); return; }
  state.req = rid; state.pos = -1; state.block = -1;
  S.sel = null;
  writeState(state);
  applySelection();
  refocus();
}

// the views that put the focused request first redraw around it
function refocus() {
  renderRequestTable();
  renderTokenTable();
  renderOverview(pickRequest);
  applySelection({ plots: false });
}

// ------------------------------------------------------------------ system level
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
    for (const [id, titleKey] of cards) grid.append(card(id, titleKey, id === "kv" ? { extra: kvMetricSelect(redrawSystem), onToggle: redrawSystem } : { onToggle: redrawSystem }));
  }
  S.shapes = {};
  const draw = { token_ids_cpu: drawTokenIds, block_table: drawBlockTable, kv: drawKv, attn_mask: drawMask };
  const parts = (window.pagedvizTiming.systemParts = {});
  for (const [id] of cards) { const t = performance.now(); draw[id](); parts[id] = Math.round(performance.now() - t); }
  renderFeatures();
}

function redrawSystem() {
  renderSystem();
  applySelection();
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
    showNotes(sc);
    buildTimeline(pickStep);
    renderStep();
  }
  writeState(state);
  emitView("lang");
}

function setPresent(on) {
  state.present = on;
  document.body.classList.toggle("present", on);
  $("btn-present").textContent = L(on ? "leave_present" : "present");
  $("btn-present").dataset.i18n = on ? "leave_present" : "present";
  writeState(state);
  if (S.trace) { renderStep(); applySelection(); }
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

// Space and Enter belong to the focused control (a button presses, a link opens, a cell selects);
// Space plays only when no control has the focus
function ownsSpace(target) {
  return Boolean(target.closest && target.closest("button, a[href], summary, [tabindex], [role=tab], label"));
}

function onKey(e) {
  const tag = (e.target.tagName || "").toLowerCase();
  if (["input", "textarea", "select"].includes(tag)) return;
  if (!S.overview) return;
  if (e.key === " " && ownsSpace(e.target)) {
    // a focused cell or row has no Space of its own: it selects, as a click does
    if (!e.target.closest("button, a[href], summary, label")) { e.preventDefault(); e.target.click(); }
    return;
  }
  if (e.key === "ArrowRight") pickStep(state.step + 1);
  else if (e.key === "ArrowLeft") pickStep(state.step - 1);
  else if (e.key === "ArrowDown") moveStage(1);
  else if (e.key === "ArrowUp") moveStage(-1);
  else if (e.key === " ") togglePlay();
  else if (e.key === "?") { $("help").hidden = !$("help").hidden; }
  else if (e.key === "Escape") { $("help").hidden = true; select(null); return; }
  else return;
  e.preventDefault();
}

function wire() {
  $("btn-first").onclick = () => pickStep(1);
  $("btn-prev").onclick = () => pickStep(state.step - 1);
  $("btn-next").onclick = () => pickStep(state.step + 1);
  $("btn-last").onclick = () => pickStep(S.overview.num_steps);
  $("btn-play").onclick = togglePlay;
  $("speed").onchange = (e) => { S.speed = Number(e.target.value); if (S.timer) { stopPlay(); togglePlay(); } };
  document.querySelectorAll("[data-lang]").forEach((b) => { b.onclick = () => setLang(b.dataset.lang); });
  $("btn-present").onclick = () => setPresent(!state.present);
  $("btn-copy").onclick = copyLink;
  $("btn-help").onclick = () => { $("help").hidden = !$("help").hidden; };
  $("btn-help-close").onclick = () => { $("help").hidden = true; };
  $("btn-rerun").onclick = rerun;
  wireHover();
  document.addEventListener("keydown", onKey);
  S.onFocusChange = refocus;
  S.onTokens = () => placeWindow();
  $("tok-table").addEventListener("scroll", () => placeWindow());
  Object.assign(ctl, { showStep, setStage, load: loadInPlace, stopPlay });
  initTeach();
}

async function boot() {
  applyI18n(document, state.lang);
  document.querySelectorAll("[data-lang]").forEach((b) => b.setAttribute("aria-pressed", b.dataset.lang === state.lang ? "true" : "false"));
  document.body.classList.toggle("present", state.present);
  if (state.present) { $("btn-present").textContent = L("leave_present"); $("btn-present").dataset.i18n = "leave_present"; }
  wire();
  const health = getJSON("/healthz");
  try {
    await loadRun();
  } catch (err) {
    showError({ detail: [{ field: "", message: String(err.message || err) }] });
  }
  showUpstream(S.overview, (await health).data);  // the run's own upstream first, else the server's
  window.pagedvizTiming.firstRenderMs = performance.now();
  document.body.dataset.content = "1";
  // let the tables paint before Plotly's evaluation takes the main thread
  await new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
  await loadPlotly();
  if (S.trace) redrawSystem();
  window.pagedvizTiming.heatmapsMs = performance.now();
  if (state.array) { const row = document.querySelector(`#token-table tr[data-array="${CSS.escape(state.array)}"]`); if (row) row.scrollIntoView({ block: "center" }); }
  document.body.dataset.ready = "1";
}

boot();
