// The memory line of a compare between KV cache layouts ("full attention vs sliding window, same
// requests"): the KV each run holds at this step and at its peak, in blocks of one layer, so that a
// run whose blocks each serve every layer (one group) and a hybrid run whose blocks each serve one
// group's layers compare fairly. Every number comes from the server's compare of the two traces
// (core/compare.py `memory`, core/metrics.py `layer_blocks_used`); the line shows only when a side
// has several KV cache groups.

import { L } from "./context.js";
import { clear, el } from "./views.js";

const fmt = (key, vals) => Object.entries(vals).reduce((s, [k, v]) => s.replaceAll(`{${k}}`, String(v)), L(key));

// the layers one block of a side holds K and V for: its groups' layer count when they agree
function layersPerBlock(trace) {
  const kv = trace && trace.kv_cache;
  if (!kv) return null;
  const groups = kv.kv_cache_groups;
  if (!groups || !groups.length) return kv.num_layers || 1;
  const counts = new Set(groups.map((g) => (g.layers || []).length));
  return counts.size === 1 ? [...counts][0] : null;
}

const sliding = (trace) => Boolean(trace && trace.kv_cache && (trace.kv_cache.kv_cache_groups || []).some((g) => g.kind === "sliding_attention"));

// A side: "12 (12 blocks × 1 layer)"
function side(layerBlocks, blocks, per) {
  return per ? fmt("mem_side", { n: layerBlocks, blocks, layers: per, unit: per === 1 ? L("mem_layer") : L("mem_layers_unit") }) : String(layerBlocks);
}

export function memoryLine(box, entry, cmp, ta, tb) {
  clear(box);
  const mem = entry && entry.memory;
  const hybrid = [sliding(ta), sliding(tb)];
  box.hidden = !mem || !tb || !(hybrid[0] || hybrid[1]);
  if (box.hidden) return;
  const [la, lb] = mem.layer_blocks_used;
  const [ba, bb] = mem.blocks_used;
  const pa = cmp.totals[0].peak_layer_blocks_used, pb = cmp.totals[1].peak_layer_blocks_used;
  const bs = (ta.kv_cache || {}).block_size;
  box.append(el("strong", { text: L("mem_h") }), " ",
    el("span", { id: "cmp-memory-step", text: fmt("mem_step", { n: entry.step, bs, a: side(la, ba, layersPerBlock(ta)), b: side(lb, bb, layersPerBlock(tb)) }) }), " ");
  // the side with the window against the other: what it saves at its peak
  const win = hybrid[0] && !hybrid[1] ? "A" : hybrid[1] && !hybrid[0] ? "B" : null;
  const [pw, po] = win === "B" ? [pb, pa] : [pa, pb];
  const peak = fmt("mem_peak", { a: pa, b: pb });
  const saves = win && po > 0 ? " " + fmt(pw <= po ? "mem_saves" : "mem_costs", { side: win, d: Math.abs(po - pw), pct: Math.round((100 * Math.abs(po - pw)) / po) }) : "";
  box.append(el("span", { id: "cmp-memory-peak", text: peak + saves }));
}
