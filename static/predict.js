// Predict, then reveal. At a checkpoint (a lesson's, or one the reader sets on any run: any array
// of the step, any of its entries) the entries are hidden in every view -- the tables, the stage's
// values, the heatmap cards, the narration that would give them away -- until the student has
// filled them in. "Check" asks the server (POST /api/runs/{id}/steps/{n}/check): each entry comes
// back right or wrong. A first wrong answer gets a hint for each wrong entry (the rule and where to
// look, not the value) and another try; right, or wrong again, the views show the array again and
// each wrong entry its value and its cause from the trace. "Just show me" shows the answers in the
// checkpoint itself, each with its cause.

import { errorLines, postJSON } from "./api.js";
import { onView } from "./bus.js";
import { withholdKeys, writeState } from "./urlstate.js";
import { $, L, S, state } from "./context.js";
import { clear, el } from "./views.js";

// cp: {array, indices, step, container, source}; revealed: the views show it again
// tries: wrong checks so far (the first gets a hint, the second the answer); shown: "Just show me"
const P = { cp: null, revealed: true, result: null, tries: 0, shown: false };

const CARD_OF = { token_ids_cpu: "card-token_ids_cpu", block_table: "card-block_table", block_tables: "card-block_table", attn_mask: "card-attn_mask" };

// What else tells a checkpoint array's entries, hidden with it. Every array written by a later stage
// of the step is hidden (it is computed from the asked one, or at least after it: the student
// predicts at the asked stage), and so is what tells the array from elsewhere: Model Runner V2's
// idx_mapping (batch row -> state slot) by every array indexed by slot, the gathered block table
// and the slot panel; the block table by the new-blocks chip and the KV pool (which blocks each
// request holds); slot_mapping by the KV pool (the slots written); query_start_loc by
// cu_num_tokens, its own tail. Any view can take part without a change here: an element marked
// data-reveals="idx_mapping" (names separated by spaces) is hidden while that array is predicted.
const SLOT_ARRAYS = ["block_tables", "all_token_ids", "num_computed_tokens", "prefill_len", "total_len", "num_blocks", "last_sampled_tokens"];
const BLOCK_VIEWS = ["#changes .chip.newblocks", "#card-kv", "#kv-legend", "#card-block_table"];
const REVEALS = {
  idx_mapping: { arrays: [...SLOT_ARRAYS, "input_block_tables"], views: ["#slots"], words: /\bslots?\b|slot \d|槽位/i },
  block_table: { arrays: ["block_numbers", "slot_mapping"], views: BLOCK_VIEWS, words: /\bblocks? \d|new blocks|块 \d|新块/i },
  block_tables: { arrays: ["input_block_tables", "slot_mapping"], views: BLOCK_VIEWS, words: /\bblocks? \d|new blocks|块 \d|新块/i },
  slot_mapping: { views: ["#card-kv"], words: /\bslots? \d|槽位 \d/i },
  positions: { arrays: ["arange", "cu_num_tokens"] },
  query_start_loc: { arrays: ["cu_num_tokens", "logits_indices", "cu_seqlens_q"] },
  num_computed_tokens_cpu: { arrays: ["num_computed_tokens"], views: ["#overview", "#queue"], words: /computed|recompute|已计算|重新计算/i },
};
// a KV cache group's array (block_table_g1, slot_mapping_g1: issue 38) is told by what tells its
// group 0 namesake, group for group, and shown in the same card (grouptables.js)
const groupBase = (a) => a.replace(/_g\d+$/, "");
function revealsOf(a) {
  if (REVEALS[a] || groupBase(a) === a) return REVEALS[a];
  const base = REVEALS[groupBase(a)], g = a.slice(groupBase(a).length);
  return base ? { ...base, arrays: (base.arrays || []).map((x) => x + g) } : undefined;
}
// the views that show one token's (or request's) numbers worked out: hidden at every checkpoint
const WORKED = ["#stage-sub", "#selection", "#slot-formula", ".export"];

// the arrays written by the stages after the one that writes `a`, in this step
function laterArrays(a) {
  if (!S.trace) return [];
  const stages = S.trace.stages || [];
  const writer = (S.trace.arrays[a] || {}).stage;
  const at = stages.findIndex((s) => s.name === writer || (s.writes || []).includes(a));
  if (at < 0) return [];
  return stages.slice(at + 1).flatMap((s) => s.writes || []).filter((n) => n !== a);
}

// the arrays whose views are hidden while `a` is predicted: itself and what tells it
export function hiddenArrays(a) {
  const more = revealsOf(a);
  return [...new Set([a, ...((more && more.arrays) || []), ...laterArrays(a)])];
}

export const predicting = () => Boolean(P.cp && !P.revealed);

// the checkpoint's array is hidden on the page now (its step is on show)
export const concealing = () => predicting() && Boolean(S.trace) && state.step === P.cp.step;

// The page's state keys a checkpoint withholds from the address until Check: the ones a selection
// reads off the step's arrays (a token's position, a block, a KV slot), which would say the
// asked entries or what they are computed from (&block=4 is block_table[2][0], &pos=0 is
// positions[5]). The request (req=...) stays: the question names it. Every other key, the
// section's own selection among them, is written as usual; the withheld ones once it is checked
// (urlstate.js's writeState asks this function at every write).
export const WITHHELD = ["pos", "block", "slot", "tok"];
export function withheldKeys() {
  return predicting() ? WITHHELD : [];
}

// the views that outline a selection redraw theirs (hover.js listens): a checkpoint opened or
// checked changes what a selection may outline
function concealChanged() {
  writeState(state, { settled: true });
  document.dispatchEvent(new CustomEvent("pagedviz:conceal"));
}

// the name of flat entry i of an array of this shape: a[7] or a[2][1]
function entryName(array, shape, i) {
  if (shape && shape.length === 2) return `${array}[${Math.floor(i / shape[1])}][${i % shape[1]}]`;
  return `${array}[${i}]`;
}

// hide (or show again) the checkpoint's array wherever this step's views show it
function applyConceal() {
  document.querySelectorAll(".concealed").forEach((n) => n.classList.remove("concealed"));
  document.querySelectorAll(".concealed-card").forEach((n) => n.classList.remove("concealed-card"));
  document.body.classList.toggle("predicting", predicting());
  if (!predicting() || state.step !== P.cp.step || !S.trace) return;
  const form = P.cp.container;
  const hide = (n) => { if (n && !(form && form.contains(n))) n.classList.add("concealed"); };
  const names = hiddenArrays(P.cp.array);
  const heads = [...document.querySelectorAll("#request-table thead th")];
  for (const a of names) {
    // every view that labels its values with the array: a table row (its cells), a value line, a stage value
    document.querySelectorAll(`[data-array="${CSS.escape(a)}"]`).forEach((n) => {
      if (n.tagName === "TR") n.querySelectorAll("td").forEach(hide);
      else if (n.tagName !== "TH" && !n.closest("#stage-list, .stage-list")) hide(n);
    });
    const col = heads.findIndex((th) => th.title === a || th.dataset.array === a);
    if (col >= 0) document.querySelectorAll(`#request-table tbody td:nth-child(${col + 1})`).forEach(hide);
    document.querySelectorAll("#req-table > p.value-line").forEach((p) => { const c = p.querySelector("code"); if (c && c.textContent === a) hide(p); });
    const card = $(CARD_OF[a] || CARD_OF[groupBase(a)] || `card-${groupBase(a)}`);
    if (card) card.classList.add("concealed-card");
  }
  const more = revealsOf(P.cp.array) || {};
  for (const sel of [...(more.views || []), ...WORKED]) {
    document.querySelectorAll(sel).forEach((n) => (n.classList.contains("card") ? n.classList.add("concealed-card") : hide(n)));
  }
  document.querySelectorAll("[data-reveals]").forEach((n) => { if (n.dataset.reveals.split(/\s+/).includes(P.cp.array)) hide(n); });
  // the sentences that would say the answer
  const said = new RegExp(names.map((a) => `\\b${a.replace(/[^\w]/g, "")}\\b`).join("|"));
  document.querySelectorAll("#narration p, #narration li").forEach((n) => {
    const t = n.textContent;
    if (said.test(t) || (more.words && more.words.test(t))) hide(n);
  });
}

// the checked entries' words in the page's language
const say = (text) => (text ? text[state.lang] || text.en || "" : "");

function renderForm() {
  const cp = P.cp;
  const box = clear(cp.container);
  box.hidden = false;
  const arr = S.steps.get(cp.step) ? S.steps.get(cp.step).arrays[cp.array] : null;
  const shape = arr ? arr.shape : null;
  const res = P.result;
  const final = Boolean(res && P.revealed);  // the verdicts with the values; before that, a hint
  const form = el("form", { class: "predict", id: "predict-form", "aria-labelledby": "predict-h", onsubmit: (e) => { e.preventDefault(); check(); } });
  form.append(el("h3", { id: "predict-h", text: `${L("predict_title")}: ${cp.array} · ${L("step")} ${cp.step}` }));
  form.append(el("p", { class: "muted", text: L("predict_hint") }));
  const grid = el("div", { class: "predict-grid" });
  cp.indices.forEach((i, k) => {
    const name = entryName(cp.array, shape, i);
    const r = res ? res.entries[k] : null;
    const value = P.shown && r ? String(r.expected) : cp.values ? cp.values[k] ?? "" : "";
    const input = el("input", { type: "text", inputmode: "numeric", autocomplete: "off", class: `predict-in${r && !P.shown ? (r.correct ? " ok" : " bad") : ""}`,
      id: `predict-${k}`, dataset: { index: i }, "aria-label": name, value, readonly: P.revealed && res ? true : null });
    input.addEventListener("input", () => { cp.values = cp.values || []; cp.values[k] = input.value; });
    let verdict = null;
    if (r && P.shown) verdict = el("span", { class: "verdict shown", text: "←" });
    else if (r) verdict = el("span", { class: r.correct ? "verdict ok" : "verdict bad", text: r.correct ? "✓" : final ? `✗ ${r.expected}` : L("predict_try") });
    grid.append(el("label", { for: `predict-${k}`, class: "predict-cell" }, [el("code", { text: name }), input, verdict]));
  });
  form.append(grid);
  form.append(el("div", { class: "controls" }, [
    P.revealed && res ? null : el("button", { type: "submit", class: "primary", id: "predict-check", text: L("predict_check") }),
    P.revealed ? null : el("button", { type: "button", id: "predict-reveal", text: L("predict_reveal"), onclick: () => showMe() }),
    cp.source === "lesson" ? null : el("button", { type: "button", id: "predict-close", text: L("close"), onclick: () => openCheckpoint(null) }),
  ]));
  form.append(el("div", { id: "predict-msg", class: "error-text", role: "alert" }));
  const out = el("div", { id: "predict-result", class: "predict-result", role: "status", "aria-live": "polite" });
  if (res && P.shown) {
    out.append(el("p", { class: "shown", text: L("predict_shown") }));
    out.append(el("ul", { class: "predict-why" }, res.entries.map((x) => el("li", { dataset: { index: x.index } }, [
      say(x.explanation) || `${entryName(cp.array, shape, x.index)} = ${x.expected}`]))));
  } else if (res && final) {
    out.append(el("p", { class: res.all_correct ? "ok" : "bad", text: L("predict_score").replace("{n}", res.num_correct).replace("{total}", res.total) }));
    const wrong = res.entries.filter((x) => !x.correct);
    if (wrong.length) {
      out.append(el("ul", { class: "predict-why" }, wrong.map((x) => el("li", { dataset: { index: x.index } }, [
        el("code", { text: entryName(cp.array, shape, x.index) }), ` ${L("predict_yours")} ${x.given}, ${L("predict_expected")} ${x.expected}: `,
        say(x.explanation),
      ]))));
    }
  } else if (res) {
    // a first wrong answer: which entries are wrong, the values still hidden; the array's rule once,
    // then each wrong entry's own hint
    out.append(el("p", { class: "bad", text: L("predict_hint_h").replace("{n}", res.num_correct).replace("{total}", res.total) }));
    if (res.rule) out.append(el("p", { class: "predict-rule", text: say(res.rule) }));
    out.append(hintList(cp.array, shape, res.entries.filter((x) => !x.correct)));
  }
  form.append(out);
  box.append(form);
}

// Each wrong entry's hint, once: entries whose hints read the same (a server's rule said per
// entry) share one line that names them all.
function hintList(array, shape, wrong) {
  const groups = new Map();
  for (const x of wrong) {
    const h = say(x.hint);
    if (!groups.has(h)) groups.set(h, []);
    groups.get(h).push(x);
  }
  return el("ul", { class: "predict-hints" }, [...groups].map(([h, xs]) => {
    const names = xs.map((x) => entryName(array, shape, x.index));
    // a hint that starts with its entry's name ("positions[5]: token 5 is ...") is not prefixed twice
    const own = names.length === 1 && h.startsWith(names[0]);
    return el("li", { dataset: { index: xs.map((x) => x.index).join(" ") } }, [
      ...names.flatMap((n, j) => [j ? ", " : "", el("code", { text: n })]), own ? h.slice(names[0].length) : h ? `: ${h}` : ""]);
  }));
}

async function check() {
  const cp = P.cp;
  if (!cp) return;
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
  if (P.cp !== cp) return;  // the reader moved on (another section, the checkpoint closed) meanwhile
  if (!r.ok) {
    const msg = $("predict-msg");
    msg.textContent = errorLines(r.data).map((l) => l.replace(/^values\[(\d+)\]/, (_, k) => entryName(cp.array, arr && arr.shape, cp.indices[Number(k)]))).join("; ");
    return;
  }
  document.dispatchEvent(new CustomEvent("pagedviz:checked", { detail: { source: cp.source, all_correct: r.data.all_correct, tries: P.tries } }));
  P.result = r.data;
  // right, or wrong a second time: revealed; wrong the first time: a hint, and another try
  if (r.data.all_correct || P.tries >= 1) { reveal(); return; }
  P.tries += 1;
  renderForm();
  document.body.dataset.predict = "hint";
  const first = cp.container.querySelector(".predict-in.bad");
  if (first) first.focus();
}

// "Just show me": the answers in the checkpoint itself, each with its cause, and the views again
async function showMe() {
  const cp = P.cp;
  if (!cp) return;
  const r = await postJSON(`/api/runs/${S.created.run_id}/steps/${cp.step}/check`, { array: cp.array, indices: cp.indices, values: null });
  if (P.cp !== cp) return;  // the reader moved on meanwhile
  if (!r.ok) { $("predict-msg").textContent = errorLines(r.data).join("; "); return; }
  document.dispatchEvent(new CustomEvent("pagedviz:checked", { detail: { source: cp.source, all_correct: false, shown: true } }));
  P.result = r.data;
  P.shown = true;
  reveal();
}

function reveal() {
  P.revealed = true;
  applyConceal();
  concealChanged();
  renderForm();
  document.body.dataset.predict = "revealed";
}

// open a checkpoint (null closes it)
export function openCheckpoint(cp) {
  if (P.cp && P.cp.container && (!cp || cp.container !== P.cp.container)) { clear(P.cp.container); if (P.cp.source !== "lesson") P.cp.container.hidden = true; }
  P.cp = cp;
  P.result = null;
  P.tries = 0;
  P.shown = false;
  P.revealed = !cp;
  document.body.dataset.predict = cp ? "open" : "";
  applyConceal();
  concealChanged();
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
  withholdKeys(withheldKeys);
  buildChooser();
  document.addEventListener("pagedviz:narrated", applyConceal);
  document.addEventListener("pagedviz:late-cells", applyConceal);
  document.addEventListener("pagedviz:refocused", applyConceal);
  // entering or leaving presentation redraws the step's views (run.js's setPresent): hidden again
  let present = document.body.classList.contains("present");
  new MutationObserver(() => {
    const now = document.body.classList.contains("present");
    if (now !== present) { present = now; if (predicting()) applyConceal(); }
  }).observe(document.body, { attributes: true, attributeFilter: ["class"] });
  onView((what) => {
    renderChooser();
    if (P.cp && P.cp.source === "own" && (what === "run" || (what === "step" && state.step !== P.cp.step))) openCheckpoint(null);
    else if (P.cp && what === "lang") renderForm();
    applyConceal();
  });
}
