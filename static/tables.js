// The request and token tables: one row per request of the persistent batch with its
// request-level arrays, and one column per scheduled token with every token-level array in stage
// order (the current stage's writes and reads marked, later stages dimmed). Cells are tinted by
// request and tagged (data-r, data-t) for the linked highlighting in hover.js.

import { addLater, dropLater, scrolled, shown } from "./bigtable.js";
import { exportMenu } from "./export.js";
import { applySelection, select, setHover } from "./hover.js";
import { rowTops, slideRows } from "./motion.js";
import { writeState } from "./urlstate.js";
import { $, L, S, bigBatch, blockSize, reqOfTokens, reqTint, rowMoves, stageIndex, state, tokenCount, writerStage } from "./context.js";
import { clear, el, fmtList } from "./views.js";
import { morph, morphChildren } from "./morph.js";

// the request table's causes before its effects: what the batch holds (computed so far, the
// sequence's length, this step's share), then every other array in the order its stage runs
const INPUTS_FIRST = ["num_computed_tokens_cpu", "num_tokens", "num_scheduled_tokens"];
function causesFirst(names) {
  const rank = (n) => { const i = INPUTS_FIRST.indexOf(n); if (i >= 0) return i - 100; const j = stageIndex(writerStage(n)); return j < 0 ? 99 : j; };
  return [...names].sort((x, y) => rank(x) - rank(y));
}

// "b: row 1 → 0" for a request whose batch row changed since the previous step
export function moveLabel(m) { return `${m.req_id}: ${L("row")} ${m.from} → ${m.to}`; }

// The previous step's value of an array for a request, matched by request id (not by row):
// undefined where the request was not in the previous batch or the array is new.
function previousValues() {
  const prev = S.prev;
  if (!prev || prev.idle || !prev.batch) return null;
  const rowOf = new Map(prev.batch.req_ids.map((rid, r) => [String(rid), r]));
  return (name, rid) => {
    const a = prev.arrays[name];
    const r = rowOf.get(String(rid));
    if (!a || a.level !== "request" || r === undefined || a.shape[0] !== prev.batch.req_ids.length) return undefined;
    return a.data[r];
  };
}

// a cell with its value and, when it changed since the previous step, the old one: "+1" for a
// number (its accessible label says "was 4"), the old value struck through otherwise
function deltaCell(value, old) {
  const td = el("td", { text: String(value), dataset: { v: String(value) } });
  if (old === undefined || String(old) === String(value)) return td;
  const label = `${L("delta_was")} ${old}`;
  td.classList.add("changed");
  if (typeof value === "number" && typeof old === "number") {
    const d = value - old;
    td.append(" ", el("span", { class: "delta", title: label, "aria-label": label, text: `${d > 0 ? "+" : "−"}${Math.abs(d)}` }));
  } else {
    td.append(" ", el("del", { class: "ghost", title: label, "aria-label": label, text: String(old) }));
  }
  return td;
}

// the "Δ previous step" switch (on by default: stepping is about what changed; off for a clean slide)
function deltaToggle() {
  return el("label", { class: "small delta-toggle" }, [
    el("input", { type: "checkbox", id: "delta-toggle", checked: state.delta, onchange: (e) => {
      state.delta = e.target.checked;
      writeState(state);
      renderRequestTable();
      applySelection({ plots: false });
    } }), ` ${L("delta_toggle")}`]);
}

// the rows drawn before the frame that shows the step: those the box shows (a row is at least 20 px
// high), 24 before its size is known
const EAGER_ROWS = 24;
let drawnStep = null;  // the step the request table shows, so that only a step change slides rows
let slides = null;  // rows to slide once the whole step is drawn: [table, tops before, request ids]

// the request rows' places, read before a step change writes anything (a read on an unchanged page
// costs no layout; the same read after the other views were rebuilt would lay the page out twice)
let topsBefore = null;
// (only where rows moved: Model Runner V2's batch, sorted afresh every step, has no moves to slide,
// and 128 rows' places are 128 reads)
export function noteRowTops() { topsBefore = drawnStep !== null && rowMoves().length ? rowTops($("request-table")) : null; }

export function renderRequestTable() {
  const before = drawnStep !== null && drawnStep !== state.step && rowMoves().length ? topsBefore || rowTops($("request-table")) : new Map();
  topsBefore = null;
  drawnStep = state.step;
  const box = $("req-table");
  const pending = dropLater(box);  // a job still to come for the table this replaces
  const tr = S.trace;
  const ids = tr.batch.req_ids;
  if (!ids.length) { clear(box).append(el("p", { class: "muted", text: L("idle_step") })); return; }
  const names = causesFirst(Object.keys(tr.arrays).filter((n) => tr.arrays[n].level === "request" && tr.arrays[n].shape[0] === ids.length));
  const extra = Object.keys(tr.arrays).filter((n) => tr.arrays[n].level === "request" && tr.arrays[n].shape[0] === ids.length + 1);
  const moved = new Map(rowMoves().map((m) => [m.req_id, m]));
  const was = state.delta ? previousValues() : null;
  const table = el("table", { class: "req-table", id: "request-table", "aria-label": L("request_level") });
  table.append(el("caption", {}, [exportMenu([...names, ...extra]), " ", deltaToggle()]));
  table.append(el("thead", {}, el("tr", {}, [el("th", { text: L("row") }), el("th", { text: L("req") }),
    ...names.map((n) => el("th", { title: n, dataset: { array: n } }, [el("code", { text: n })]))])));
  const body = el("tbody");
  const inPrev = S.prev && S.prev.batch ? new Set(S.prev.batch.req_ids.map(String)) : null;
  // the rows in batch order, always (query_start_loc and friends are sums in this order): the
  // focused request's row is marked where it is, or kept alone with "only this request"
  const focus = focusRow();
  let rows = ids.map((rid, r) => [rid, r]);
  if (S.focusOnly && state.req) rows = focus >= 0 ? [rows[focus]] : [];
  box.classList.toggle("big-box", bigBatch());
  const rowOf = ([rid, r]) => {
    const move = moved.get(String(rid));
    const fresh = was && inPrev && !inPrev.has(String(rid));
    const row = el("tr", { dataset: { r, req: rid }, tabindex: 0, class: `${move ? "moved" : ""}${r === focus ? " focus-row" : ""}`,
      onmouseenter: () => setHover({ kind: "request", index: r }), onmouseleave: () => setHover(null),
      onclick: () => select({ kind: "request", index: r }), onfocus: () => setHover({ kind: "request", index: r }), onblur: () => setHover(null),
      onkeydown: (e) => { if (e.key === "Enter") select({ kind: "request", index: r }); } },
    [el("td", {}, [String(r), move ? el("span", { class: "move-label", text: ` (${moveLabel(move)})` }) : null,
      fresh ? el("span", { class: "delta delta-new", text: ` ${L("delta_new")}` }) : null]),
     el("td", { class: "req-cell", style: `background:${reqTint(rid)}`, text: rid }),
     ...names.map((n) => deltaCell(tr.arrays[n].data[r], was ? was(n, rid) : undefined))]);
    return row;
  };
  // a big batch's table scrolls in its own box: the rows it shows are drawn before the frame, the
  // rest once the page is idle (all at once where the reader has scrolled the box)
  const first = shown(box, "height", 20, EAGER_ROWS);
  const at = rows.findIndex(([, r]) => r === focus);  // the focused row is drawn at once
  const eager = bigBatch() && rows.length > first && !scrolled(box, "scrollTop") ? Math.max(first, at + 1) : rows.length;
  body.append(...rows.slice(0, eager).map(rowOf));
  table.dataset.whole = "1";
  table.append(body);
  // the table on the page, whole (no rows still to come), is redrawn in place: its rows the box
  // shows now, the others once the page is idle
  const live = box.firstChild;
  if (live && live.id === "request-table" && live.dataset.whole === "1" && !pending && live.tBodies.length === 1) {
    for (const node of [...box.childNodes].slice(1)) node.remove();
    const liveBody = live.tBodies[0];
    morph(live.caption, table.caption);
    morph(live.tHead, table.tHead);
    morphChildren(live, [live.caption, live.tHead, liveBody]);
    const have = liveBody.rows.length;
    const fresh = [...body.rows];
    for (let k = 0; k < Math.min(have, fresh.length); k++) morph(liveBody.rows[k], fresh[k]);
    if (fresh.length > have) liveBody.append(...fresh.slice(have));
    for (const k in table.dataset) live.dataset[k] = table.dataset[k];
    if (eager < rows.length) {
      addLater(box, live, () => {
        for (let k = eager; k < rows.length; k++) {
          if (k < liveBody.rows.length) morph(liveBody.rows[k], rowOf(rows[k])); else liveBody.append(rowOf(rows[k]));
        }
        while (liveBody.rows.length > rows.length) liveBody.lastChild.remove();
      });
    } else while (liveBody.rows.length > rows.length) liveBody.lastChild.remove();
    finishRequestTable(box, live, liveBody, at, rows, extra, moved, before);
    return;
  }
  clear(box);
  if (eager < rows.length) addLater(box, table, () => body.append(...rows.slice(eager).map(rowOf)));
  box.append(table);
  finishRequestTable(box, table, body, at, rows, extra, moved, before);
}

// what follows the request table's rows: the focused row brought into the box's view, the
// request-level arrays of another length, and the rows that moved (slid once the step is drawn)
function finishRequestTable(box, table, body, at, rows, extra, moved, before) {
  const tr = S.trace;
  // a big batch's table scrolls in its own box: the focused row is brought into that box's view
  if (at > 0 && box.classList.contains("big-box")) {
    const row = body.children[at];
    if (row) requestAnimationFrame(() => { box.scrollTop = Math.max(0, row.offsetTop - row.offsetHeight * 2); });
  }
  if (!rows.length) box.append(el("p", { class: "muted", text: `${state.req}: ${L("not_in_batch")}` }));
  for (const n of extra) box.append(el("p", { class: "value-line", dataset: { array: n } }, [el("code", { text: n }), " = ", fmtList(tr.arrays[n].data, 64)]));
  slides = moved.size && before.size ? [table, before, [...moved.keys()]] : null;
}

// the rows that moved slide from their old places (after every view of the step is written, so
// their new places cost one layout, the one the frame needs anyway)
export function slidePendingRows() {
  if (slides) slideRows(...slides);
  slides = null;
}

const MAX_TOKEN_COLS = 512;
// the columns drawn before the frame that shows the step: those the box shows (a column is at least
// 30 px wide), 64 before its size is known
const EAGER_COLS = 64;
// a run of one request's consecutive positions longer than this is compressed to its first and
// last RUN_KEEP tokens around one "… N tokens …" column
const RUN_MIN = 12;
const RUN_KEEP = 3;
// a batch whose columns would still be more than DENSE_AT (a big batch's many prefills) keeps one
// token at each end of a run longer than DENSE_MIN: every request's tokens fit in a few screens,
// where the table would otherwise be cut at MAX_TOKEN_COLS (128 prefills: 7 columns each, 896)
const DENSE_AT = 192;
const DENSE_MIN = 3;
const DENSE_KEEP = 1;

// The token table's columns: {t: index} for a token, {gap: [from, to], n, bounds} for a compressed
// span (bounds: the positions inside it where a block starts). With `only` (a batch row), the
// columns of that request alone; with `all`, every token uncompressed. `cols.dense`: each run kept
// to its first and last token (past DENSE_AT columns).
export function tokenColumns(T, reqOf, pos, bs, { all = false, only = -1 } = {}) {
  const cols = runColumns(T, reqOf, pos, bs, all, only, RUN_MIN, RUN_KEEP);
  if (all || cols.length <= DENSE_AT) return cols;
  const dense = runColumns(T, reqOf, pos, bs, all, only, DENSE_MIN, DENSE_KEEP);
  dense.dense = true;
  return dense;
}

function runColumns(T, reqOf, pos, bs, all, only, min, keep) {
  const cols = [];
  let i = 0;
  while (i < T) {
    let j = i + 1;
    while (j < T && reqOf[j] === reqOf[i] && pos[j] === pos[j - 1] + 1) j++;
    if (only < 0 || reqOf[i] === only) {
      if (all || j - i <= min) for (let k = i; k < j; k++) cols.push({ t: k });
      else {
        for (let k = i; k < i + keep; k++) cols.push({ t: k });
        const from = i + keep, to = j - keep;  // [from, to) compressed
        const bounds = [];
        for (let k = from; k < to; k++) if (pos[k] % bs === 0) bounds.push(pos[k]);
        cols.push({ gap: [from, to], n: to - from, bounds });
        for (let k = to; k < j; k++) cols.push({ t: k });
      }
    }
    i = j;
  }
  return cols;
}

// the focused request's batch row (state.req), or -1
export function focusRow() {
  if (!state.req || !S.trace || S.trace.idle) return -1;
  return S.trace.batch.req_ids.map(String).indexOf(state.req);
}

export function renderTokenTable() {
  const box = $("tok-table");
  const old = box.querySelector("#token-table");
  dropLater(box);
  if ($("tok-tools")) clear($("tok-tools"));
  const tr = S.trace;
  const T = tokenCount();
  if (!T) { clear(box).append(el("p", { class: "muted", text: L("idle_step") })); return; }
  const reqOf = reqOfTokens();
  const pos = tr.arrays.positions ? tr.arrays.positions.data : Array.from({ length: T }, (_, i) => i);
  const bs = S.overview ? blockSize() : 16;
  const cur = stageIndex(state.stage);
  const curInfo = tr.stages.find((s) => s.name === state.stage) || { reads: [], writes: [] };
  const names = Object.keys(tr.arrays).filter((n) => tr.arrays[n].level === "token");
  const order = (n) => { const i = stageIndex(writerStage(n)); return i < 0 ? 99 : i; };
  names.sort((x, y) => order(x) - order(y));
  // presentation: the token row from positions to slot_mapping, and what the stage reads and writes
  if (state.present) {
    const key = new Set(["req_indices", "positions", "block_numbers", "block_offsets", "slot_mapping", ...curInfo.reads, ...curInfo.writes]);
    // several KV cache groups: group 0's rows and those of the first group of another kind, as
    // the block tables beside them show (a Gemma-3 style model's other sliding groups fold there)
    const groups = (tr.kv_cache && tr.kv_cache.kv_cache_groups) || [];
    const other = groups.findIndex((g) => g.kind !== groups[0].kind);
    // (their block_numbers only at the stage that writes them: slot_mapping_g{g} says where they went)
    const shown = (n) => {
      const m = /_g(\d+)$/.exec(n);
      if (!m) return true;
      return Number(m[1]) === other && (!n.startsWith("block_numbers") || curInfo.writes.includes(n));
    };
    names.splice(0, names.length, ...names.filter((n) => key.has(n) && shown(n)));
  }
  const only = S.focusOnly ? focusRow() : -1;
  if (S.focusOnly && state.req && only < 0) {
    clear(box).append(el("p", { class: "muted", text: `${state.req}: ${L("not_in_batch")}` }));
    return;
  }
  const all = Boolean(S.expandTokens);
  let cols = tokenColumns(T, reqOf, pos, bs, { all, only });
  const dense = Boolean(cols.dense);
  // padding columns past the scheduled tokens (a CUDA graph's size), as the arrays carry them
  const width = Math.max(T, ...names.map((n) => tr.arrays[n].data.length));
  if (only < 0 && (all || width - T <= RUN_MIN)) for (let k = T; k < width; k++) cols.push({ t: k, pad: true });
  else if (only < 0) {
    for (let k = T; k < T + RUN_KEEP; k++) cols.push({ t: k, pad: true });
    cols.push({ gap: [T + RUN_KEEP, width], n: width - T - RUN_KEEP, bounds: [], pad: true });
  }
  const cut = cols.length > MAX_TOKEN_COLS ? cols.length - MAX_TOKEN_COLS : 0;
  if (cut) cols = cols.slice(0, MAX_TOKEN_COLS);
  const compressed = cols.some((c) => c.gap);
  // the compression toggle, shown wherever a run is long enough to compress
  // the toggle sits in the panel's heading line: no extra line above the token row
  const bar = $("tok-tools") ? clear($("tok-tools")) : el("span");
  if (compressed || all) {
    bar.append(el("button", { type: "button", id: "btn-expand-tokens", "aria-pressed": all ? "true" : "false",
      text: L(all ? "compress_runs" : "show_all_tokens"), onclick: () => { S.expandTokens = !all; renderTokenTable(); if (S.onTokens) S.onTokens(); } }));
  }
  if (only >= 0) bar.append(el("span", { class: "muted", text: `${L("focus_only_of")} ${state.req}` }));

  const bound = (i) => i > 0 && pos[i] % bs === 0 ? " blk-bound" : "";
  // a gap's block starts, marked in its heading: past two, the first and last (its title lists
  // them all; a long prefill's dozen marks made its column hundreds of pixels wide)
  const boundMark = (b) => el("span", { class: "gap-bound", title: `${L("block_starts")} ${b}`, text: `|${b}` });
  const gapBounds = (c) => (c.bounds.length > 2
    ? [boundMark(c.bounds[0]), el("span", { class: "gap-more", text: "…" }), boundMark(c.bounds[c.bounds.length - 1])]
    : c.bounds.map(boundMark));
  const gapTitle = (c) => `${L("compressed_tokens").replace("{n}", c.n)}` + (c.bounds.length ? ` · ${L("block_starts")}: ${c.bounds.join(", ")}` : "");
  // a big batch's step with the same columns and rows as the table on the page (a decode step after
  // another) is drawn into that table, cell by cell: no table is torn down and built again
  const sig = JSON.stringify([names, cols.map((c) => (c.gap ? `${c.pad ? "p" : "g"}${c.gap[0]}-${c.gap[1]}` : `${c.pad ? "p" : ""}${c.t}`)),
    state.lang, state.present, cut, state.array, compressed]);

  const headCell = (c) => {
    if (c.gap && c.pad) return el("th", { scope: "col", class: "pad tok-gap", title: L("compressed_tokens").replace("{n}", c.n), text: `… ${c.n} …` });
    if (c.gap) {
      const i = c.gap[0];
      return el("th", { scope: "col", class: "tok-head tok-gap", tabindex: 0, dataset: { t: i, gap: c.n },
        title: gapTitle(c), style: `background:${reqTint(tr.batch.req_ids[reqOf[i]])}` },
        [el("span", { class: "gap-n", text: `… ${c.n} …` }), ...gapBounds(c)]);
    }
    const i = c.t;
    if (c.pad) return el("th", { scope: "col", class: "pad" });
    return el("th", { scope: "col", class: `tok-head${bound(i)}`, tabindex: 0, dataset: { t: i },
      style: `background:${reqTint(tr.batch.req_ids[reqOf[i]])}`, "aria-label": `${L("token")} ${i}, ${L("req")} ${tr.batch.req_ids[reqOf[i]]}`,
      text: i });
  };
  const bodyCell = (c, data) => {
    if (c.gap && c.pad) return el("td", { class: "pad tok-gap", text: c.gap[0] < data.length ? `${data[c.gap[0]]} …` : "" });
    if (c.gap) {
      const [a, b] = c.gap;
      const v0 = data[a], v1 = data[b - 1];
      return el("td", { class: "tok-gap", dataset: { t: a }, title: gapTitle(c), style: `background:${reqTint(tr.batch.req_ids[reqOf[a]])}`,
        text: v0 === v1 ? `${v0} …` : `${v0} … ${v1}` });
    }
    const i = c.t;
    if (i >= data.length) return el("td", { class: "pad" });
    if (c.pad) return el("td", { dataset: { t: i }, class: "pad", text: String(data[i]) });
    return el("td", { dataset: { t: i }, class: bound(i).trim(), style: `background:${reqTint(tr.batch.req_ids[reqOf[i]])}`,
      text: String(data[i]) });
  };
  // a wide table (a big batch) shows the columns its box can hold first; the rest are added once the
  // page is idle (at once where the reader has scrolled the table sideways)
  const first = shown(box, "width", 30, EAGER_COLS);
  const eager = cols.length > first && !scrolled(box, "scrollLeft") ? first : cols.length;
  const rowClass = (n) => {
    const cls = curInfo.writes.includes(n) ? "current" : curInfo.reads.includes(n) ? "reads" : order(n) > cur ? "future" : "";
    return `${cls}${state.array === n ? " array-hl" : ""}`;
  };
  // the columns the box shows are redrawn before the frame, the others (and any still to come) once
  // the page is idle, as a new table's would be
  function redrawInPlace(table) {
    const headRow = table.tHead.rows[0];
    const bodyRows = [...table.tBodies[0].rows];
    const have = headRow.cells.length - 1;  // the columns drawn so far (the later ones may still be to come)
    const patch = (from, to) => {
      for (let k = from; k < to; k++) morph(headRow.cells[k + 1], headCell(cols[k]));
      names.forEach((n, j) => {
        const row = bodyRows[j], data = tr.arrays[n].data;
        for (let k = from; k < to; k++) morph(row.cells[k + 1], bodyCell(cols[k], data));
      });
    };
    names.forEach((n, j) => { const cls = rowClass(n); if (bodyRows[j].className !== cls) bodyRows[j].className = cls; });
    const now = Math.min(have, eager);
    patch(0, now);
    if (now < cols.length) {
      addLater(box, table, () => {
        patch(now, have);
        const rest = cols.slice(have);
        headRow.append(...rest.map(headCell));
        names.forEach((n, j) => bodyRows[j].append(...rest.map((c) => bodyCell(c, tr.arrays[n].data))));
      });
    } else table.dataset.whole = "1";
  }
  if (bigBatch() && old && old.dataset.sig === sig) { redrawInPlace(old); return; }
  clear(box);
  const table = el("table", { class: `tok-table${compressed ? " rle" : ""}${dense ? " dense" : ""}`, id: "token-table", "aria-label": L("token_level") });
  table.dataset.sig = sig;
  table.append(el("caption", {}, exportMenu(names)));
  const head = el("tr", {}, [el("th", { scope: "col", text: L("token") }), ...cols.slice(0, eager).map(headCell)]);
  table.append(el("thead", {}, head));
  const body = el("tbody");
  const rows = [];
  for (const n of names) {
    const data = tr.arrays[n].data;
    const row = el("tr", { class: rowClass(n), dataset: { array: n } }, [el("th", { scope: "row" }, [el("code", { text: n })])]);
    for (let k = 0; k < eager; k++) row.append(bodyCell(cols[k], data));
    body.append(row);
    rows.push([row, data]);
  }
  table.append(body);
  box.append(table);
  table.dataset.whole = "1";
  if (eager < cols.length) {
    addLater(box, table, () => {
      const rest = cols.slice(eager);
      head.append(...rest.map(headCell));
      for (const [row, data] of rows) row.append(...rest.map((c) => bodyCell(c, data)));
    });
  }
  if (cut) box.append(el("p", { class: "muted", text: L("more_columns").replace("{n}", cut) }));
}
