// The step at a glance, first on a big batch's page: one stacked bar per request (the batch's, then
// the waiting ones greyed) split into tokens found in the prefix cache, computed before the step,
// scheduled in it and still to come; a "focus on request" box that puts one request first in every
// table (or alone); and a minimap of the token row, coloured by request with block starts marked,
// whose window shows what the token table shows and whose click focuses that request.

import { $, A, L, S, bigBatch, blockSize, reqColor, reqOfTokens, scenarioReqIds, scheduledRequests, state, tokenCount } from "./context.js";
import { setHover } from "./hover.js";
import { clear, el } from "./views.js";
import { morph } from "./morph.js";

const SVG = "http://www.w3.org/2000/svg";
const SEGMENTS = ["cached", "computed", "scheduled", "remaining"];

function svg(tag, attrs = {}) {
  const n = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, String(v));
  return n;
}

// each request's prefix-cache hit at its latest admission up to this step (overview summaries)
function cachedHits() {
  const out = new Map();
  for (const s of S.overview.steps) {
    if (s.step > state.step) break;
    for (const [rid, n] of Object.entries(s.num_cached_tokens || {})) out.set(String(rid), n);
  }
  return out;
}

// {rid, waiting, cached, computed, scheduled, remaining} for the batch's requests, then the waiting
export function requestBars() {
  const tr = S.trace;
  const specs = new Map(scheduledRequests(S.overview.scenario).map((r) => [String(r.id), r]));
  const total = (rid, known) => {
    const r = specs.get(rid) || {};
    const prompt = r.prompt_len || (r.prompt_token_ids || []).length || 0;
    return Math.max(known, prompt + (r.max_tokens || 0));
  };
  const hits = cachedHits();
  const bars = [];
  const ids = tr.idle ? [] : tr.batch.req_ids.map(String);
  // V2 keeps the computed count per state slot: row r's is num_computed_tokens[idx_mapping[r]]
  const bySlot = A("idx_mapping") && A("num_computed_tokens");
  const comp = A("num_computed_tokens_cpu") || (bySlot ? A("idx_mapping").map((j) => bySlot[j]) : null), sched = A("num_scheduled_tokens");
  ids.forEach((rid, r) => {
    const done = comp ? comp[r] : 0, now = sched ? sched[r] : 0;
    const cached = Math.min(hits.get(rid) || 0, done);
    bars.push({ rid, waiting: false, cached, computed: done - cached, scheduled: now, remaining: Math.max(0, total(rid, done + now) - done - now) });
  });
  for (const rid of (tr.scheduler && tr.scheduler.waiting_req_ids) || []) {
    bars.push({ rid: String(rid), waiting: true, cached: 0, computed: 0, scheduled: 0, remaining: total(String(rid), 0) });
  }
  return bars;
}

// A step change redraws the bars into the ones on the page (morph.js: a big batch's hundreds of
// bars keep their nodes, only their heights and titles change) and keeps the focus box where
// nothing it shows changed; the minimap is a new canvas.
let focusKey = "";
export function renderOverview(onPick) {
  const box = $("overview");
  if (!box || !S.trace) return;
  document.body.classList.toggle("big-batch", bigBatch());
  const key = JSON.stringify([state.req || "", Boolean(S.focusOnly), state.lang, S.created && S.created.run_id]);
  const [focus, bars, map] = box.children;
  if (box.children.length === 3 && key === focusKey && focus.classList.contains("ov-focus") && !focus.contains(document.activeElement)) {
    morph(bars, stackedBars(onPick));
    map.replaceWith(minimap(onPick));
    return;
  }
  focusKey = key;
  clear(box).append(focusControl(onPick), stackedBars(onPick), minimap(onPick));
}

// text for markup: every character that could end an attribute or open a tag is escaped
const esc = (v) => String(v).replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);

function stackedBars(onPick) {
  const bars = requestBars();
  const wrap = el("div", { class: "ov-bars-wrap" });
  const legend = el("div", { class: "ov-legend" }, [el("strong", { text: L("ov_requests") })]);
  for (const k of [...SEGMENTS, "waiting"]) legend.append(el("span", { class: "ov-key" }, [el("span", { class: `ov-swatch seg-${k}`, "aria-hidden": "true" }), L("seg_" + k)]));
  wrap.append(legend);
  if (!bars.length) { wrap.append(el("p", { class: "muted", text: L("idle_step") })); return wrap; }
  const H = 56, W = 1000, bw = W / bars.length;
  const max = Math.max(1, ...bars.map((b) => b.cached + b.computed + b.scheduled + b.remaining));
  const root = svg("svg", { id: "ov-bars", class: "ov-bars", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": L("ov_requests") });
  // the bars are written as one piece of markup (every request id and title escaped) and share
  // one set of listeners: a big batch has hundreds of bars, each a group, a title and rectangles.
  // A big batch's segments are one path per kind (each bar keeps its own title and hit area).
  const merged = bigBatch() ? new Map() : null;
  const out = [];
  const rect = (parts, cls, x, y, w, h) => {
    if (merged) merged.set(cls, (merged.get(cls) || "") + `M${x} ${y}h${w}v${h}h${-w}z`);
    else parts.push(`<rect x="${x}" y="${y}" width="${w}" height="${h}" class="${cls}"/>`);
  };
  const rowOf = new Map(S.trace.idle ? [] : S.trace.batch.req_ids.map((rid, r) => [String(rid), r]));
  bars.forEach((b, k) => {
    const title = `${L("req")} ${b.rid}${b.waiting ? ` (${L("seg_waiting")})` : ""}: ` + SEGMENTS.map((s) => `${L("seg_" + s)} ${b[s]}`).join(", ");
    const parts = [`<g class="ov-bar${b.waiting ? " waiting" : ""}${state.req === b.rid ? " focus" : ""}" data-req="${esc(b.rid)}"` +
      `${b.waiting || !rowOf.has(b.rid) ? "" : ` data-row="${rowOf.get(b.rid)}"`}><title>${esc(title)}</title>`];
    let y = H;
    for (const s of SEGMENTS) {
      const h = (b[s] / max) * (H - 4);
      if (h <= 0) continue;
      y -= h;
      rect(parts, `seg-${b.waiting ? "waiting" : s}`, k * bw + bw * 0.1, y, Math.max(bw * 0.8, 0.5), h);
    }
    // the request's identity colour as a base line (grey for big batches; the focus outlines it)
    if (merged) rect(parts, "ov-base", k * bw, H - 2, bw, 2);
    else parts.push(`<rect x="${k * bw}" y="${H - 2}" width="${bw}" height="2" fill="${esc(reqColor(b.rid))}"/>`);
    parts.push(`<rect x="${k * bw}" y="0" width="${bw}" height="${H}" class="ov-hit"/></g>`);
    out.push(parts.join(""));
  });
  // a big batch's merged segments are drawn under the bars' hit areas, as each bar's own would be
  const under = merged ? [...merged].map(([cls, d]) => `<path d="${d}" class="${cls}"${cls === "ov-base" ? ` fill="${esc(reqColor(""))}"` : ""}/>`) : [];
  root.innerHTML = under.join("") + out.join("");
  const barOf = (e) => (e.target.closest ? e.target.closest(".ov-bar") : null);
  root.addEventListener("click", (e) => { const g = barOf(e); if (g) onPick(g.dataset.req); });
  // a batch request's bar lights its row, tokens and blocks in the other views, as its row does
  let lit = null;
  root.addEventListener("mouseover", (e) => {
    const g = barOf(e);
    if (g === lit) return;
    lit = g;
    setHover(g && g.dataset.row !== undefined ? { kind: "request", index: Number(g.dataset.row) } : null);
  });
  root.addEventListener("mouseleave", () => { if (lit) { lit = null; setHover(null); } });
  wrap.append(root);
  return wrap;
}

// the focus box's suggestions: the run's request ids, built once per run (a big run has hundreds)
let idList = { ids: null, node: null };
function focusIds(ids) {
  if (idList.ids !== ids) idList = { ids, node: el("datalist", { id: "focus-ids" }, ids.map((rid) => el("option", { value: rid }))) };
  return idList.node;
}

function focusControl(onPick) {
  const ids = scenarioReqIds();
  const list = focusIds(ids);
  const input = el("input", { id: "focus-req", type: "search", list: "focus-ids", value: state.req || "", placeholder: L("focus_placeholder"),
    "aria-label": L("focus_on"), size: 8 });
  // the box is redrawn by the pick, which blurs it: a change that names the focus already is a no-op
  const go = () => { const v = input.value.trim(); if (ids.includes(v) && v !== state.req) onPick(v); };
  input.addEventListener("change", go);
  input.addEventListener("keydown", (e) => { if (e.key === "Enter") go(); });
  const only = el("input", { id: "focus-only", type: "checkbox" });
  only.checked = Boolean(S.focusOnly);
  only.addEventListener("change", () => { S.focusOnly = only.checked; if (S.onFocusChange) S.onFocusChange(); });
  return el("div", { class: "ov-focus" }, [
    el("label", { for: "focus-req", text: L("focus_on") }), input, list,
    el("label", { class: "ov-only" }, [only, L("focus_only")]),
  ]);
}

// the token row in one line: a cell per token coloured by request, block starts as ticks
function minimap(onPick) {
  const T = tokenCount();
  const wrap = el("div", { class: "ov-minimap-wrap" }, [el("strong", { text: L("minimap") })]);
  const c = el("canvas", { id: "minimap", class: "minimap", width: 1000, height: 18, "aria-label": L("minimap"), role: "img" });
  wrap.append(c);
  if (!T) return wrap;
  const ctx = c.getContext("2d");
  const reqOf = reqOfTokens(), pos = A("positions") || [], bs = blockSize();
  const ids = S.trace.batch.req_ids.map(String);
  const w = c.width / T;
  for (let i = 0; i < T; i++) {
    const rid = ids[reqOf[i]];
    // alternate two shades by batch row so neighbouring requests part; the focus stands out
    ctx.fillStyle = rid === state.req ? "#d55e00" : reqOf[i] % 2 ? "#8aa9c9" : "#4f6d8f";
    ctx.fillRect(i * w, 4, Math.ceil(w), 14);
    if (pos[i] % bs === 0) { ctx.fillStyle = "#111"; ctx.fillRect(i * w, 0, Math.max(1, w / 4), 18); }
  }
  c.addEventListener("click", (e) => {
    const rect = c.getBoundingClientRect();
    const i = Math.min(T - 1, Math.max(0, Math.floor(((e.clientX - rect.left) / rect.width) * T)));
    onPick(ids[reqOf[i]]);
    const cell = document.querySelector(`#token-table th[data-t="${i}"]`);
    if (cell) cell.scrollIntoView({ block: "nearest", inline: "center" });
  });
  const win = el("div", { class: "minimap-window", id: "minimap-window" });
  wrap.append(win);
  requestAnimationFrame(() => placeWindow(win, c));
  return wrap;
}

// the window: the span of tokens the token table's box shows now
export function placeWindow(win = $("minimap-window"), c = $("minimap")) {
  const box = $("tok-table");
  if (!win || !c || !box) return;
  const heads = [...box.querySelectorAll("th[data-t]")];
  const T = tokenCount();
  if (!heads.length || !T) { win.hidden = true; return; }
  const view = box.getBoundingClientRect();
  const seen = heads.filter((h) => { const r = h.getBoundingClientRect(); return r.right > view.left && r.left < view.right; });
  if (!seen.length) { win.hidden = true; return; }
  const first = Number(seen[0].dataset.t);
  const lastH = seen[seen.length - 1];
  const last = Number(lastH.dataset.t) + Number(lastH.dataset.gap || 0) + 1;
  const cr = c.getBoundingClientRect(), pr = c.parentElement.getBoundingClientRect();
  win.hidden = false;
  win.style.left = `${cr.left - pr.left + (first / T) * cr.width}px`;
  win.style.width = `${Math.max(2, ((Math.min(T, last) - first) / T) * cr.width)}px`;
  win.style.top = `${cr.top - pr.top}px`;
  win.style.height = `${cr.height}px`;
}
