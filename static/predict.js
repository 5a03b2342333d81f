// Predict, then reveal. At a checkpoint (a lesson's, or one the reader sets on any run: any array
// of the step, any of its entries) the entries are hidden in every view -- the tables, the stage's
// values, the heatmap cards, the narration that would give them away -- until the student has
// filled them in. "Check" asks the server (POST /api/runs/{id}/steps/{n}/check): each entry comes
// back right or wrong, a wrong one with the expected value and its formula with this entry's
// numbers; then the views show the array again.

import { errorLines, postJSON } from "./api.js";
import { onView } from "./bus.js";
import { $, L, S, state } from "./trace.js";
import { clear, el } from "./views.js";

// cp: {array, indices, step, container, source}; revealed: the views show it again
const P = { cp: null, revealed: true, result: null };

const CARD_OF = { token_ids_cpu: "card-token_ids_cpu", block_table: "card-block_table", block_tables: "card-block_table", attn_mask: "card-attn_mask" };

// What else tells a checkpoint array's entries, hidden with it. Model Runner V2's idx_mapping (batch
// row -> state slot) is told by every array indexed by slot (which slot holds which request's
// state), by the gathered block table (its rows are labelled with their slots), by the slot panel
// (its arrows, holders, free list and per-slot state) and by any sentence about slots. Any view can take part without a change here: an element marked
// data-reveals="idx_mapping" (names separated by spaces) is hidden while that array is predicted.
const SLOT_ARRAYS = ["block_tables", "all_token_ids", "num_computed_tokens", "prefill_len", "total_len", "num_blocks", "last_sampled_tokens"];
const REVEALS = {
  idx_mapping: { arrays: [...SLOT_ARRAYS, "input_block_tables"], views: ["#slots"], words: /\bslots?\b|slot \d|槽位/i },
};

// the arrays whose views are hidden while `a` is predicted: itself and what tells it
export function hiddenArrays(a) {
  return [a, ...((REVEALS[a] && REVEALS[a].arrays) || [])];
}

export const predicting = () => Boolean(P.cp && !P.revealed);

// the name of flat entry i of an array of this shape: a[7] or a[2][1]
function entryName(array, shape, i) {
  if (shape && shape.length === 2) return `${array}[${Math.floor(i / shape[1])}][${i % shape[1]}]`;
  return `${array}[${i}]`;
}

// hide (or show again) the checkpoint's array wherever this step's views show it
function applyConceal() {
  document.querySelectorAll(".concealed").forEach((n) => n.classList.remove("concealed"));
  document.querySelectorAll(".concealed-card").forEach((n) => n.classList.remove("concealed-card"));
  if (!predicting() || state.step !== P.cp.step || !S.trace) return;
  const hide = (n) => n && n.classList.add("concealed");
  const names = hiddenArrays(P.cp.array);
  for (const a of names) {
    document.querySelectorAll(`#token-table tr[data-array="${CSS.escape(a)}"] td`).forEach(hide);
    document.querySelectorAll(`#stage-values [data-array="${CSS.escape(a)}"]`).forEach(hide);
    const heads = [...document.querySelectorAll("#request-table thead th")];
    const col = heads.findIndex((th) => th.title === a);
    if (col >= 0) document.querySelectorAll(`#request-table tbody td:nth-child(${col + 1})`).forEach(hide);
    document.querySelectorAll("#req-table > p.value-line").forEach((p) => { const c = p.querySelector("code"); if (c && c.textContent === a) hide(p); });
    const card = $(CARD_OF[a] || `card-${a}`);
    if (card) card.classList.add("concealed-card");
  }
  const more = REVEALS[P.cp.array] || {};
  for (const sel of more.views || []) document.querySelectorAll(sel).forEach(hide);
  document.querySelectorAll("[data-reveals]").forEach((n) => { if (n.dataset.reveals.split(/\s+/).includes(P.cp.array)) hide(n); });
  // the sentences and formulas that would say the answer
  for (const id of ["stage-sub", "selection"]) hide($(id));
  document.querySelectorAll("#narration p, #narration li").forEach((n) => {
    const t = n.textContent;
    if (names.some((a) => t.includes(a)) || (more.words && more.words.test(t))) hide(n);
  });
}

function renderForm() {
  const cp = P.cp;
  const box = clear(cp.container);
  box.hidden = false;
  const arr = S.steps.get(cp.step) ? S.steps.get(cp.step).arrays[cp.array] : null;
  const shape = arr ? arr.shape : null;
  const form = el("form", { class: "predict", id: "predict-form", "aria-labelledby": "predict-h", onsubmit: (e) => { e.preventDefault(); check(); } });
  form.append(el("h3", { id: "predict-h", text: `${L("predict_title")}: ${cp.array} · ${L("step")} ${cp.step}` }));
  form.append(el("p", { class: "muted", text: L("predict_hint") }));
  const grid = el("div", { class: "predict-grid" });
  cp.indices.forEach((i, k) => {
    const name = entryName(cp.array, shape, i);
    const r = P.result ? P.result.entries[k] : null;
    const input = el("input", { type: "text", inputmode: "numeric", autocomplete: "off", class: `predict-in${r ? (r.correct ? " ok" : " bad") : ""}`,
      id: `predict-${k}`, dataset: { index: i }, "aria-label": name, value: cp.values ? cp.values[k] ?? "" : "" });
    input.addEventListener("input", () => { cp.values = cp.values || []; cp.values[k] = input.value; });
    grid.append(el("label", { for: `predict-${k}`, class: "predict-cell" }, [el("code", { text: name }), input,
      r ? el("span", { class: r.correct ? "verdict ok" : "verdict bad", text: r.correct ? "✓" : `✗ ${r.expected}` }) : null]));
  });
  form.append(grid);
  form.append(el("div", { class: "controls" }, [
    el("button", { type: "submit", class: "primary", id: "predict-check", text: L("predict_check") }),
    P.revealed ? null : el("button", { type: "button", id: "predict-reveal", text: L("predict_reveal"), onclick: () => reveal() }),
    cp.source === "lesson" ? null : el("button", { type: "button", id: "predict-close", text: L("close"), onclick: () => openCheckpoint(null) }),
  ]));
  form.append(el("div", { id: "predict-msg", class: "error-text", role: "alert" }));
  const out = el("div", { id: "predict-result", class: "predict-result", role: "status", "aria-live": "polite" });
  if (P.result) {
    const res = P.result;
    out.append(el("p", { class: res.all_correct ? "ok" : "bad", text: L("predict_score").replace("{n}", res.num_correct).replace("{total}", res.total) }));
    const wrong = res.entries.filter((x) => !x.correct);
    if (wrong.length) {
      out.append(el("ul", { class: "predict-why" }, wrong.map((x) => el("li", { dataset: { index: x.index } }, [
        el("code", { text: entryName(cp.array, shape, x.index) }), ` ${L("predict_yours")} ${x.given}, ${L("predict_expected")} ${x.expected}: `,
        x.explanation ? (x.explanation[state.lang] || x.explanation.en) : "",
      ]))));
    }
  }
  form.append(out);
  box.append(form);
}

async function check() {
  const cp = P.cp;
  const inputs = [...cp.container.querySelectorAll(".predict-in")];
  const values = inputs.map((i) => { const v = i.value.trim(); return /^-?\d+(\.\d+)?$/.test(v) ? Number(v) : v; });
  cp.values = inputs.map((i) => i.value);
  const arr = S.steps.get(cp.step) ? S.steps.get(cp.step).arrays[cp.array] : null;
  const bad = values.findIndex((v) => typeof v !== "number");
  if (bad >= 0) {  // said here, without a round trip: the entry's name and what it needs
    $("predict-msg").textContent = `${entryName(cp.array, arr && arr.shape, cp.indices[bad])}: ${L("predict_number")} (${JSON.stringify(String(values[bad]).slice(0, 20))})`;
    inputs[bad].focus();
    return;
  }
  const r = await postJSON(`/api/runs/${S.created.run_id}/steps/${cp.step}/check`, { array: cp.array, indices: cp.indices, values });
  if (!r.ok) {
    const msg = $("predict-msg");
    msg.textContent = errorLines(r.data).map((l) => l.replace(/^values\[(\d+)\]/, (_, k) => entryName(cp.array, arr && arr.shape, cp.indices[Number(k)]))).join("; ");
    return;
  }
  P.result = r.data;
  reveal();
}

function reveal() {
  P.revealed = true;
  applyConceal();
  renderForm();
  document.body.dataset.predict = "revealed";
}

// open a checkpoint (null closes it)
export function openCheckpoint(cp) {
  if (P.cp && P.cp.container && (!cp || cp.container !== P.cp.container)) { clear(P.cp.container); if (P.cp.source !== "lesson") P.cp.container.hidden = true; }
  P.cp = cp;
  P.result = null;
  P.revealed = !cp;
  document.body.dataset.predict = cp ? "open" : "";
  applyConceal();
  if (cp) renderForm();
}

// entries typed as "7", "0-4", "2, 5, 9"; null when any part is not an index
export function parseEntries(text, size) {
  const out = [];
  for (const part of text.split(/[\s,]+/).filter(Boolean)) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (!m) return null;
    const lo = Number(m[1]), hi = m[2] === undefined ? lo : Number(m[2]);
    if (hi < lo || hi >= size) return null;
    for (let i = lo; i <= hi && out.length < 64; i++) out.push(i);
  }
  return out.length ? out : null;
}

// the reader's own checkpoint on any run: an array of this step and some of its entries
function renderChooser() {
  const box = $("predict-any");
  if (!box || !S.trace) return;
  const sel = $("predict-array");
  const names = Object.keys(S.trace.arrays);
  const keep = sel.value;
  const cur = (S.trace.stages.find((s) => s.name === state.stage) || { writes: [] }).writes.filter((w) => names.includes(w));
  const order = [...cur, ...names.filter((n) => !cur.includes(n))];
  clear(sel);
  for (const n of order) sel.append(el("option", { value: n, text: n, selected: n === (names.includes(keep) && keep ? keep : order[0]) }));
  const a = S.trace.arrays[sel.value];
  $("predict-size").textContent = a ? `${a.shape.join(" × ")} (${L("predict_flat")})` : "";
}

function startOwn() {
  const name = $("predict-array").value;
  const a = S.trace.arrays[name];
  const msg = $("predict-any-msg");
  msg.textContent = "";
  if (!a) return;
  const size = a.shape.reduce((x, y) => x * y, 1);
  const raw = $("predict-entries").value.trim();
  const idx = raw ? parseEntries(raw, size) : [...Array(Math.min(size, 8)).keys()];
  if (!idx) { msg.textContent = `${L("predict_entries")}: ${L("predict_bad_entries").replace("{max}", size - 1)}`; return; }
  openCheckpoint({ array: name, indices: idx, step: state.step, container: $("predict-own"), source: "own" });
  $("predict-0").focus();
}

function buildChooser() {
  const section = el("section", { id: "predict-any", class: "predict-any", "aria-labelledby": "predict-any-h" }, [
    el("h2", { id: "predict-any-h", dataset: { i18n: "predict_title" }, text: L("predict_title") }),
    el("div", { class: "controls" }, [
      el("label", {}, [el("span", { dataset: { i18n: "predict_array" }, text: L("predict_array") }), " ", el("select", { id: "predict-array", onchange: renderChooser })]),
      el("label", {}, [el("span", { dataset: { i18n: "predict_entries" }, text: L("predict_entries") }), " ",
        el("input", { id: "predict-entries", type: "text", size: 8, placeholder: "0-7", autocomplete: "off",
          onkeydown: (e) => { if (e.key === "Enter") { e.preventDefault(); startOwn(); } } })]),
      el("button", { type: "button", id: "predict-start", dataset: { i18n: "predict_start" }, text: L("predict_start"), onclick: startOwn }),
    ]),
    el("p", { id: "predict-size", class: "muted small-text" }),
    el("p", { id: "predict-any-msg", class: "error-text", role: "alert" }),
    el("div", { id: "predict-own", hidden: true }),
  ]);
  const narr = $("narration");
  narr.after(section);
}

export function initPredict() {
  buildChooser();
  document.addEventListener("pagedviz:narrated", applyConceal);
  document.addEventListener("pagedviz:late-cells", applyConceal);
  onView((what) => {
    renderChooser();
    if (P.cp && P.cp.source === "own" && (what === "run" || (what === "step" && state.step !== P.cp.step))) openCheckpoint(null);
    else if (P.cp && what === "lang") renderForm();
    applyConceal();
  });
}
