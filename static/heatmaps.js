// The system-level heatmaps: token_ids_cpu (rows of the persistent batch), the block table and
// the attention mask, each as a canvas heatmap or as a table, with this step's changes outlined in
// orange and the selection in black. Ids are written as numbers in their cells; a cell's colour is
// its row's request (one colour per request for the whole run), so no colour scale rescales
// between steps; the mask is a two-category legend. The card around each view, the table/heatmap switch and a
// heatmap's click-to-select live here too; the KV cache has its own module, kvgrid.js.

import { fillTable } from "./canvasmap.js";
import { morph } from "./morph.js";
import { perGroup } from "./groups.js";
import { pngButton } from "./export.js";
import { applySelection, select, shapesFor } from "./hover.js";
import { $, A, L, S, bigBatch, btName, reqOrder, reqTint, scenarioReqIds } from "./context.js";
import { GREY_TINT, cellShape, clear, discreteScale, el, gridTable, heatmap, onHeatmapCell } from "./views.js";

// Request identity as a heatmap colour: z is the request's place in the scenario (a domain fixed for
// the run), and the scale gives each place its request's tint, light enough for dark numbers.
function identityScale() {
  const ids = scenarioReqIds();
  if (bigBatch() || !ids.length) return { colorscale: [[0, GREY_TINT], [1, GREY_TINT]], zmin: 0, zmax: 1 };
  return { colorscale: discreteScale(ids.map(reqTint)), zmin: -0.5, zmax: ids.length - 0.5 };
}
const rowReq = (r) => reqOrder(S.trace.batch.req_ids[r]);
// numbers in the cells when they fit; the hover names them always
const cellNumbers = (rows, cols) => (rows * cols <= 800 && cols <= 32 ? "%{text}" : undefined);

// a system-level card: a heatmap and its table, a Table/Heatmap toggle and a PNG button;
// onToggle redraws the cards once the view changed
export function card(id, titleKey, { toggle = true, extra = null, onToggle = () => {} } = {}) {
  const body = el("div", { class: "card-body" }, [el("div", { id: `hm-${id}`, class: "heatmap" }), el("div", { id: `tbl-${id}`, class: "table-alt" })]);
  const tools = el("div", { class: "card-tools" });
  if (extra) tools.append(extra);
  if (toggle) {
    tools.append(el("button", { class: "small", "aria-pressed": S.view[id] === "table" ? "true" : "false",
      onclick: () => { S.view[id] = S.view[id] === "table" ? "heatmap" : "table"; onToggle(); },
      text: S.view[id] === "table" ? L("heatmap") : L("table") }));
    tools.append(pngButton(id));
  }
  return el("section", { class: "card", id: `card-${id}`, "aria-label": L(titleKey) }, [
    el("header", {}, [el("h3", { text: L(titleKey) }), tools]), body]);
}

// shows the card's table or its heatmap; true when the table
export function showView(id) {
  const table = S.view[id] === "table";
  $(`hm-${id}`).hidden = table;
  $(`tbl-${id}`).hidden = !table;
  return table;
}

// clicking a heatmap cell selects what it stands for, as clicking the table view does
// (or presses Enter/Space on the heatmap's keyboard cursor)
export function onCellClick(id, pick) {
  const div = $(`hm-${id}`);
  if (!div) return;
  onHeatmapCell(div, (r, c, z) => {
    const sel = pick(r, c, z);
    if (sel) select(sel);
  });
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

export function drawTokenIds() {
  const arr = S.trace.arrays.token_ids_cpu;
  const lens = rowLens();
  const rows = arr.data.slice(0, 64).map((row, r) => row.slice(0, 1024).map((v, c) => (c < (lens[r] || 0) ? v : null)));
  S.shapes.token_ids_cpu = newTokenRanges().map(([r, from, to]) => spanShape(from, to, r, "#D55E00"));
  if (showView("token_ids_cpu")) {
    const fresh = newTokenCells();
    clear($("tbl-token_ids_cpu")).append(gridTable("table-token_ids_cpu", rows, {
      label: L("token_ids_cpu"), cellText: (r, c) => (rows[r][c] === null ? "?" : rows[r][c]),
      cellClass: (r, c) => (fresh.has(`${r},${c}`) ? "new" : rows[r][c] === null ? "empty" : ""),
    }));
  } else {
    const z = rows.map((row, r) => row.map((v) => (v === null ? null : rowReq(r))));
    // the ids ride along as numbers (customdata); only a small table gets them as cell text
    const numbers = cellNumbers(z.length, z.length ? z[0].length : 0);
    heatmap($("hm-token_ids_cpu"), z, { title: "token_ids_cpu", xTitle: L("ax_position"), yTitle: L("ax_row"), shapes: shapesFor("token_ids_cpu"),
      customdata: rows, text: numbers ? rows.map((row) => row.map((v) => (v === null ? "" : String(v)))) : undefined,
      texttemplate: numbers, ...identityScale(), hover: "row %{y}, position %{x}: id %{customdata}", showscale: false });
    onCellClick("token_ids_cpu", (r) => (r < S.trace.batch.req_ids.length ? { kind: "request", index: r } : null));
  }
}

// a card's table view: a big batch's is built once the page is idle when its card is out of view
// (canvasmap.js's fillTable), then gets what the views did to the others, as a big table's late
// cells do: the selection's highlight and (predict.js and compare.js listen) a checkpoint's
// concealed answers and a comparison's marks; a small run's at once
function lateTable() {
  applySelection({ plots: false });
  document.dispatchEvent(new Event("pagedviz:late-cells"));
}
// (a table like the one in the box, a later step's, is morphed into it: only the cells whose
// text or marks changed cost the browser anything)
export function putTable(box, make) {
  const fill = () => {
    const fresh = make(), live = box.firstChild;
    if (live && box.childNodes.length === 1 && live.nodeName === fresh.nodeName && live.id === fresh.id) morph(live, fresh);
    else clear(box).append(fresh);
  };
  if (bigBatch()) fillTable(box, fill, lateTable);
  else fill();
}

export function drawBlockTable() {
  const name = btName();
  const data = S.trace.arrays[name].data.slice(0, 64);
  // a block is new in the row of the request it was added to (a prefix-cache hit is new to the
  // request that found it, not to the one that wrote it)
  const added = S.trace.scheduler.new_block_ids || {};
  const freshIn = S.trace.batch.req_ids.map((rid) => new Set(perGroup(added[rid])[0] || []));
  const isNew = (r, v) => Boolean(freshIn[r] && freshIn[r].has(v));
  const empty = name === "block_table" ? 0 : -1;
  S.shapes.block_table = [];
  data.forEach((row, r) => row.forEach((v, c) => { if (v !== empty && isNew(r, v)) S.shapes.block_table.push(cellShape(c, r, "#D55E00", "dot", 2)); }));
  if (showView("block_table")) {
    putTable($("tbl-block_table"), () => gridTable("table-block_table", data, {
      label: L(name), cellClass: (r, c) => (data[r][c] === empty ? (empty < 0 ? "zero pad" : "zero") : isNew(r, data[r][c]) ? "new" : ""),
    }));
  } else {
    const z = data.map((row, r) => row.map((v) => (v === empty ? null : rowReq(r))));
    const text = data.map((row) => row.map((v) => (v === empty ? "" : String(v))));
    heatmap($("hm-block_table"), z, { title: name, xTitle: L("ax_logical"), yTitle: L("ax_row"), shapes: shapesFor("block_table"),
      text, texttemplate: cellNumbers(z.length, z.length ? z[0].length : 0), ...identityScale(), showscale: false,
      hover: "row %{y}, logical block %{x}: physical block %{text}" });
    onCellClick("block_table", (r, c) => (data[r] && data[r][c] !== empty ? { kind: "block", index: Number(data[r][c]) } : null));
  }
}

function spanShape(from, to, r, color) {
  return { type: "rect", x0: from - 0.5, x1: to - 0.5, y0: r - 0.5, y1: r + 0.5, line: { color, width: 2, dash: "dot" }, fillcolor: "rgba(0,0,0,0)" };
}

export function drawMask() {
  const m = S.trace.arrays.attn_mask.data;
  if (showView("attn_mask")) {
    clear($("tbl-attn_mask")).append(gridTable("table-attn_mask", m, { label: L("attn_mask"), cellClass: (r, c) => (m[r][c] ? "masked" : "") }));
  } else {
    heatmap($("hm-attn_mask"), m, { shapes: shapesFor("attn_mask"), title: `attn_mask ${m.length} × ${m[0] ? m[0].length : 0}`, xTitle: L("ax_key"), yTitle: L("ax_row"),
      colorscale: discreteScale(["#ffffff", "#0072B2"]), zmin: -0.5, zmax: 1.5, hover: "row %{y}, key %{x}: %{z}",
      colorbar: { tickmode: "array", tickvals: [0, 1], ticktext: [L("mask_visible"), L("mask_masked")] } });
  }
}
