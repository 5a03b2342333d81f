// The KV cache groups of the run on show, as the page reads them from a step's trace: the groups
// themselves (the kv view's kv_cache_groups: kind, layers, sliding window), each scheduled
// request's blocks per group (scheduler.block_ids, one list per group in vLLM's group order), the
// group of every block in use (kv_cache.block_group), the blocks that changed group since the
// previous step, and the positions a sliding group still holds. One group (every layer full
// attention) is today's page: isHybrid() is false and no view changes.

import { A, L, S, isV2, state } from "./context.js";

export const NULL_BLOCK = 0;

// [{kind, layers, sliding_window}] of a trace; [] where the trace has one group (no kv_cache_groups)
export function kvGroups(tr = S.trace) {
  const kv = tr && tr.kv_cache;
  return kv && Array.isArray(kv.kv_cache_groups) ? kv.kv_cache_groups : [];
}
export const isHybrid = (tr = S.trace) => kvGroups(tr).length > 1;
export const isSliding = (g) => Boolean(g) && (g.kind === "sliding_attention" || g.sliding_window != null);

// a group's name for a person: "group 1 · sliding window (8 tokens) · layers 1, 3"
export function groupLabel(i, g = kvGroups()[i]) {
  const kind = isSliding(g) ? L("grp_sliding").replace("{w}", g.sliding_window) : L("grp_full");
  const layers = (g && g.layers) || [];
  return `${L("grp_group")} ${i} · ${kind} · ${L(layers.length === 1 ? "grp_layer" : "grp_layers")} ${layers.join(", ")}`;
}
// the same, short: "g1 · sliding 8"
export function groupShort(i, g = kvGroups()[i]) {
  return `g${i} · ${isSliding(g) ? L("grp_sliding_short").replace("{w}", g.sliding_window) : L("grp_full_short")}`;
}

// block id -> group index, for the blocks in use (a trace with one group: all in group 0)
// (read once per trace: every block of the pool asks)
const groupOf = new WeakMap();
export function blockGroup(tr = S.trace) {
  if (tr && groupOf.has(tr)) return groupOf.get(tr);
  const out = new Map();
  const bg = tr && tr.kv_cache && tr.kv_cache.block_group;
  if (bg) for (const [b, g] of Object.entries(bg)) out.set(Number(b), Number(g));
  if (tr) groupOf.set(tr, out);
  return out;
}

// one request's entry of scheduler.new_block_ids as one list per group (flat with one group)
export function perGroup(entry) {
  if (!entry) return [];
  return entry.some(Array.isArray) ? entry : [entry];
}
// every block of such an entry, whatever its group
export function flatBlocks(entry) { return perGroup(entry).flat(); }

// a request's blocks in group g after this step (scheduler.block_ids; group 0 of a trace before
// the field: its block-table row is read by the views themselves)
export function blocksOf(rid, g, tr = S.trace) {
  const ids = tr && tr.scheduler && tr.scheduler.block_ids ? tr.scheduler.block_ids[rid] : null;
  return ids && ids[g] ? ids[g] : [];
}

// The rows of group g's block table in batch order: the runner's own array where the trace has it
// (group 0: block_table / input_block_tables; group g: the same name with _g{g}), else each batch
// row's request's blocks from scheduler.block_ids, padded with 0 to the width of group 0's table.
export function groupRows(g, maxRows = 64) {
  const tr = S.trace;
  const base = isV2() ? "input_block_tables" : "block_table";
  const name = g === 0 ? base : `${base}_g${g}`;
  if (tr.arrays[name]) return { name, rows: tr.arrays[name].data.slice(0, maxRows), fromArray: true };
  const ids = tr.batch.req_ids.map(String);
  const width = tr.arrays[base] && tr.arrays[base].data[0] ? tr.arrays[base].data[0].length : Math.max(1, ...ids.map((rid) => blocksOf(rid, g).length));
  const nRows = tr.arrays[base] ? Math.min(tr.arrays[base].data.length, maxRows) : ids.length;
  const rows = [];
  for (let r = 0; r < nRows; r++) {
    const blocks = r < ids.length ? blocksOf(ids[r], g) : [];
    rows.push(Array.from({ length: width }, (_, c) => (c < blocks.length ? blocks[c] : 0)));
  }
  return { name, rows, fromArray: false };
}
// how many logical blocks of each batch row are the request's own in group g (past them: padding)
export function rowLengths(g) {
  return S.trace.batch.req_ids.map((rid) => blocksOf(String(rid), g).length);
}

// The blocks that changed group between the previous step and this one, as block -> {from, to}:
// a block a sliding group gave back (the window dropped it) that a full-attention group took.
export function movedBlocks() {
  const out = new Map();
  if (!S.prev || !isHybrid() || !isHybrid(S.prev)) return out;
  const before = blockGroup(S.prev), now = blockGroup();
  for (const [b, g] of now) {
    const was = before.get(b);
    if (b !== NULL_BLOCK && was !== undefined && was !== g) out.set(b, { from: was, to: g });
  }
  return out;
}

// this step's window drops (the hybrid manager's scheduler.window_drops): [{rid, group, block_ids, ...}]
export function windowDrops(tr = S.trace) {
  const drops = (tr && tr.scheduler && tr.scheduler.window_drops) || {};
  const out = [];
  for (const [rid, list] of Object.entries(drops)) for (const d of list || []) out.push({ rid: String(rid), ...d });
  return out;
}

// the batch rows a one-line-per-request view shows: the first few, and the focused request's
const FEW = 8;
export function fewRows(ids) {
  const out = ids.slice(0, FEW).map((_, r) => r);
  const focus = state.req ? ids.indexOf(String(state.req)) : -1;
  if (focus >= FEW) out.push(focus);
  return { rows: out, more: ids.length - out.length };
}

// The token row of each batch request as a sliding group holds it after this step: its length
// (computed + scheduled tokens), the positions whose block is the null block (dropped) and the
// window of its last token [lo, hi]. One entry per distinct window among the sliding groups (the
// groups with one window drop the same logical blocks), each with the first group that has it.
export function windowRows() {
  const groups = kvGroups();
  const seen = new Map();
  groups.forEach((g, i) => { if (isSliding(g) && !seen.has(g.sliding_window)) seen.set(g.sliding_window, i); });
  const ids = S.trace.batch.req_ids.map(String);
  const seq = A("seq_lens"), comp = A("num_computed_tokens_cpu"), sched = A("num_scheduled_tokens");
  const bs = S.trace.kv_cache.block_size;
  const few = fewRows(ids);
  return [...seen].map(([w, gi]) => ({
    group: gi, window: w, more: few.more,
    rows: few.rows.map((r) => {
      const rid = ids[r];
      const len = seq && r < seq.length ? seq[r] : (comp ? comp[r] : 0) + (sched ? sched[r] : 0);
      const blocks = blocksOf(rid, gi);
      const held = (p) => { const b = blocks[Math.floor(p / bs)]; return b !== undefined && b !== NULL_BLOCK; };
      return { rid, len, held, lo: Math.max(0, len - w), hi: len - 1 };
    }),
  }));
}
