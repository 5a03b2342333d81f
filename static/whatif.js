// What-if in place: sliders and toggles for the settings a student asks about -- block size, token
// budget, pool size, max_num_reqs, chunked prefill, prefix caching, and on the vllm flavour which
// model runner (V1 or Model Runner V2) prepares the inputs -- rerun the same requests as soon as a
// setting is changed (a slider once it rests for DEBOUNCE_MS; a change made while a rerun loads
// is run after it) and reload the page's run in place at the same step and stage. A Δ table compares the new run
// with the baseline (the run the page had before the first what-if) from GET /api/runs/{id}/metrics:
// blocks used and internal fragmentation (this step and at peak), preemptions and padded tokens.

import { errorLines, getJSON, postJSON } from "./api.js";
import { ctl, onView } from "./bus.js";
import { $, L, S, state } from "./context.js";
import { clear, el, needsBuild, setText } from "./views.js";

const BLOCK_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256];
// the settings, in the order shown: [config key, kind]
export const KNOBS = [
  ["block_size", "blocks"], ["max_num_batched_tokens", "range"], ["num_kv_blocks", "range"],
  ["max_num_reqs", "range"], ["enable_chunked_prefill", "bool"], ["enable_prefix_caching", "bool"],
  ["model_runner", "choice"],
];
// a choice's values: the vllm flavour has both of vLLM 0.33's runners, the others only their own
const CHOICES = { model_runner: (flavor) => (flavor === "vllm" ? ["v1", "v2"] : ["v1"]) };
const W = { baseline: null, ours: false, metrics: new Map(), built: "", timer: null, busy: false, again: false };
const DEBOUNCE_MS = 450;

export const baseline = () => W.baseline;

// whether `sc` is a what-if rerun of the baseline: its requests with some knob set otherwise
export function isRerun(sc) {
  const base = W.baseline ? W.baseline.scenario : null;
  if (!base || base.name !== sc.name || !sc.config) return false;
  return KNOBS.some(([k]) => (base.config[k] ?? null) !== (sc.config[k] ?? null));
}

async function metricsOf(runId) {
  if (!W.metrics.has(runId)) W.metrics.set(runId, getJSON(`/api/runs/${encodeURIComponent(runId)}/metrics`).then((r) => (r.ok ? r.data : null)));
  return W.metrics.get(runId);
}

// the range a slider offers around the baseline's value
function bounds(key, base) {
  if (key === "max_num_batched_tokens") return [1, Math.max(4 * base, 64)];
  if (key === "num_kv_blocks") return [2, Math.max(4 * base, 32)];
  return [1, Math.max(2 * base, 16)];
}

function buildControls() {
  const cfg = S.overview.scenario.config;
  const base = W.baseline.scenario.config;
  const key = JSON.stringify([W.baseline.run_id, state.lang]);
  if (key === W.built) { markChanged(); return; }
  W.built = key;
  const box = clear($("whatif-knobs"));
  for (const [k, kind] of KNOBS) {
    const id = `wi-${k}`;
    let input;
    if (kind === "bool") input = el("input", { id, type: "checkbox", checked: Boolean(cfg[k]) });
    else if (kind === "choice") {
      const opts = CHOICES[k](S.overview.scenario.flavor);
      input = el("select", { id, disabled: opts.length < 2 }, opts.map((v) => el("option", { value: v, selected: v === cfg[k], text: v })));
    }
    else if (kind === "blocks") {
      const sizes = [...new Set([...BLOCK_SIZES, cfg[k], base[k]])].sort((a, b) => a - b);
      input = el("select", { id }, sizes.map((v) => el("option", { value: v, selected: v === cfg[k], text: v })));
    } else {
      const [lo, hi] = bounds(k, base[k]);
      input = el("input", { id, type: "range", min: lo, max: Math.max(hi, cfg[k]), step: 1, value: cfg[k] });
    }
    const out = kind === "range" ? el("output", { for: id, id: `${id}-out`, text: cfg[k] }) : null;
    if (out) input.addEventListener("input", () => { out.textContent = input.value; });
    // a change applies by itself: a slider's once it rests, a toggle's or a choice's at once
    input.addEventListener(kind === "range" ? "input" : "change", () => soon(kind === "range" ? DEBOUNCE_MS : 0));
    const changed = cfg[k] !== base[k];
    box.append(el("label", { class: `wi-knob${changed ? " changed" : ""}`, for: id, dataset: { key: k } },
      [el("code", { text: k }), input, out, changed ? el("span", { class: "muted wi-base", text: `(${L("baseline")} ${base[k]})` }) : null]));
  }
}

// each knob's mark: changed from the baseline (and the baseline's value), as the run on show has it
function markChanged() {
  const base = W.baseline.scenario.config;
  const cfg = S.overview.scenario.config;
  for (const label of $("whatif-knobs").querySelectorAll(".wi-knob")) {
    const k = label.dataset.key;
    const changed = cfg[k] !== base[k];
    label.classList.toggle("changed", changed);
    let note = label.querySelector(".wi-base");
    if (changed && !note) { note = el("span", { class: "muted wi-base" }); label.append(note); }
    if (note) note.textContent = changed ? `(${L("baseline")} ${base[k]})` : "";
  }
}

// a rerun after `ms`; one at a time, the last change winning
function soon(ms) {
  clearTimeout(W.timer);
  W.timer = setTimeout(() => { W.timer = null; if (W.busy) W.again = true; else rerun(); }, ms);
}

// the scenario with the controls' settings: the same requests, the settings changed
export function modifiedScenario() {
  const sc = JSON.parse(JSON.stringify(S.overview.scenario));
  const base = W.baseline ? W.baseline.scenario.config : sc.config;
  const changes = [];
  for (const [k, kind] of KNOBS) {
    const input = $(`wi-${k}`);
    if (!input) continue;
    const v = kind === "bool" ? input.checked : kind === "choice" ? input.value : Number(input.value);
    sc.config[k] = v;
    if (v !== base[k]) changes.push(`${k} ${v}`);
  }
  const title = (W.baseline ? W.baseline.scenario.title || W.baseline.scenario.name : sc.title || sc.name) || "";
  sc.title = (changes.length ? `${title.replace(/block size \d+/, `block size ${sc.config.block_size}`)} · what if: ${changes.join(", ")}` : title).slice(0, 200);
  return { scenario: sc, changes };
}

// a scenario checked, then run: its link, or the problems (each naming its field) shown in `msg`
export async function runScenario(sc, msg) {
  clear(msg);
  const check = await postJSON("/api/scenarios/validate", sc);
  if (!check.ok || !check.data.valid) { msg.append(el("ul", {}, errorLines(check.data).map((l) => el("li", { text: l })))); return null; }
  const r = await postJSON("/api/runs", sc);
  if (!r.ok) { msg.append(el("ul", {}, errorLines(r.data).map((l) => el("li", { text: l })))); return null; }
  return r.data;
}

async function rerun() {
  const { scenario, changes } = modifiedScenario();
  W.busy = true;
  $("whatif-run").disabled = true;
  try {
    const made = await runScenario(scenario, $("whatif-msg"));
    if (!made) return;
    if (made.run_id === S.created.run_id) return;  // the run on show already
    W.ours = true;
    try { await ctl.load({ link: made.link }, { step: state.step, stage: state.stage }); } finally { W.ours = false; }
    $("whatif-status").textContent = changes.length ? L("wi_shown").replace("{changes}", changes.join(", ")) : L("wi_back");
  } finally {
    W.busy = false;
    $("whatif-run").disabled = false;
    if (W.again) { W.again = false; rerun(); }
  }
}

// the baseline on show again, once any rerun under way has ended (compare.js compares the baseline
// with the settings chosen here)
export async function backToBaseline() {
  clearTimeout(W.timer);
  W.timer = null;
  while (W.busy) await new Promise((resolve) => setTimeout(resolve, 50));
  if (W.baseline && S.created && S.created.run_id !== W.baseline.run_id) await reset();
}

async function reset() {
  if (!W.baseline) return;
  clearTimeout(W.timer);
  W.timer = null;
  // a rerun still loading would land after the baseline and hide it: the baseline loads after it
  while (W.busy) await new Promise((resolve) => setTimeout(resolve, 50));
  W.built = "";  // the controls go back to the baseline's values
  W.ours = true;
  try { await ctl.load({ link: W.baseline.link }, { step: state.step, stage: state.stage }); } finally { W.ours = false; }
  $("whatif-status").textContent = L("wi_back");
}

const ROWS = [
  ["wi_blocks_step", (m, n) => m.steps[n - 1] && m.steps[n - 1].blocks_used],
  ["wi_frag_step", (m, n) => m.steps[n - 1] && m.steps[n - 1].internal_fragmentation],
  ["wi_blocks_peak", (m) => m.totals.peak_blocks_used],
  ["wi_frag_peak", (m) => m.totals.peak_internal_fragmentation],
  ["wi_preemptions", (m) => m.totals.preemptions],
  ["wi_padded", (m) => m.totals.padded_tokens],
  ["wi_steps", (m) => m.totals.steps],
];

// the table is built once per pair of runs and language; a step change rewrites only its values
export async function renderDelta() {
  const box = $("whatif-delta");
  if (!W.baseline || !S.created) return;
  const same = W.baseline.run_id === S.created.run_id;
  const [mb, mn] = await Promise.all([metricsOf(W.baseline.run_id), metricsOf(S.created.run_id)]);
  if (!mb || !mn) { clear(box); return; }
  if (needsBuild(box, [W.baseline.run_id, S.created.run_id, state.lang])) {
    clear(box);
    $("whatif-reset").disabled = same;
    const body = el("tbody", {}, ROWS.map(([metric]) => el("tr", { dataset: { metric } }, [el("th", { scope: "row" }), el("td"), el("td"), el("td")])));
    box.append(el("table", { class: "req-table wi-table", id: "wi-delta-table", "aria-label": L("wi_delta") }, [
      el("thead", {}, el("tr", {}, [el("th", { text: "" }), el("th", { text: L("baseline") }), el("th", { text: L("wi_now") }), el("th", { text: "Δ" })])),
      body,
    ]));
    if (same) box.append(el("p", { class: "muted small-text", text: L("wi_same") }));
  }
  const n = state.step;
  const rows = $("wi-delta-table").tBodies[0].rows;
  ROWS.forEach(([metric, get], i) => {
    const a = get(mb, n), b = get(mn, n);
    const d = a === undefined || b === undefined ? "" : b - a;
    const [th, ta, tb, td] = rows[i].cells;
    setText(th, metric.endsWith("_step") ? `${L(metric)} (${L("step")} ${n})` : L(metric));
    setText(ta, String(a ?? "–"));
    setText(tb, String(b ?? "–"));
    const cls = d > 0 ? "up" : d < 0 ? "down" : "";
    if (td.className !== cls) td.className = cls;
    setText(td, d === "" ? "–" : d > 0 ? `+${d}` : String(d));
  });
}

function build() {
  const section = el("section", { id: "whatif", class: "whatif", "aria-labelledby": "whatif-h" }, [
    el("h2", { id: "whatif-h", dataset: { i18n: "wi_title" }, text: L("wi_title") }),
    el("div", { id: "whatif-knobs", class: "wi-knobs" }),
    el("div", { class: "controls" }, [
      el("button", { type: "button", id: "whatif-run", class: "primary", dataset: { i18n: "wi_run" }, text: L("wi_run"), onclick: () => soon(0) }),
      el("button", { type: "button", id: "whatif-reset", dataset: { i18n: "wi_reset" }, text: L("wi_reset"), onclick: reset }),
    ]),
    el("div", { id: "whatif-msg", class: "error-text", role: "alert" }),
    // a rerun or a reset is announced in one line; the table itself is not a live region, or a
    // screen reader would read its values out again at every step
    el("p", { id: "whatif-status", class: "muted small-text", role: "status" }),
    el("div", { id: "whatif-delta", class: "wi-delta" }),
  ]);
  const after = $("predict-any") || $("narration");
  after.after(section);
}

export function initWhatIf() {
  build();
  onView((what) => {
    if (what === "run" && !W.ours) {
      W.baseline = { run_id: S.created.run_id, link: S.created.link, scenario: JSON.parse(JSON.stringify(S.overview.scenario)) };
    }
    // another run (not a rerun of this panel's) or another language: the last announcement goes
    if ((what === "run" && !W.ours) || what === "lang") setText($("whatif-status"), "");
    if (!W.baseline) return;
    if (what === "run") clear($("whatif-msg"));  // a new run answers the last problem
    if (what === "run" || what === "lang") buildControls();
    if (what !== "stage") renderDelta();
  });
}
