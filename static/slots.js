// Model Runner V2's state slots, shown where V1 shows its persistent batch's rows and moves. V2 keeps
// each request in a fixed state slot (trace.batch.slots): a new or resumed request takes the next of
// the free slots (trace.batch.free_slots, handed out from the top, a freed slot first), and every
// step the scheduled requests are sorted into a batch whose row i reads its state from slot
// idx_mapping[i]. The panel draws the batch order on the left, the slots on the right and an arrow
// per idx_mapping entry between them, each in its request's colour; this step's slot_events are
// marked on their slots (freed, added), and the free slots are listed in the order they will be
// handed out. Below, the per-slot state (arrays of level "slot", one column per slot).
//
// Rows have one fixed height (ROW px, style.css's .slotmap), so the arrows are placed without
// reading the page's layout; a step change rebuilds this small panel only. A big batch's panel
// holds a slot row per request and a state column per slot, in a box that shows a dozen of each:
// the first ones are drawn with the step, the rest once the page is idle after its frame (at once
// when the reader scrolls the box), as the big tables' rows and columns are (tables.js).

import { afterFrame, whenIdle } from "./canvasmap.js";
import { exportMenu } from "./export.js";
import { applySelection, select, setHover } from "./hover.js";
import { $, A, L, S, bigBatch, isV2, reqColor, reqTint, state } from "./context.js";
import { morph, morphChildren } from "./morph.js";
import { clear, el, fmtList } from "./views.js";

const ROW = 30;              // px: every row of both columns, the header included (style.css)
const ROW_PRESENT = 26;      // px: the same in presentation mode, whose numbers are larger (style.css)
const ARROWS_W = 84;         // px: the arrows' column
const MAX_ROWS = 32;         // batch rows drawn; the rest are counted
const FREE_SHOWN = 4;        // free slots drawn beside the occupied ones (next ones first)
const MAX_SLOT_COLS = 64;    // columns of the per-slot state table
const EAGER_SLOTS = 14;      // a big batch's rows (each column) and state columns drawn with the step (the box shows about 10 and 12)
const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}) {
  const n = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, String(v));
  return n;
}

// a request's chip: its id on its tint, edged in its colour (the page's request colours)
function reqChip(rid) {
  return el("span", { class: "sm-req", style: `background:${reqTint(rid)};border-color:${reqColor(rid)}`, text: rid });
}

// the slots drawn: every occupied one, every one this step's events touched, the next free ones;
// a big pool's other free slots are counted, not drawn
function shownSlots(M, slots, free, events) {
  const keep = new Set([...Object.values(slots), ...events.map((e) => e.slot), ...free.slice(0, FREE_SHOWN)]);
  if (M <= MAX_ROWS) for (let j = 0; j < M; j++) keep.add(j);
  return [...keep].filter((j) => j >= 0 && j < M).sort((a, b) => a - b);
}

// the rest of a big batch's panel, still to be drawn: dropped when the panel is drawn again
let later = null;
function addLater(box, add) {
  const job = () => {
    if (later !== job) return;
    later = null;
    if (!box.isConnected) return;
    add();
    applySelection({ plots: false });
    document.dispatchEvent(new Event("pagedviz:late-cells"));
  };
  later = job;
  afterFrame(() => whenIdle(job, 1000));
}
const scrollWatched = new WeakSet();
function runLaterOnScroll(box) {
  if (scrollWatched.has(box)) return;
  scrollWatched.add(box);
  box.addEventListener("scroll", () => { if (later) later(); }, { passive: true, capture: true });
}

// the slot map on the page, whole (every row drawn): what it was drawn from, as a key; a step
// whose map is the same (a decode step after another) redraws the per-slot state's values only
let drawnMap = "";
let laterMap = false;  // whether the job still to come (`later`) adds rows of the map

export function renderSlots() {
  const panel = $("slots-panel");
  if (!panel) return;
  const pending = later && laterMap;  // rows of the map still to come (not only the state's later cells)
  later = null;
  const on = Boolean(S.trace && isV2() && S.trace.batch && S.trace.batch.slots);
  panel.hidden = !on;
  document.body.classList.toggle("runner-v2", on);  // presentation mode places the panel (style.css)
  const box = $("slots");
  if (!on) { clear(box); drawnMap = ""; return; }
  const lazy = bigBatch();
  if (lazy) runLaterOnScroll(box);
  const rest = [];  // what a big batch's panel draws after the frame: [parent, nodes]
  const tr = S.trace;
  const M = S.overview.scenario.config.max_num_reqs;
  const slots = tr.batch.slots || {};
  const free = tr.batch.free_slots || [];
  const events = tr.batch.slot_events || [];
  const ids = tr.idle ? [] : tr.batch.req_ids.map(String);
  const idx = A("idx_mapping") || [];
  const occupant = new Map(Object.entries(slots).map(([rid, j]) => [j, String(rid)]));
  const freeOrder = new Map(free.map((j, k) => [j, k]));
  const rowOfReq = new Map(ids.map((rid, r) => [rid, r]));
  const shown = shownSlots(M, slots, free, events);
  const yOfSlot = new Map(shown.map((j, k) => [j, k]));
  const rows = ids.slice(0, MAX_ROWS);
  const rowH = document.body.classList.contains("present") ? ROW_PRESENT : ROW;
  const mapKey = JSON.stringify([S.created && S.created.run_id, ids, idx, slots, free, events, state.lang, rowH, M, lazy]);
  const stateBox = box.querySelector(":scope > .sm-state");
  if (!pending && mapKey === drawnMap && stateBox && $("slotmap")) {
    redrawState(box, stateBox, M, occupant, lazy);
    return;
  }
  clear(box);
  drawnMap = "";

  // the batch order, sorted this step: row, request, idx_mapping
  const left = el("div", { class: "sm-grid sm-rows", role: "table", "aria-label": L("v2_batch_order") });
  left.append(el("div", { class: "sm-head", role: "row" }, [el("span", { text: L("row") }), el("span", { text: L("req") }), el("code", { text: "idx_mapping" })]));
  const batchRows = rows.map((rid, r) => (
    el("div", { class: "sm-row", role: "row", tabindex: 0, dataset: { r, req: rid },
      onmouseenter: () => setHover({ kind: "request", index: r }), onmouseleave: () => setHover(null),
      onclick: () => select({ kind: "request", index: r }),
      onkeydown: (e) => { if (e.key === "Enter") select({ kind: "request", index: r }); } },
    [el("span", { class: "sm-n", text: String(r) }), reqChip(rid), el("span", { class: "sm-idx", text: `→ ${idx[r]}` })])));
  const eagerBatch = lazy ? EAGER_SLOTS : batchRows.length;
  left.append(...batchRows.slice(0, eagerBatch));
  if (eagerBatch < batchRows.length) rest.push([left, batchRows.slice(eagerBatch)]);
  if (!ids.length) left.append(el("div", { class: "sm-row muted", text: L("idle_step") }));

  // the state slots: slot, who holds it (or its place in the free order), this step's events
  const right = el("div", { class: "sm-grid sm-slots", role: "table", "aria-label": L("v2_slots") });
  right.append(el("div", { class: "sm-head", role: "row" }, [el("span", { text: L("v2_slot") }), el("span", { text: L("v2_holder") }), el("span", { text: L("v2_this_step") })]));
  const slotRows = [];
  for (const j of shown) {
    const rid = occupant.get(j);
    const evs = events.filter((e) => e.slot === j);
    const holder = rid !== undefined ? reqChip(rid)
      : el("span", { class: "sm-free", title: L("v2_next_n").replace("{n}", freeOrder.get(j) + 1), text: `${L("v2_free")} #${freeOrder.get(j) + 1}` });
    const marks = el("span", { class: "sm-events" }, evs.map((e) => el("span", { class: `sm-ev sm-ev-${e.event}`,
      style: `border-color:${reqColor(String(e.req_id))}`, text: `${L(`v2_${e.event}`)} ${e.req_id}` })));
    const r = rid !== undefined ? rowOfReq.get(rid) : undefined;
    const attrs = { class: `sm-row sm-slot${rid === undefined ? " is-free" : ""}${evs.length ? " has-event" : ""}`, role: "row", dataset: { slot: j } };
    if (rid !== undefined) attrs.dataset.req = rid;
    if (r !== undefined) {
      Object.assign(attrs, { tabindex: 0, onmouseenter: () => setHover({ kind: "request", index: r }), onmouseleave: () => setHover(null),
        onclick: () => select({ kind: "request", index: r }) });
    }
    slotRows.push(el("div", attrs, [el("span", { class: "sm-n", text: String(j) }), holder, marks]));
  }
  const hiddenFree = free.length - free.filter((j) => yOfSlot.has(j)).length;
  if (hiddenFree > 0) slotRows.push(el("div", { class: "sm-row muted", text: L("v2_more_free").replace("{n}", hiddenFree) }));
  const eagerRows = lazy ? EAGER_SLOTS : slotRows.length;
  right.append(...slotRows.slice(0, eagerRows));
  if (eagerRows < slotRows.length) rest.push([right, slotRows.slice(eagerRows)]);

  // idx_mapping: an arrow from each batch row to its slot, in the request's colour on a dark edge
  const height = rowH * (1 + Math.max(rows.length, shown.length, 1));
  const arrows = svg("svg", { class: "sm-arrows", width: ARROWS_W, height, viewBox: `0 0 ${ARROWS_W} ${height}`, role: "img", "aria-label": "idx_mapping" });
  const defs = svg("defs");
  const head = svg("marker", { id: "sm-head", viewBox: "0 0 10 10", refX: 8, refY: 5, markerWidth: 12, markerHeight: 12, markerUnits: "userSpaceOnUse", orient: "auto" });
  head.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#222" }));
  defs.append(head);
  arrows.append(defs);
  rows.forEach((rid, r) => {
    const k = yOfSlot.get(idx[r]);
    if (k === undefined) return;
    const y0 = rowH * (r + 1) + rowH / 2, y1 = rowH * (k + 1) + rowH / 2;
    const d = `M4,${y0} C${ARROWS_W / 2},${y0} ${ARROWS_W / 2},${y1} ${ARROWS_W - 6},${y1}`;
    const g = svg("g", { class: "sm-arrow", "data-r": r });
    g.append(svg("path", { d, class: "sm-edge", "marker-end": "url(#sm-head)" }), svg("path", { d, class: "sm-line", stroke: reqColor(rid) }));
    const t = svg("title");
    t.textContent = `idx_mapping[${r}] = ${idx[r]} (${rid})`;
    g.append(t);
    arrows.append(g);
  });

  const map = el("div", { id: "slotmap", class: "slotmap", style: `--sm-row:${rowH}px` }, [left, arrows, right]);
  box.append(map);
  if (ids.length > rows.length) box.append(el("p", { class: "muted", text: L("v2_more_rows").replace("{n}", ids.length - rows.length) }));

  // the free slots in the order they will be handed out
  box.append(el("p", { class: "sm-freelist", id: "sm-freelist" }, [
    el("strong", { text: `${L("v2_free_order")}: ` }),
    ...(free.length ? free.slice(0, 16).map((j, k) => el("span", { class: "sm-freechip", dataset: { slot: j }, text: `${k === 0 ? `${L("v2_next")} ` : ""}${j}` }))
      : [el("span", { class: "muted", text: L("v2_none_free") })]),
    free.length > 16 ? ` … (${free.length - 16})` : null,
    el("code", { class: "sm-raw", text: ` free_slots = ${fmtList(free, 16)}` })]));
  box.append(el("p", { class: "sm-legend muted", text: L("v2_mapping_legend") }));
  box.append(slotStateTable(M, occupant, lazy ? EAGER_SLOTS : M, rest));
  if (rest.length) {
    laterMap = true;
    addLater(box, () => {
      for (const [parent, nodes] of rest) parent.append(...(typeof nodes === "function" ? nodes() : nodes));
      drawnMap = mapKey;
    });
  } else drawnMap = mapKey;
}

// the per-slot state redrawn into the table on the page: a big batch's first columns now, the
// others (each row's later cells) once the page is idle, as a new table's would be
function redrawState(box, stateBox, M, occupant, lazy) {
  const rest = [];
  const fresh = slotStateTable(M, occupant, lazy ? EAGER_SLOTS : M, rest);
  const live = stateBox.querySelector("table"), made = fresh.querySelector("table");
  const liveRows = live ? [...live.rows] : [], freshRows = made ? [...made.rows] : [];
  const same = rest.length && liveRows.length === freshRows.length && freshRows.every((r, k) => r.dataset.array === liveRows[k].dataset.array);
  if (!same) { morph(stateBox, slotStateTable(M, occupant, M, [])); return; }
  // the wrap's other parts as usual; each row's first cells morphed, its later ones kept for now
  const kids = [...fresh.childNodes], liveKids = [...stateBox.childNodes];
  if (kids.length !== liveKids.length) { morph(stateBox, slotStateTable(M, occupant, M, [])); return; }
  kids.forEach((kid, i) => { if (kid !== made) morph(liveKids[i], kid); });
  liveRows.forEach((row, k) => morphChildren(row, [...freshRows[k].childNodes], { keep: true }));
  laterMap = false;
  addLater(box, () => {
    rest.forEach(([, cells], k) => {
      const row = liveRows[k], late = cells(), at = freshRows[k].childNodes.length;
      late.forEach((cell, j) => { const was = row.children[at + j]; if (was) morph(was, cell); else row.append(cell); });
      while (row.children.length > at + late.length) row.lastChild.remove();
    });
  });
}

// the arrays of level "slot" (one entry per state slot, [max_num_reqs]): a row per array, a column
// per slot, each column in its occupant's tint
// (columns past `eager` are left in `rest`, [row, cells] each, for the panel to add later)
function slotStateTable(M, occupant, eager, rest) {
  const tr = S.trace;
  const names = Object.keys(tr.arrays).filter((n) => tr.arrays[n].level === "slot");
  const wrap = el("div", { class: "scroll-x sm-state" });
  if (!names.length) return wrap;
  wrap.append(el("p", { class: "sm-caption", text: L("v2_slot_state") }), exportMenu(names));
  const n = Math.min(M, MAX_SLOT_COLS);
  const first = Math.min(n, eager);
  const table = el("table", { id: "slot-state", class: "tok-table slot-state", "aria-label": L("v2_slot_state") });
  const tint = (j) => { const rid = occupant.get(j); return rid !== undefined ? `background:${reqTint(rid)}` : ""; };
  // the row's cells, drawn now up to `first`, the others left in `rest`
  const split = (row, cell) => {
    for (let j = 0; j < first; j++) row.append(cell(j));
    if (first < n) rest.push([row, () => { const late = []; for (let j = first; j < n; j++) late.push(cell(j)); return late; }]);
    return row;
  };
  const head = split(el("tr", {}, [el("th", { scope: "col", text: L("v2_slot") })]), (j) => {
    const rid = occupant.get(j);
    return el("th", { scope: "col", class: "tok-head", dataset: { slot: j }, style: tint(j),
      title: rid !== undefined ? `${L("req")} ${rid}` : L("v2_free"), text: rid !== undefined ? `${j} · ${rid}` : String(j) });
  });
  table.append(el("thead", {}, head));
  const body = el("tbody");
  for (const name of names) {
    const data = tr.arrays[name].data;
    body.append(split(el("tr", { dataset: { array: name } }, [el("th", { scope: "row" }, el("code", { text: name }))]),
      (j) => el("td", { dataset: { slot: j }, class: occupant.has(j) ? "" : "sm-stale", style: tint(j), text: String(data[j]) })));
  }
  table.append(body);
  wrap.append(table);
  if (M > n) wrap.append(el("p", { class: "muted", text: L("more_columns").replace("{n}", M - n) }));
  if (bigBatch()) wrap.classList.add("big-box");
  return wrap;
}
