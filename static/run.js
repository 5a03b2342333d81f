// The run page's glue: loads the run, walks its steps and stages, and wires the views together.
// stepviews.js draws a step's views and runfetch.js fetches its steps and stage list.
// Each view lives in its own module -- timeline.js (steps, badges, changes), stages.js (stage list
// and formulas), tables.js (request and token tables), heatmaps.js (token_ids_cpu, block table,
// attention mask), kvgrid.js (KV cache), hover.js (linked hover and selection), export.js (array
// downloads, PNG, copied link) -- and reads the run from context.js, which this file fills.

import { errorLines, getJSON, postJSON, withProgress } from "./api.js";
import { startRun, takeEarlyRun } from "./boot.js";
import { copyLink } from "./export.js";
import { localTitleOf, showNotes } from "./features.js";
import { applySelection, select, selectionFromState, wireHover } from "./hover.js";
import { applyI18n, progressText } from "./i18n.js";
import { writeState } from "./urlstate.js";
import { $, L, S, bigBatch, stageNames, state } from "./context.js";
import { fetchStep, partialOverview, pendingSteps, stagesOf } from "./runfetch.js";
import { moveStage, refocus, renderStep, setStage } from "./stepviews.js";
import { buildTimeline, renderTimelineActive } from "./timeline.js";
import { clear, el, runHeaderText, showUpstream } from "./views.js";
import { whenIdle } from "./canvasmap.js";
import { ctl, emitView } from "./bus.js";
import { initTeach } from "./teach.js";
import { initLive } from "./live.js";
import { narrationOf } from "./narration.js";
import { placeWindow } from "./overview.js";
import { liveJsonEditor } from "./jsoneditor.js";

// ------------------------------------------------------------------ loading
// Each run loaded in place starts a generation: the work of an earlier one still under way (a run
// loading, a step fetched or drawn, a prefetch) is dropped when it lands, never drawn as, or kept
// for, the run now on show.
let generation = 0;
const superseded = (g) => g !== generation;

async function loadRun() {
  const g = generation;
  setStatus(L("loading"));
  // a run streams: the server answers once step 1 exists (202, complete: false) and the later
  // steps join the timeline as they are computed
  const started = await (takeEarlyRun() || startRun(state));
  if (started.error) return showError(started.error);
  const { scenario, request } = started;
  // a long run says how far it has come while the request waits for it (its id asked for only
  // once the wait is long: the check is work for the server that a quick run does not need)
  const runId = scenario
    ? () => postJSON("/api/scenarios/validate", scenario).then((c) => (c.ok && c.data.valid ? c.data.run_id : null))
    : null;
  const created = await withProgress(runId, request, (p) => setStatus(progressText(state.lang, p)));
  if (superseded(g)) return undefined;
  if (!created.ok) return showError(created.data);
  // the run and its steps' cache change together: a step of the run before that lands later is
  // not kept for this one (fetchStep)
  S.created = created.data;
  S.steps = new Map();
  if (!state.run && !state.example) state.s = created.data.link;  // a recording's run stays one
  state.preset = "";
  const streaming = created.data.complete === false;
  const [ov, stages] = await Promise.all([
    streaming ? partialOverview(created.data) : getJSON(`/api/runs/${created.data.run_id}`),
    stagesOf(started, created.data)]);
  if (superseded(g)) return undefined;
  if (!ov.ok || !stages.ok) return showError(ov.ok ? stages.data : ov.data);
  S.overview = ov.data;
  S.stages = stages.data;
  document.body.dataset.complete = "0";
  const sc = ov.data.scenario;
  showTitle(sc);
  // complete once the notes are shown too (in 中文 they wait for the presets' translations)
  showNotes(sc).then(() => { if (!streaming && !superseded(g)) document.body.dataset.complete = "1"; });
  $("flavor-badge").textContent = sc.flavor;
  showRunHeader();
  S.editorRun = null;
  fillEditor();
  $("truncated").hidden = !ov.data.truncated;
  drawTimeline();
  setStatus("");
  await showStep(state.step);
  emitView("run");
  if (streaming) followRun(created.data.run_id);
}

// the timeline: a button per step computed; while the run computes, its steps so far (their
// summaries come with the whole run) and one disabled mark for the steps still to come
function drawTimeline() {
  buildTimeline(pickStep);
  if (S.overview.complete !== false) return;
  for (const b of $("timeline").querySelectorAll(".kind-pending")) {
    const label = `${L("step")} ${b.dataset.step}`;
    b.setAttribute("aria-label", label);
    b.title = label;
  }
  $("timeline").append(el("button", { class: "tl-step tl-pending", disabled: true, "aria-disabled": "true",
    "aria-label": S.progressText || L("loading"), title: S.progressText || "", text: "…" }));
  renderTimelineActive();
}

// while the run computes: its progress every so often, new steps into the timeline, then the
// whole run's overview (every step's summary) once it is done
async function followRun(runId) {
  const mine = S.created;
  let misses = 0;  // polls in a row that got no answer (a dropped connection, a busy server)
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 300 * 2 ** Math.min(misses, 4)));
    if (S.created !== mine) return;  // another run was loaded in place
    const p = await getJSON(`/api/runs/${encodeURIComponent(runId)}/progress`).catch((err) => ({ ok: false, status: 0, err }));
    if (S.created !== mine) return;
    if (!p.ok) {
      // a poll that failed is asked again, a few times; a run the server does not know says so
      misses += 1;
      if (p.status === 404 || misses > 8) { showError(p.err ? { detail: [{ field: "", message: String(p.err.message || p.err) }] } : p.data); return; }
      continue;
    }
    misses = 0;
    if (p.data.state === "computing" && p.data.steps_done > S.overview.num_steps) {
      S.overview.steps.push(...pendingSteps(S.overview.num_steps + 1, p.data.steps_done));
      S.overview.num_steps = p.data.steps_done;
      // the progress is the pending mark's label: a status line would shift the page when it goes
      S.progressText = progressText(state.lang, p.data);
      drawTimeline();
    } else if (p.data.state !== "computing" && p.data.state !== "queued" && p.data.state !== "waiting") {
      break;
    }
  }
  const ov = await getJSON(`/api/runs/${encodeURIComponent(runId)}`);
  if (S.created !== mine) return;
  if (!ov.ok) { showError(ov.data); return; }
  S.overview = ov.data;
  setStatus("");
  showUpstream(S.overview);
  showRunHeader();
  await showNotes(S.overview.scenario);  // an imported recording's notes say how far pagedviz's scheduler agrees, once replayed
  if (S.created !== mine) return;
  drawTimeline();
  renderTimelineActive();
  document.body.dataset.complete = "1";
  emitView("complete");
}

// another run in place (a lesson's section, a what-if): {preset} or {link}, at {step, stage}
async function loadInPlace(src, at = {}) {
  stopPlay();
  generation += 1;
  if (src.preset) { state.preset = src.preset; state.s = ""; } else { state.s = src.link; state.preset = ""; }
  S.sysKey = null;
  S.sel = null;
  state.tok = -1;
  if (at.step) state.step = at.step;
  if (at.stage) state.stage = at.stage;
  clear($("error")).hidden = true;
  await loadRun();
  showUpstream(S.overview);  // another run may have another runner (a lesson's section, a what-if on model_runner)
  showRunHeader();
}

// the header names what the run mirrors: vLLM's version and runner, nano-vllm's or vllm-ascend's commit
function showRunHeader() {
  const box = $("run-upstream");
  if (!box || !S.overview) return;
  box.textContent = runHeaderText(S.overview.upstream, { v1: L("hdr_v1"), v2: L("hdr_v2") });
  box.title = S.overview.upstream || "";
}

// the run's title in the page's language: in 中文 a preset's own Chinese title (same name and
// title), written once known; its English title is not shown first
function showTitle(sc) {
  const put = (text) => { $("run-title").textContent = $("run-title").title = text; };
  if (state.lang !== "zh") { put(sc.title || sc.name); return; }
  put("");
  localTitleOf(sc).then((text) => { if (S.overview && S.overview.scenario === sc) put(text); });
}

// the next steps (and their narration) are fetched while the page is idle, one at a time and a few
// ahead (one for a big batch, whose steps are big), so that stepping forward finds them here
const AHEAD = 3;
function prefetchNext(n) {
  const run = S.created && S.created.run_id, g = generation;
  const ahead = bigBatch() ? 1 : AHEAD;
  const next = (k) => {
    if (k > n + ahead || !S.overview || k > S.overview.num_steps || !S.created || S.created.run_id !== run) return;
    // a step's narration comes with it, so that it is drawn with the step, not a frame after it
    if (S.steps.has(k)) { narrationOf(run, k); next(k + 1); return; }
    // once the reader has moved on (another step, another run loading), the step now on show fetches its own
    whenIdle(() => { if (state.step === n && !superseded(g)) Promise.all([fetchStep(k), narrationOf(run, k)]).then(() => next(k + 1), () => {}); });
  };
  next(n + 1);
}

function setStatus(text) { $("status").textContent = text; }

function showError(data) {
  setStatus("");
  const box = clear($("error"));
  box.hidden = false;
  // the server's own lines, in English: said so in 中文, and marked as English text
  box.append(el("strong", { text: L("unknown_run") }), state.lang === "zh" ? el("p", { text: L("server_said") }) : null,
    el("ul", { lang: "en" }, errorLines(data).map((l) => el("li", { text: l }))));
}

// ------------------------------------------------------------------ step and stage
// timings the UI benchmark reads: first render since navigation and the last step change, each when
// the script is done and when its frame is painted
window.pagedvizTiming = { firstRenderMs: null, firstPaintMs: null, lastStepMs: null, lastStepPaintMs: null };
// the moment the frame that shows what was just drawn is painted (its style, layout and paint
// done): a task queued from the frame's animation callback runs after that frame
function afterPaint(f) { requestAnimationFrame(() => setTimeout(() => f(performance.now()), 0)); }

async function showStep(n) {
  const t0 = performance.now();
  const total = S.overview.num_steps;
  // while the run computes, the step after the last one seen may be asked for: the server answers
  // once it exists (or that there is none, and the page stays where it is)
  const streaming = S.overview.complete === false;
  n = Math.max(1, Math.min(streaming ? S.overview.scenario.max_steps || total + 1 : total, n || 1));
  const run = S.created, g = generation;
  let trace, prev;
  try {
    [trace, prev] = await Promise.all([fetchStep(n), n > 1 ? fetchStep(n - 1) : Promise.resolve(null)]);
  } catch (err) {
    if (S.created !== run || superseded(g)) return undefined;  // another run was loaded meanwhile: it shows its own step
    // past the run's last step: stay (or, on a first load, show the last step there is)
    if (streaming && n > total) return S.trace ? undefined : showStep(S.overview.num_steps);
    throw err;
  }
  // another run was loaded in place, or began loading, while this step was fetched (a lesson's
  // section, a what-if): its trace must not be drawn against that run's overview, nor its number
  // taken as the step the new run opens at
  if (S.created !== run || superseded(g)) return undefined;
  if (streaming && n > S.overview.num_steps) {
    S.overview.steps.push(...pendingSteps(S.overview.num_steps + 1, n));
    S.overview.num_steps = n;
    drawTimeline();
  }
  window.pagedvizTiming.fetchMs = performance.now() - t0;
  state.step = n;
  S.trace = trace;
  S.prev = prev;
  const names = stageNames();
  if (!names.includes(state.stage)) state.stage = names[0] || "";
  S.sel = selectionFromState();
  S.hover = null;
  const t1 = performance.now();
  // the address first, while the page is unchanged (writing it makes the browser bring its styles
  // up to date: after the views were rebuilt that is a full recalculation); again after, in case a
  // view changed the state (then only that write costs)
  writeState(state);
  renderStep();
  window.pagedvizTiming.renderMs = performance.now() - t1;
  writeState(state);
  window.pagedvizTiming.lastStepMs = performance.now() - t0;
  afterPaint((ms) => { window.pagedvizTiming.lastStepPaintMs = ms - t0; document.body.dataset.painted = String(n); });
  document.body.dataset.step = String(n);
  emitView("step");
  prefetchNext(n);
}

function pickStep(n) { stopPlay(); showStep(n); }

// ------------------------------------------------------------------ controls
function stopPlay() {
  if (S.timer) { clearInterval(S.timer); S.timer = null; }
  playGlyph(false);
}

// the play button's symbol: ▶, or a pause sign drawn by CSS (two bars), which no font can lack
function playGlyph(playing) {
  const b = $("btn-play");
  b.dataset.playing = playing ? "1" : "";
  b.dataset.i18nAria = playing ? "pause" : "play";
  b.setAttribute("aria-label", L(playing ? "pause" : "play"));
  b.title = L(playing ? "pause" : "play");
  if (playing) b.replaceChildren(el("span", { class: "glyph-pause", "aria-hidden": "true" }));
  else b.textContent = "▶";
}

function togglePlay() {
  if (S.timer) return stopPlay();
  playGlyph(true);
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
    showTitle(sc);
    showRunHeader();
    showNotes(sc);
    drawTimeline();
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
  // Space is the play key in presentation: the button just pressed must not keep the focus (Space
  // would press it again and leave)
  if (document.activeElement === $("btn-present")) $("btn-present").blur();
  writeState(state);
  if (S.trace) { renderStep(); applySelection(); }
}

// the editor's copy of the run's scenario, written when the editor is open (or opened): a big
// scenario's JSON is thousands of lines that the browser would otherwise style and lay out on
// every load, editor closed or not
function fillEditor() {
  const box = $("editor-panel").querySelector("details");
  if (!box || !box.open || !S.overview || !S.created || S.editorRun === S.created.run_id) return;
  S.editorRun = S.created.run_id;
  $("scenario-json").value = JSON.stringify(S.overview.scenario, null, 2);
  clear($("editor-msg")).className = "validation";  // a fresh copy of the run's scenario: nothing to say yet
}

// the editor's text is checked as it is typed; its answer stands beside it (jsoneditor.js)
let editor = null;

async function rerun() {
  if (!(await editor.check())) return;
  const r = await postJSON("/api/runs", $("scenario-json").value);
  if (!r.ok) {
    const msg = clear($("editor-msg"));
    msg.classList.remove("ok");
    msg.classList.add("bad");
    msg.dataset.state = "bad";
    msg.append(el("ul", {}, errorLines(r.data).map((l) => el("li", { text: l }))));
    return;
  }
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
  editor = liveJsonEditor($("scenario-json"), $("editor-msg"), () => state.lang);
  $("editor-panel").querySelector("details").addEventListener("toggle", fillEditor);
  wireHover();
  document.addEventListener("keydown", onKey);
  S.onFocusChange = refocus;
  S.onTokens = () => placeWindow();
  $("tok-table").addEventListener("scroll", () => placeWindow());
  Object.assign(ctl, { showStep, setStage, load: loadInPlace, stopPlay });
  initTeach();
  initLive();  // a live run: its mark and the follow toggle (live.js)
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
  // the heatmaps are canvases drawn with the step's tables: both are up at once
  window.pagedvizTiming.firstRenderMs = performance.now();
  window.pagedvizTiming.completeAtFirstPaint = Boolean(S.overview && S.overview.complete !== false);
  afterPaint((ms) => { window.pagedvizTiming.firstPaintMs = ms; document.body.dataset.firstPaint = "1"; });
  document.body.dataset.content = "1";
  if (state.array) { const row = document.querySelector(`#token-table tr[data-array="${CSS.escape(state.array)}"]`); if (row) row.scrollIntoView({ block: "center" }); }
  document.body.dataset.ready = "1";
}

boot();
