// Model Runner V2's system-level tables, drawn as the V1 ones are (heatmaps.js: a canvas heatmap or
// a grid table, cells in their request's tint, this step's new blocks outlined):
// - block_tables [max_num_reqs, max_blocks], the persistent table with one row per state slot
//   (rows named "slot · request"); cells past a slot's num_blocks are stale, kept from an earlier
//   holder, and shown struck;
// - input_block_tables [num_reqs_padded, max_blocks], gathered every step through idx_mapping in
//   batch order: the table the attention kernel reads (rows named "row · request → slot");
// - all_token_ids [max_num_reqs, max_model_len], each slot's prompt and outputs so far, up to its
//   total_len.

import { perGroup } from "./groups.js";
import { onCellClick, putTable, showView } from "./heatmaps.js";
import { gatheredReads, slotHolders, slotReads } from "./kernelreads.js";
import { shapesFor } from "./hover.js";
import { A, L, S, bigBatch, reqOrder, reqTint, scenarioReqIds } from "./context.js";
import { GREY_TINT, cellShape, discreteScale, gridTable, heatmap } from "./views.js";

const MAX_ROWS = 64;

function identityScale() {
  const ids = scenarioReqIds();
  if (bigBatch() || !ids.length) return { colorscale: [[0, GREY_TINT], [1, GREY_TINT]], zmin: 0, zmax: 1 };
  return { colorscale: discreteScale(ids.map(reqTint)), zmin: -0.5, zmax: ids.length - 0.5 };
}
const cellNumbers = (rows, cols) => (rows * cols <= 800 && cols <= 32 ? "%{text}" : undefined);

// slot -> the request holding it after this step's frees and adds
const occupants = () => slotHolders(S.trace);

// one table drawn as a heatmap or a grid: `owner(r)` is the request of row r (or undefined),
// `live(r, c)` whether the cell is the request's own, `fresh(r, v)` whether block v is new to row r
function drawTable(id, name, data, { owner, live, fresh, label, yTitle, hover }) {
  S.shapes[id] = [];
  data.forEach((row, r) => row.forEach((v, c) => { if (live(r, c) && fresh(r, v)) S.shapes[id].push(cellShape(c, r, "#D55E00", "dot", 2)); }));
  if (showView(id)) {
    putTable(document.getElementById(`tbl-${id}`), () => gridTable(`table-${id}`, data, {
      label: L(name), rowHeader: label,
      // past a row's own blocks: 0, or a stale id an earlier holder left (struck)
      cellClass: (r, c) => (!live(r, c) ? (data[r][c] ? "zero sm-stale" : "zero") : fresh(r, data[r][c]) ? "new" : ""),
    }));
  } else {
    const z = data.map((row, r) => row.map((_, c) => (live(r, c) && owner(r) !== undefined ? reqOrder(owner(r)) : null)));
    const text = data.map((row, r) => row.map((v, c) => (live(r, c) ? String(v) : "")));
    heatmap(document.getElementById(`hm-${id}`), z, { title: name, xTitle: L("ax_logical"), yTitle, shapes: shapesFor(id),
      text, texttemplate: cellNumbers(z.length, z.length ? z[0].length : 0), ...identityScale(), showscale: false,
      yTickvals: data.map((_, r) => r), yTicktext: data.map((_, r) => label(r)), hover });
    onCellClick(id, (r, c) => (data[r] && live(r, c) ? { kind: "block", index: Number(data[r][c]) } : null));
  }
}

// the blocks a request got this step (scheduler.new_block_ids)
function freshFor(rid) {
  const added = (S.trace.scheduler.new_block_ids || {})[rid];
  return new Set(perGroup(added)[0] || []);
}

export function drawSlotBlockTables() {
  const data = S.trace.arrays.block_tables.data.slice(0, MAX_ROWS);
  const held = occupants();
  const fresh = data.map((_, j) => (held.has(j) ? freshFor(held.get(j)) : new Set()));
  drawTable("block_table", "block_tables", data, {
    owner: (j) => held.get(j),
    live: slotReads(S.trace, "block_tables") || (() => false),
    fresh: (j, v) => fresh[j].has(v),
    label: (j) => (held.has(j) ? `${L("v2_slot")} ${j} · ${held.get(j)}` : `${L("v2_slot")} ${j}`),
    yTitle: L("v2_slot"),
    hover: `${L("v2_slot")} %{y}, ${L("ax_logical")} %{x}: ${L("ax_physical")} %{text}`,
  });
}

export function drawInputBlockTables() {
  const data = S.trace.arrays.input_block_tables.data.slice(0, MAX_ROWS);
  const ids = S.trace.batch.req_ids.map(String), idx = A("idx_mapping") || [];
  const fresh = data.map((_, r) => (r < ids.length ? freshFor(ids[r]) : new Set()));
  drawTable("input_block_tables", "input_block_tables", data, {
    owner: (r) => ids[r],
    live: gatheredReads(S.trace) || (() => false),
    fresh: (r, v) => fresh[r].has(v),
    label: (r) => (r < ids.length ? `${L("row")} ${r} · ${ids[r]} → ${idx[r]}` : `${L("row")} ${r} (${L("v2_padding")})`),
    yTitle: L("ax_row"),
    hover: `${L("ax_row")} %{y}, ${L("ax_logical")} %{x}: ${L("ax_physical")} %{text}`,
  });
}

export function drawAllTokenIds() {
  const held = occupants();
  const data = S.trace.arrays.all_token_ids.data.slice(0, MAX_ROWS);
  const id = "all_token_ids";
  const label = (j) => (held.has(j) ? `${L("v2_slot")} ${j} · ${held.get(j)}` : `${L("v2_slot")} ${j}`);
  const live = slotReads(S.trace, "all_token_ids") || (() => false);
  if (showView(id)) {
    putTable(document.getElementById(`tbl-${id}`), () => gridTable(`table-${id}`, data, {
      label: L("v2_all_token_ids"), rowHeader: label, cellText: (j, c) => (live(j, c) ? data[j][c] : "·"),
      cellClass: (j, c) => (live(j, c) ? "" : "empty"),
    }));
  } else {
    const z = data.map((row, j) => row.map((_, c) => (live(j, c) ? reqOrder(held.get(j)) : null)));
    const text = data.map((row, j) => row.map((v, c) => (live(j, c) ? String(v) : "")));
    heatmap(document.getElementById(`hm-${id}`), z, { title: id, xTitle: L("ax_position"), yTitle: L("v2_slot"), shapes: [],
      text, texttemplate: cellNumbers(z.length, z.length ? z[0].length : 0), ...identityScale(), showscale: false,
      yTickvals: data.map((_, j) => j), yTicktext: data.map((_, j) => label(j)), hover: `${L("v2_slot")} %{y}, ${L("ax_position")} %{x}: %{text}` });
  }
}
