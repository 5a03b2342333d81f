// The narration panel: what happened in this step and why, generated from the trace by the server
// (GET /api/runs/{id}/steps/{n}/narration), in English or 简体中文. The step's own sentences come
// first; the chosen stage's sentence follows the stage (and the stage player). Every request,
// block, row and token a sentence names is a button: hovering or focusing it lights it up in every
// view through hover.js, clicking selects it. Text goes in through textContent only.

import { getJSON } from "./api.js";
import { onView } from "./bus.js";
import { select, setHover } from "./hover.js";
import { stageText } from "./i18n.js";
import { toSearch, writeState } from "./urlstate.js";
import { afterFrame, whenIdle } from "./canvasmap.js";
import { $, L, S, bigBatch, stageFlavor, state } from "./context.js";
import { clear, el } from "./views.js";

const cache = new Map();  // "run_id/step" -> items

export async function narrationOf(runId, step) {
  const key = `${runId}/${step}`;
  if (!cache.has(key)) {
    cache.set(key, getJSON(`/api/runs/${encodeURIComponent(runId)}/steps/${step}/narration`).then((r) => (r.ok ? r.data.items : [])));
  }
  return cache.get(key);
}

// a narration ref as a selection of the views, or null where this step cannot show it
// (a request no longer in the batch, a token past the step's tokens)
export function refSelection(ref) {
  if (!S.trace) return null;
  if (ref.kind === "request") {
    const r = S.trace.batch.req_ids.indexOf(String(ref.id));
    return r >= 0 ? { kind: "request", index: r } : null;
  }
  const n = Number(ref.id);
  if (!Number.isInteger(n) || n < 0) return null;
  if (ref.kind === "row") return n < S.trace.batch.req_ids.length ? { kind: "request", index: n } : null;
  if (ref.kind === "block") return { kind: "block", index: n };
  if (ref.kind === "token") return n < (S.trace.scalars.total_num_scheduled_tokens || 0) ? { kind: "token", index: n } : null;
  return null;
}

const KIND_WORD = { en: { request: "request", block: "block", row: "row", token: "token" },
                    zh: { request: "请求", block: "块", row: "行", token: "token" } };

// a button that lights up what a ref names
export function refButton(ref, label) {
  const sel = refSelection(ref);
  const text = label || `${KIND_WORD[state.lang][ref.kind] || ref.kind} ${ref.id}`;
  return el("button", {
    type: "button", class: `ref ref-${ref.kind}${sel ? "" : " ref-absent"}`, text,
    dataset: { kind: ref.kind, id: String(ref.id) },
    title: sel ? null : L("ref_absent"),
    onmouseenter: () => sel && setHover(sel), onmouseleave: () => setHover(null),
    onfocus: () => sel && setHover(sel), onblur: () => setHover(null),
    onclick: () => sel && select(sel),
  });
}

const MAX_REF_BUTTONS = 16;

function escapeRe(s) { return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"); }

// The sentence with its refs made buttons where the text names them ("request 2", "block 6",
// "row 1", "第 1 行"); refs it names only as bare numbers follow as small buttons.
export function sentence(item, lang = state.lang) {
  const text = item.text[lang] || item.text.en;
  const pats = [];
  const seen = new Set();
  for (const ref of item.refs) {
    const key = `${ref.kind}:${ref.id}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const id = escapeRe(String(ref.id));
    const end = "(?![\\w.]\\w|\\w)";
    const forms = {
      request: [`[Rr]equest ${id}${end}`, `请求 ${id}${end}`],
      block: [`[Bb]lock ${id}${end}`, `块 ${id}${end}`],
      row: [`[Rr]ow ${id}${end}`, `第 ${id} 行`],
      token: [`[Tt]oken ${id}${end}`],
    }[ref.kind] || [];
    for (const f of forms) pats.push({ re: f, ref });
  }
  const out = el("span", { class: "narr-text" });
  const linked = new Set();
  if (pats.length) {
    const re = new RegExp(pats.map((p) => `(${p.re})`).join("|"), "g");
    let last = 0;
    for (const m of text.matchAll(re)) {
      const k = m.slice(1).findIndex((g) => g !== undefined);
      const ref = pats[k].ref;
      out.append(text.slice(last, m.index), refButton(ref, m[0]));
      linked.add(`${ref.kind}:${ref.id}`);
      last = m.index + m[0].length;
    }
    out.append(text.slice(last));
  } else out.append(text);
  const rest = [];
  const restSeen = new Set();
  for (const ref of item.refs) {
    const key = `${ref.kind}:${ref.id}`;
    if (linked.has(key) || restSeen.has(key)) continue;
    restSeen.add(key);
    rest.push(ref);
  }
  // a sentence about a big batch names hundreds of requests: the first few are buttons, the
  // others a count (the tables show them all)
  const buttons = rest.slice(0, MAX_REF_BUTTONS).map((ref) => refButton(ref));
  if (rest.length > MAX_REF_BUTTONS) {
    buttons.push(el("span", { class: "refs-more", text: L("refs_more").replace("{n}", rest.length - MAX_REF_BUTTONS) }));
  }
  return buttons.length ? el("span", {}, [out, " ", el("span", { class: "refs" }, buttons)]) : out;
}

let shown = "";  // what the panel shows, so that a stage change redraws only the stage part

// Whether the step's sentences are on screen, watched (never read in the middle of a redraw): a
// big batch's step has dozens of them, which the side panel shows below its first screen; out of
// view they are written once the page is idle after the step's frame (at once when they come into
// view), as the heatmaps out of view are drawn.
let listSeen = true;
let listLater = null;  // the sentences still to write
const watched = new WeakSet();
function watchList(list) {
  if (watched.has(list) || !window.IntersectionObserver) return;
  watched.add(list);
  new IntersectionObserver((entries) => {
    listSeen = entries[entries.length - 1].isIntersecting;
    if (listSeen && listLater) listLater();
  }).observe(list);
}

export async function renderNarration() {
  if (!S.created || !S.trace) return;
  const runId = S.created.run_id;
  const step = state.step;
  document.body.dataset.narrated = "";  // readiness flag: set to the step once its narration is shown
  const items = await narrationOf(runId, step);
  if (!S.created || S.created.run_id !== runId || state.step !== step) return;  // moved on meanwhile
  const key = `${runId}/${step}/${state.lang}`;
  if (key !== shown) {
    shown = key;
    $("narr-h").textContent = `${L("narration")} · ${L("step")} ${step}`;
    const list = $("narr-step");
    watchList(list);
    const write = () => {
      clear(list);
      for (const it of items.filter((x) => !x.stage)) list.append(noted(el("li", { dataset: { key: it.key } }, sentence(it)), `narr:${it.key}`, it.refs));
    };
    listLater = null;
    if (bigBatch() && !listSeen && !state.note) {
      const job = () => {
        if (listLater !== job) return;
        listLater = null;
        if (shown !== key) return;
        write();
        document.dispatchEvent(new Event("pagedviz:narrated"));
      };
      listLater = job;
      afterFrame(() => whenIdle(job, 300));
    } else write();
  }
  renderStagePart(items);
  if (state.note && !noteDone) showNote();
  // (the sentences written later say so again then: predict.js conceals what they tell)
  document.dispatchEvent(new Event("pagedviz:narrated"));
  document.body.dataset.narrated = String(step);
}

function renderStagePart(items) {
  const box = clear($("narr-stage"));
  const [title] = stageText(state.lang, state.stage, stageFlavor());
  box.append(el("h3", { text: `${L("this_stage")}: ${title}` }));
  const mine = items.filter((x) => x.stage === state.stage);
  if (!mine.length) box.append(el("p", { class: "muted", text: L("no_stage_narration") }));
  for (const it of mine) box.append(noted(el("p", { class: "narr-stage-text", dataset: { key: it.key } }, sentence(it)), `narr:${it.key}`, it.refs));
}

export function initNarration() {
  onView((what) => {
    if (what === "lang" || what === "run") shown = "";
    // a note opened from a link stays in the URL until the view moves to another step
    if (what === "step" && noteDone && state.note) { state.note = ""; writeState(state); }
    renderNarration();
  });
  // preset notes and lesson steps are drawn by their own modules: each gets its anchor when it shows
  new MutationObserver(() => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; decorateNotes(); });
  }).observe(document.body, { childList: true, subtree: true });
}

// ------------------------------------------------------------------ links to a note
// Every note of the page -- a preset's notes (note-<n>), a narration sentence (narr:<key>) -- and
// the lesson's section on show (lesson-<section>, its link made by lesson.js) carries a small "#" link whose URL is this view plus
// note=<id>; opening it scrolls to the note, marks it and selects what its refs name.
let pending = false;
let noteDone = false;  // the URL's note was shown once (a later step change drops it)

const noteHref = (id) => window.location.pathname + toSearch({ ...state, note: id });

function noted(node, id, refs = []) {
  node.dataset.note = id;
  node.noteRefs = refs;
  const a = noteAnchor(() => node.dataset.note);
  node.append(" ", a);
  return node;
}

// the "#" link of a note (its id read when used: the lesson's changes with its section)
function noteAnchor(idOf) {
  const a = el("a", { class: "note-link", href: noteHref(idOf()), title: L("note_link"), "aria-label": L("note_link"), text: "#" });
  // the href follows the view (step, selection) at the moment it is used
  const fresh = () => { a.href = noteHref(idOf()); };
  a.addEventListener("mouseenter", fresh);
  a.addEventListener("focus", fresh);
  a.addEventListener("click", (e) => {
    e.preventDefault();
    state.note = idOf();
    noteDone = false;
    writeState(state);
    showNote();
  });
  return a;
}

function decorateNotes() {
  document.querySelectorAll("#preset-notes > li").forEach((li, i) => { if (!li.querySelector(".note-link")) noted(li, `note-${i}`); });
  // (the lesson's text has its own "#" link, beside its section's title: lesson.js)
  if (state.note && !noteDone) showNote();
}

// the URL's note: scrolled to, marked, and what its refs name selected (the first one this step has)
function showNote() {
  const node = [...document.querySelectorAll("[data-note]")].find((n) => n.dataset.note === state.note);
  if (!node) return;
  noteDone = true;
  document.querySelectorAll(".note-target").forEach((n) => n.classList.remove("note-target"));
  node.classList.add("note-target");
  node.setAttribute("aria-current", "true");
  node.scrollIntoView({ block: "center" });
  const sel = (node.noteRefs || []).map(refSelection).find(Boolean);
  if (sel) { const keep = state.note; select(sel); state.note = keep; writeState(state); }
}
