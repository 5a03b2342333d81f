// Linked hover and selection, the heart of the page: hovering or choosing a token, a request or a KV
// block lights up everything it touches in every view -- its token-table column, its request row,
// its block-table cells, its KV slots and blocks, its attention-mask row (table cells and heatmap
// outlines alike) -- and the selection line and the substituted formula follow it. A token also
// shows what the attention kernel reads for it: the blocks of block_table[req] in logical order,
// up to its own position. The selection is kept as (request id, position) or a block id in the URL,
// so it survives a step change and a link reopens it.

import { blockRefs, findWriter, slotReaders } from "./kvrefs.js";
import { concealing } from "./predict.js";
import { renderSubstituted } from "./stages.js";
import { writeState } from "./urlstate.js";
import { $, A, L, S, blockSize, btName, isV2, reqOfTokens, rowBlocks, slotOfRow, state, tokenCount } from "./context.js";
import { cellShape, rowShape, setOverlay } from "./views.js";

export function setHover(sel) { S.hover = sel; applySelection(); }

export function select(sel) {
  S.sel = sel;
  state.tok = -1;
  state.req = ""; state.pos = -1; state.block = -1; state.slot = -1;
  if (sel && sel.kind === "block") state.block = sel.index;
  else if (sel && sel.kind === "slot") state.slot = sel.index;
  else if (sel && S.trace && !S.trace.idle) {
    const r = sel.kind === "token" ? reqOfTokens()[sel.index] : sel.index;
    state.req = String(S.trace.batch.req_ids[r]);
    if (sel.kind === "token") state.pos = A("positions")[sel.index];
  }
  writeState(state);
  applySelection();
}

// the selection the URL state names in this step: the request's token at that position, else the
// request itself, else the block; null when none of them is in the step
export function selectionFromState() {
  if (state.slot >= 0) return { kind: "slot", index: state.slot };
  if (!S.trace || S.trace.idle) return state.block >= 0 ? { kind: "block", index: state.block } : null;
  if (state.tok >= 0 && !state.req && state.tok < tokenCount()) {
    const i = state.tok, r = reqOfTokens()[i];
    state.req = String(S.trace.batch.req_ids[r]); state.pos = A("positions")[i]; state.tok = -1;
  }
  if (state.req) {
    const r = S.trace.batch.req_ids.map(String).indexOf(state.req);
    if (r < 0) return null;
    if (state.pos >= 0) {
      const reqOf = reqOfTokens(), pos = A("positions") || [];
      for (let i = 0; i < tokenCount(); i++) if (reqOf[i] === r && pos[i] === state.pos) return { kind: "token", index: i };
    }
    return { kind: "request", index: r };
  }
  if (state.block >= 0) return { kind: "block", index: state.block };
  return null;
}

// The blocks the attention kernel reads for token i, in logical order: block_table[req][0..pos // bs],
// all of each block but the last, which is read up to pos % bs (the causal cut).
export function kernelReads(i) {
  const r = reqOfTokens()[i];
  const pos = A("positions")[i];
  const bs = blockSize();
  const row = rowBlocks()[r] || [];
  const out = [];
  for (let c = 0; c <= Math.floor(pos / bs) && c < row.length; c++) {
    if (row[c] < 0) break;
    out.push({ logical: c, block: row[c], upto: c === Math.floor(pos / bs) ? pos % bs : bs - 1 });
  }
  return out;
}
function targets(sel) {
  const all = touched(sel);
  return concealing() ? guarded(sel, all) : all;
}

// While a checkpoint hides its array, a hover or a selection outlines only what was pointed at: a
// token's column and its request's row, a request's row and its tokens, a block or a slot itself.
// Nothing read off the step's arrays is outlined (a token's cell in token_ids_cpu is its position,
// its block-table cell its block, the KV slots its kernel reads its position, a block's tokens
// their slots, a row's state slot its idx_mapping): the outline would say the asked values.
function guarded(sel, all) {
  const out = touched(null);
  if (!sel) return out;
  if (sel.kind === "token" || sel.kind === "request") { all.tokens.forEach((i) => out.tokens.add(i)); all.rows.forEach((r) => out.rows.add(r)); }
  else if (sel.kind === "block") out.kvBlocks.add(sel.index);
  else if (sel.kind === "slot") out.kvSlots.push(sel.index);
  out.guarded = true;
  return out;
}

function touched(sel) {
  // what a selection touches: token indices, request rows, (row, col) cells and KV slots/blocks
  const out = { tokens: new Set(), rows: new Set(), tokCells: [], btCells: [], kvSlots: [], kvBlocks: new Set(), maskRows: new Set(), reads: [], refs: [], readers: [] };
  if (!sel || !S.trace || S.trace.idle) return out;
  const reqOf = reqOfTokens();
  const pos = A("positions") || [];
  const slots = A("slot_mapping") || [];
  const bs = blockSize();
  const bt = rowBlocks();
  const T = tokenCount();
  const mask = A("attn_mask");
  const addToken = (i) => {
    const r = reqOf[i];
    out.tokens.add(i); out.rows.add(r);
    out.tokCells.push([r, pos[i]]);
    out.btCells.push([r, Math.floor(pos[i] / bs)]);
    out.kvSlots.push(slots[i]);
    if (mask) out.maskRows.add(mask.length === T ? i : pos[i]);
  };
  if (sel.kind === "token") { addToken(sel.index); out.reads = kernelReads(sel.index); }
  else if (sel.kind === "request") {
    for (let i = 0; i < T; i++) if (reqOf[i] === sel.index) addToken(i);
    out.rows.add(sel.index);
    (bt[sel.index] || []).forEach((b, c) => { if (b > 0 || (b === 0 && S.overview.flavor === "nanovllm")) { out.kvBlocks.add(b); out.btCells.push([sel.index, c]); } });
  } else if (sel.kind === "block") {
    for (let i = 0; i < T; i++) if (Math.floor(slots[i] / bs) === sel.index) addToken(i);
    out.kvBlocks.add(sel.index);
    out.refs = blockRefs(sel.index);
    out.refs.forEach((ref) => { if (!ref.group) out.btCells.push([ref.row, ref.logical]); out.rows.add(ref.row); });
  } else if (sel.kind === "slot") {
    // the slot, the block-table cells that reference its block, and this step's queries that read it
    out.kvSlots.push(sel.index);
    out.refs = blockRefs(Math.floor(sel.index / bs));
    out.refs.forEach((ref) => { if (!ref.group) out.btCells.push([ref.row, ref.logical]); out.rows.add(ref.row); });
    out.readers = slotReaders(sel.index);
    out.readers.forEach((i) => { out.tokens.add(i); out.rows.add(reqOf[i]); });
  }
  return out;
}

export function applySelection({ plots = true } = {}) {
  if (!S.trace) return;
  const sel = S.hover || S.sel;
  const tg = targets(sel);
  document.querySelectorAll(".hl").forEach((n) => n.classList.remove("hl"));
  const tokTable = $("token-table");
  if (tokTable) {
    tokTable.querySelectorAll(".slot-reader").forEach((c) => c.classList.remove("slot-reader"));
    tg.tokens.forEach((i) => tokTable.querySelectorAll(`[data-t="${i}"]`).forEach((c) => c.classList.add("hl")));
    tg.readers.forEach((i) => tokTable.querySelectorAll(`[data-t="${i}"]`).forEach((c) => c.classList.add("slot-reader")));
  }
  const reqTable = $("request-table");
  if (reqTable) tg.rows.forEach((r) => { const row = reqTable.querySelector(`tr[data-r="${r}"]`); if (row) row.classList.add("hl"); });
  const mark = (tableId, cells) => {
    const tb = $(tableId);
    if (tb) cells.forEach(([r, c]) => { const cell = tb.querySelector(`td[data-r="${r}"][data-c="${c}"]`); if (cell) cell.classList.add("hl"); });
  };
  mark("table-token_ids_cpu", tg.tokCells);
  mark("table-block_table", slotCells(tg.btCells));
  mark("table-input_block_tables", tg.btCells);
  // the other KV cache groups' tables (grouptables.js): a token's or a request's logical blocks
  // (the same cells in every group), and a selected block where it is
  document.querySelectorAll(".bt-group table[id*='_g']").forEach((tb) => {
    if (sel && (sel.kind === "token" || sel.kind === "request")) mark(tb.id, tg.btCells);
    if (tg.kvBlocks.size) tb.querySelectorAll("td").forEach((td) => { const v = Number(td.textContent); if (v > 0 && tg.kvBlocks.has(v)) td.classList.add("hl"); });
  });
  // Model Runner V2's slot panel: a batch row, its idx_mapping arrow and its state slot
  if ($("slotmap") && !tg.guarded) {
    tg.rows.forEach((r) => document.querySelectorAll(`#slotmap [data-r="${r}"], #slotmap [data-slot="${slotOfRow(r)}"], #slot-state [data-slot="${slotOfRow(r)}"]`)
      .forEach((n) => n.classList.add("hl")));
  }
  const kvTable = $("table-kv");
  if (kvTable) {
    kvTable.querySelectorAll("td.read").forEach((c) => { c.classList.remove("read"); delete c.dataset.order; });
    tg.reads.forEach((rd, k) => { for (let c = 0; c <= rd.upto; c++) { const cell = kvTable.querySelector(`td[data-r="${rd.block}"][data-c="${c}"]`); if (cell) { cell.classList.add("read"); cell.dataset.order = k + 1; } } });
    tg.kvSlots.forEach((s) => { const cell = kvTable.querySelector(`td[data-slot="${s}"]`); if (cell) cell.classList.add("hl"); });
    tg.kvBlocks.forEach((b) => { const row = kvTable.querySelector(`tr[data-r="${b}"]`); if (row) row.classList.add("hl"); });
  }
  const maskTable = $("table-attn_mask");
  if (maskTable) tg.maskRows.forEach((r) => { const row = maskTable.querySelector(`tr[data-r="${r}"]`); if (row) row.classList.add("hl"); });
  if (plots) relayoutShapes(tg);
  renderSelection(sel, tg.guarded ? touched(sel) : tg);  // (hidden while a checkpoint is open: WORKED in predict.js)
  renderSubstituted();
}

// block-table cells at batch-row coordinates, moved to the rows of the table shown: V2's block_tables
// has a row per state slot (idx_mapping[row])
function slotCells(cells) { return isV2() ? cells.map(([r, c]) => [slotOfRow(r), c]) : cells; }

// the outlines a selection puts on each heatmap
// a read block is lit: washed light, edged, and numbered in the order the kernel walks it
export const READ_FILL = "rgba(255,255,255,0.55)";
function selectionShapes(tg) {
  const bs = blockSize();
  const HL = "#000000";
  // the kernel's reads first (filled, under the outlines), then the slot this token writes
  const kv = tg.reads.map((rd) => ({ type: "rect", x0: -0.5, x1: rd.upto + 0.5, y0: rd.block - 0.5, y1: rd.block + 0.5,
    line: { width: 1, color: "#111111" }, fillcolor: READ_FILL, layer: "above" }));
  tg.kvSlots.forEach((s) => kv.push(cellShape(s % bs, Math.floor(s / bs), HL)));
  tg.kvBlocks.forEach((b) => kv.push(rowShape(b, Math.min(bs, 512), HL)));
  const m = A("attn_mask");
  return {
    token_ids_cpu: tg.tokCells.map(([r, c]) => cellShape(c, r, HL)),
    block_table: slotCells(tg.btCells).map(([r, c]) => cellShape(c, r, HL)),
    input_block_tables: tg.btCells.map(([r, c]) => cellShape(c, r, HL)),
    kv,
    attn_mask: m ? [...tg.maskRows].map((r) => rowShape(r, m[0].length, HL)) : [],
  };
}

// change marks plus selection outlines, for drawing a heatmap in one go
export function shapesFor(id) {
  return [...(S.shapes[id] || []), ...selectionShapes(targets(S.hover || S.sel))[id]];
}

// the read order of the kernel's blocks, numbered at each block's left edge in the KV grid
export function annotationsFor(id) {
  if (id !== "kv") return [];
  // on a tall pool the numbers would overlap: then only the first and the last block are numbered
  const reads = targets(S.hover || S.sel).reads;
  const crowded = S.trace.kv_cache && S.trace.kv_cache.num_blocks > 24;
  // the grid's own labels first (kvgrid.js: the null block of a run with several KV cache groups)
  return [...((S.labels && S.labels.kv) || []), ...reads.map((rd, k) => [rd, k]).filter(([, k]) => !crowded || k === 0 || k === reads.length - 1).map(([rd, k]) => ({ x: rd.upto / 2, y: rd.block, text: String(k + 1),
    showarrow: false, bgcolor: "#ffffff", bordercolor: "#111111", font: { size: 11, color: "#111111" } }))];
}

function relayoutShapes(tg) {
  const extra = selectionShapes(tg);
  for (const id of Object.keys(extra)) {
    const div = $(`hm-${id}`);
    // only the overlay canvas redraws: the cells stay as they are
    if (div && !div.hidden && div.data) setOverlay(div, [...(S.shapes[id] || []), ...extra[id]], annotationsFor(id));
  }
}

// "1 token", "5 tokens" (中文: "5 个 token")
const countOf = (n) => `${n} ${L(n === 1 && state.lang !== "zh" ? "token" : "tokens_n")}`;

function renderSelection(sel, tg) {
  const box = $("selection");
  if (!sel) { box.textContent = L("none_selected"); return; }
  const bs = blockSize();
  if (sel.kind === "token") {
    const i = sel.index;
    const r = reqOfTokens()[i];
    const pos = A("positions")[i];
    const slot = A("slot_mapping")[i];
    const blk = Math.floor(slot / bs);
    box.textContent = `${L("sel_token")} ${i} · ${L("req")} ${S.trace.batch.req_ids[r]} (${L("row")} ${r}) · ${L("sel_position")} ${pos} · ` +
      `${btName()}[${slotOfRow(r)}][${Math.floor(pos / bs)}] = ${blk} · ${L("sel_slot")} ${slot} = ${blk} × ${bs} + ${slot % bs}` +
      (tg.reads.length ? ` · ${L("reads")} ${tg.reads.map((rd) => rd.block).join(" → ")} (${L("causal_cut")} ${pos})` : "");
  } else if (sel.kind === "request") {
    box.textContent = `${L("req")} ${S.trace.batch.req_ids[sel.index]} (${L("row")} ${sel.index}) · ${countOf(tg.tokens.size)} · ${L("sel_block")} [${[...tg.kvBlocks].join(", ")}]`;
  } else if (sel.kind === "slot") {
    renderSlot(box, sel.index, tg);
  } else {
    box.textContent = `${L("sel_block")} ${sel.index} · ${L("sel_slot")} ${sel.index * bs}..${sel.index * bs + bs - 1} · ${countOf(tg.tokens.size)} · ${refsText(tg.refs)}`;
  }
}

// "referenced by row 0 (request a), logical block 1; …": every (row, logical index) that holds the block
function refsText(refs) {
  if (!refs.length) return L("ref_by_none");
  return `${L("ref_by")} ${refs.map((ref) => L("ref_row").replace("{r}", ref.row).replace("{rid}", ref.rid).replace("{c}", ref.logical) + (ref.group ? ` (g${ref.group})` : "")).join(", ")}`;
}

// sorted integers as runs: "36–42, 45"
function runsOf(xs) {
  const v = [...xs].sort((a, b) => a - b), out = [];
  for (let i = 0; i < v.length;) { let j = i; while (j + 1 < v.length && v[j + 1] === v[j] + 1) j++; out.push(j > i ? `${v[i]}–${v[j]}` : String(v[i])); i = j + 1; }
  return out.join(",");
}

// a slot: where it is, who wrote it (found in this step or an earlier one, asynchronously), which
// of this step's queries read it, and what references its block
function renderSlot(box, slot, tg) {
  const bs = blockSize(), b = Math.floor(slot / bs);
  const pos = A("positions") || [];
  const reqOf = reqOfTokens();
  const ids = S.trace.batch.req_ids;
  // the readers in brief: each request with its runs of positions ("a@45, b@36–42")
  const byReq = new Map();
  for (const i of tg.readers) { const rid = String(ids[reqOf[i]]); if (!byReq.has(rid)) byReq.set(rid, []); byReq.get(rid).push(pos[i]); }
  const readers = [...byReq].map(([rid, ps]) => `${rid}@${runsOf(ps)}`);
  const writer = document.createElement("span");
  writer.className = "slot-writer";
  writer.textContent = `${L("written_by")} …`;
  box.replaceChildren(`${L("sel_slot")} ${slot} = ${L("sel_block")} ${b} × ${bs} + ${slot % bs} · `, writer,
    ` · ${tg.readers.length ? `${L("read_by")} ${tg.readers.length} ${L(tg.readers.length === 1 ? "token" : "tokens_n")}: ${readers.slice(0, 8).join(", ")}${readers.length > 8 ? ", …" : ""}` : L("read_by_none")} · ${refsText(tg.refs)}`);
  const step = state.step;
  findWriter(slot).then((w) => {
    if (!writer.isConnected || state.step !== step) return;
    const owners = ((S.trace.kv_cache || {}).owners || {})[String(b)] || [];
    if (!w) writer.textContent = L("written_none");
    else if (w.before) writer.textContent = `${L("written_before")} ${w.before}`;
    else {
      const stale = !owners.map(String).includes(w.rid) ? ` (${L("written_stale")})` : "";
      writer.textContent = `${L("written_by")} ${L("req")} ${w.rid} · ${L("sel_position")} ${w.pos} · ${L("embed_step")} ${w.step}${stale}`;
    }
    writer.dataset.req = w && w.rid ? w.rid : "";
    writer.dataset.step = w && w.step ? String(w.step) : "";
  });
}

// An array lit everywhere it shows: its token-table row, its card, its formula terms.
export function lightArray(name) {
  document.querySelectorAll(".array-hl").forEach((n) => n.classList.remove("array-hl"));
  if (!name) return;
  document.querySelectorAll(`#token-table tr[data-array="${name}"], #request-table th[data-array="${name}"], .term[data-array="${name}"], #card-${name}`)
    .forEach((n) => n.classList.add("array-hl"));
}

// hover and click in the token table and clicks in the system-level tables
// a block table's id: V1's block_table, V2's input_block_tables, and each group's (_g1, ...)
const BLOCK_TABLE = /^table-(block_table|input_block_tables)(_g\d+)?$/;

export function wireHover() {
  // a checkpoint opened or checked: the outlines follow what it hides
  document.addEventListener("pagedviz:conceal", () => applySelection());
  const formula = $("slot-formula");
  formula.addEventListener("mouseover", (e) => { const t = e.target.closest(".term"); lightArray(t ? t.dataset.array : null); });
  formula.addEventListener("mouseleave", () => lightArray(state.array || null));
  // a row header points at its array: the URL keeps it, so a link shows the same array
  $("tok-table").addEventListener("click", (e) => {
    const th = e.target.closest("tbody th");
    if (!th || e.target.closest("a")) return;
    const name = th.closest("tr").dataset.array;
    state.array = state.array === name ? "" : name;
    writeState(state);
    lightArray(state.array || null);
  });
  const tok = $("tok-table");
  tok.addEventListener("mouseover", (e) => { const c = e.target.closest("[data-t]"); if (c && Number(c.dataset.t) < tokenCount()) setHover({ kind: "token", index: Number(c.dataset.t) }); });
  tok.addEventListener("mouseleave", () => setHover(null));
  tok.addEventListener("click", (e) => { const c = e.target.closest("[data-t]"); if (c && Number(c.dataset.t) < tokenCount()) select({ kind: "token", index: Number(c.dataset.t) }); });
  tok.addEventListener("focusin", (e) => { const c = e.target.closest("[data-t]"); if (c) select({ kind: "token", index: Number(c.dataset.t) }); });
  // in the system tables: a KV cell is a slot, a KV row header or a block-table cell a block
  const sysSel = (e) => {
    const cell = e.target.closest("td[data-r], #table-kv tbody th");
    if (!cell) return null;
    const table = cell.closest("table");
    const v = Number(cell.textContent);
    if (BLOCK_TABLE.test(table.id)) return Number.isInteger(v) && (v > 0 || (v === 0 && S.overview.flavor === "nanovllm")) ? { kind: "block", index: v } : null;
    if (table.id === "table-kv") {
      const r = Number(cell.closest("tr").dataset.r);
      return cell.tagName === "TH" ? { kind: "block", index: r } : { kind: "slot", index: Number(cell.dataset.slot) };
    }
    return null;
  };
  $("sys-grid").addEventListener("mouseover", (e) => { const sel = sysSel(e); if (sel) setHover(sel); });
  $("sys-grid").addEventListener("mouseleave", () => { if (S.hover) setHover(null); });
  $("sys-grid").addEventListener("click", (e) => {
    const cell = e.target.closest("td[data-r], #table-kv tbody th");
    if (!cell) return;
    const table = cell.closest("table");
    const sel = sysSel(e);
    if (BLOCK_TABLE.test(table.id) || table.id === "table-kv") { if (sel) select(sel); }
    else if (table.id === "table-token_ids_cpu") select({ kind: "request", index: Number(cell.dataset.r) });
  });
}
