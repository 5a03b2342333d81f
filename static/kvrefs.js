// A KV slot's writer and readers, and a block's references in this step's block table: what the
// linked hover (hover.js) says about a slot or a block. Plain lookups over the step's trace (and
// the earlier steps', fetched as needed), kept apart from the KV grid's drawing (kvgrid.js) so
// that the views and the hover import them without importing each other.

import { getJSON } from "./api.js";
import { blocksOf, isSliding, kvGroups } from "./groups.js";
import { A, S, blockSize, btName, reqOfTokens, rowBlocks, state, tokenCount } from "./context.js";

// ------------------------------------------------------------------ a slot's writer and readers
// A KV slot shows who wrote it and which of this step's queries read it; a block shows every
// (row, logical index) of the block table that references it (several rows with prefix caching).

// every (row, logical index) of this step's block table that holds block b; vLLM's null block 0
// only pads the rows, so it is referenced by none
export function blockRefs(b) {
  if (!S.trace || S.trace.idle) return [];
  const arr = S.trace.arrays[btName()];
  if (!arr || (b === 0 && S.overview.flavor !== "nanovllm")) return [];
  const out = [];
  rowBlocks().forEach((row, r) => row.forEach((x, c) => { if (x === b) out.push({ row: r, logical: c, rid: String(S.trace.batch.req_ids[r]) }); }));
  // with several KV cache groups, the other groups' block lists too (scheduler.block_ids), each
  // reference with its group and, for a sliding group, its window
  const groups = kvGroups();
  for (let g = 1; g < groups.length; g++) {
    S.trace.batch.req_ids.forEach((rid, r) => blocksOf(String(rid), g).forEach((x, c) => {
      if (x === b) out.push({ row: r, logical: c, rid: String(rid), group: g, window: isSliding(groups[g]) ? groups[g].sliding_window : null });
    }));
  }
  return out;
}

// the tokens of this step whose attention reads the slot: the tokens of every request whose
// block-table row holds the slot's block, at a position at or past the slot's own (the causal cut)
export function slotReaders(slot) {
  if (!S.trace || S.trace.idle) return [];
  const bs = blockSize(), o = slot % bs;
  const refs = blockRefs(Math.floor(slot / bs));
  const reqOf = reqOfTokens(), pos = A("positions") || [];
  const out = [];
  for (let i = 0; i < tokenCount(); i++) {
    // (a sliding group's slot is read only by the queries whose window still covers it)
    if (refs.some((ref) => reqOf[i] === ref.row && pos[i] >= ref.logical * bs + o && (!ref.window || pos[i] - ref.window < ref.logical * bs + o))) out.push(i);
  }
  return out;
}

// the token of a step's trace that wrote the slot (its request and position), or null
function writesIn(tr, slot) {
  const sm = tr.arrays && tr.arrays.slot_mapping ? tr.arrays.slot_mapping.data : null;
  const T = tr.scalars ? tr.scalars.total_num_scheduled_tokens || 0 : 0;
  if (!sm) return null;
  const i = sm.slice(0, T).lastIndexOf(slot);
  if (i < 0) return null;
  let r = tr.arrays.req_indices ? tr.arrays.req_indices.data[i] : -1;
  const cu = tr.arrays.cu_seqlens_q || tr.arrays.query_start_loc;
  if (r < 0 && cu) r = cu.data.findIndex((c, k) => k + 1 < cu.data.length && c <= i && i < cu.data[k + 1]);
  const pos = tr.arrays.positions ? tr.arrays.positions.data[i] : null;
  return { rid: r >= 0 ? String(tr.batch.req_ids[r]) : "?", pos, token: i };
}

const WRITER_LOOKBACK = 64;  // steps searched back for a slot's last write
const writers = new Map();   // "run/step/slot" -> Promise of {rid, pos, step} | {before: step} | null

// the last write of the slot up to this step: this step's slot_mapping first, then the earlier
// steps' (fetched as needed, at most WRITER_LOOKBACK of them); {before: n} when not found so far back
export function findWriter(slot) {
  const run = S.created.run_id, now = state.step, steps = S.steps;  // this run's cache (run.js replaces it with the run)
  const key = `${run}/${now}/${slot}`;
  if (!writers.has(key)) {
    writers.set(key, (async () => {
      for (let n = now; n >= 1 && n > now - WRITER_LOOKBACK; n--) {
        let tr = steps.get(n);
        if (!tr) {
          const r = await getJSON(`/api/runs/${encodeURIComponent(run)}/steps/${n}`);
          if (!r.ok) return null;
          tr = r.data;
          if (S.steps === steps) steps.set(n, tr);
        }
        const w = writesIn(tr, slot);
        if (w) return { ...w, step: n };
      }
      return now > WRITER_LOOKBACK ? { before: now - WRITER_LOOKBACK + 1 } : null;
    })());
  }
  return writers.get(key);
}
