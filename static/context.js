// The run page's shared context: the URL state, the run on show (its overview and the current
// step's trace) and the small derivations of a trace that every view reads. Views import from
// here; none of them import run.js, which is the glue that fills this object.

import { t } from "./i18n.js";
import { readState } from "./urlstate.js";
import { GREY, GREY_TINT, NUM_IDENTITY_COLORS, PALETTE, TINTS } from "./views.js";

export const state = readState();

// created: POST /api/runs's answer; overview: GET /api/runs/{id}; steps: step number -> trace;
// stages: the flavour's stage list; trace / prev: this step's trace and the previous one;
// sel / hover: the selection and the hovered item ({kind: token|request|block, index});
// shapes: each heatmap's change marks; view: heatmap or table per system-level card.
export const S = {
  created: null, overview: null, steps: new Map(), stages: [], trace: null, prev: null,
  sel: null, hover: null, timer: null, speed: 1, kvMetric: "owner", shapes: {},
  view: { token_ids_cpu: "heatmap", block_table: "table", kv: "heatmap", attn_mask: "heatmap", input_block_tables: "table", all_token_ids: "heatmap" },
};

export const $ = (id) => document.getElementById(id);
export const L = (key) => t(state.lang, key);

export const stageNames = () => (S.trace ? S.trace.stages.map((s) => s.name) : S.stages.map((s) => s.name));
export const stageIndex = (name) => stageNames().indexOf(name);

// an array of this step's trace (its data), or null where this flavour has none
export const A = (name) => (S.trace && S.trace.arrays[name] ? S.trace.arrays[name].data : null);
export const tokenCount = () => (S.trace ? (S.trace.scalars.total_num_scheduled_tokens || 0) : 0);
export const blockSize = () => S.overview.scenario.config.block_size;
export const btName = () => (S.trace.arrays.block_table ? "block_table" : "block_tables");
// the KV pool's size as vLLM counts it (num_kv_blocks less the null block; nano-vllm: all): the
// trace's kv_cache.num_usable_blocks, the one number every view shows (a run stored before the
// field: the same rule, core/kv_cache.py usable_blocks)
export function poolBlocks(kv) {
  if (kv && kv.num_usable_blocks != null) return kv.num_usable_blocks;
  const n = (S.overview.scenario.config || {}).num_kv_blocks || 0;
  return S.overview.flavor === "nanovllm" ? n : Math.max(0, n - 1);
}

// vLLM's model runner for the run on show ("v1" | "v2"; "" for the other flavours): Model Runner V2
// keeps requests in state slots and re-sorts the batch every step, V1 keeps a persistent batch
export function runnerOf() {
  if (!S.overview || S.overview.flavor !== "vllm") return "";
  const cfg = S.overview.scenario && S.overview.scenario.config;
  return (cfg && cfg.model_runner) || "v1";
}
export const isV2 = () => runnerOf() === "v2";
// the key a stage's texts and link are looked up under: "v2" for Model Runner V2, else the flavour
export const stageFlavor = () => (isV2() ? "v2" : S.overview.flavor);
// the block table the attention kernel reads, one row per batch row (V2: the per-step gather)
export const kernelBtName = () => (S.trace.arrays.input_block_tables ? "input_block_tables" : btName());
// a batch row's state slot (V2's idx_mapping), or the row itself where rows are the state (V1)
export function slotOfRow(r) {
  const m = A("idx_mapping");
  return m && r < m.length ? m[r] : r;
}

// per batch row, the blocks its request holds: V1's block-table rows as they are; V2's state slot's
// row of block_tables up to num_blocks (past them a reused slot keeps stale ids)
export function rowBlocks() {
  const arr = S.trace.arrays[btName()];
  if (!arr) return [];
  if (!isV2()) return arr.data;
  const nb = A("num_blocks") || [];
  return S.trace.batch.req_ids.map((_, r) => { const j = slotOfRow(r); return (arr.data[j] || []).slice(0, nb[j] || 0); });
}

// the batch row of each scheduled token
// (worked out once per trace where the trace has no req_indices)
const tokenRows = new WeakMap();
export function reqOfTokens() {
  const T = tokenCount();
  if (A("req_indices")) return A("req_indices");
  if (tokenRows.has(S.trace)) return tokenRows.get(S.trace);
  // nano-vllm's cu_seqlens_q; Model Runner V2 traces no req_indices, only query_start_loc
  const cu = A("cu_seqlens_q") || A("query_start_loc");
  const out = [];
  if (cu) for (let r = 0; r + 1 < cu.length; r++) for (let i = cu[r]; i < cu[r + 1]; i++) out.push(r);
  else for (let i = 0; i < T; i++) out.push(i);
  if (S.trace) tokenRows.set(S.trace, out);
  return out;
}

export function writerStage(arrayName) {
  const a = S.trace.arrays[arrayName];
  return a ? a.stage : "";
}

// ------------------------------------------------------------------ identity
// A request keeps one colour for the whole run: its place in the scenario's request list, never its
// batch row (rows change on preemption and condense). A run with more requests than colours shows
// them all grey; the selection's outline then tells one request from the others.
// (kept per scenario: every cell of a big batch asks, so each ask must not walk the request list)
const identity = new WeakMap();
// the scenario's requests as the scheduler sees them: one with n > 1 as its n children, vLLM's
// {index}_{request_id}, in index order (core/parallel_sampling.py)
export function scheduledRequests(sc) {
  return sc.requests.flatMap((r) => (r.n > 1 ? Array.from({ length: r.n }, (_, k) => ({ ...r, id: `${k}_${r.id}`, parent: String(r.id) })) : [r]));
}
function identityOf() {
  const sc = S.overview ? S.overview.scenario : null;
  if (!sc) return { ids: [], order: new Map() };
  let got = identity.get(sc);
  if (!got) {
    const ids = scheduledRequests(sc).map((r) => String(r.id));
    got = { ids, order: new Map(ids.map((id, i) => [id, i])) };
    identity.set(sc, got);
  }
  return got;
}
export const scenarioReqIds = () => identityOf().ids;
export const reqOrder = (rid) => { const i = identityOf().order.get(String(rid)); return i === undefined ? -1 : i; };
export const bigBatch = () => scenarioReqIds().length > NUM_IDENTITY_COLORS;
export function reqColor(rid) {
  const i = reqOrder(rid);
  return bigBatch() || i < 0 ? GREY : PALETTE[i];
}
export function reqTint(rid) {
  const i = reqOrder(rid);
  return bigBatch() || i < 0 ? GREY_TINT : TINTS[i];
}

// Rows that changed hands since the previous step: every request in both batches whose row differs
// (condense moves and re-admissions alike), as {req_id, from, to}; the trace's own moves first.
export function rowMoves() {
  if (isV2()) return [];  // Model Runner V2 sorts its batch afresh every step: nothing moves, slots stay
  const out = new Map();
  for (const m of S.trace.batch.moves || []) out.set(String(m.req_id), { req_id: String(m.req_id), from: m.from, to: m.to });
  if (S.prev) {
    const before = new Map(S.prev.batch.req_ids.map((rid, r) => [String(rid), r]));
    S.trace.batch.req_ids.forEach((rid, r) => {
      const was = before.get(String(rid));
      if (was !== undefined && was !== r && !out.has(String(rid))) out.set(String(rid), { req_id: String(rid), from: was, to: r });
    });
  }
  return [...out.values()];
}
