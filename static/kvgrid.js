// The KV cache grid: one row per physical block, one column per slot in the block, coloured by
// the owner request (or by ref count, written slots, free-queue order); this step's new blocks are
// outlined. As a heatmap or as a table that names each block's owners.

import { onCellClick, showView } from "./heatmaps.js";
import { shapesFor } from "./hover.js";
import { $, L, S } from "./trace.js";
import { clear, colorOf, el, gridTable, heatmap, plotlyText } from "./views.js";

const MAX_KV_BLOCKS = 256;

// Owner colours: one category per request of this step's batch (its row), then, when present, one
// for blocks shared by several requests (prefix-cache hits) and one, grey, for blocks held by a
// request that is not in the batch this step (waiting to be scheduled again, or a nano-vllm decode).
const OWNER_SHARED = "#444444", OWNER_OTHER = "#bbbbbb";

function kvGrid() {
  const kv = S.trace.kv_cache;
  const nb = Math.min(kv.num_blocks, MAX_KV_BLOCKS);
  const bs = Math.min(kv.block_size, 512);
  const reqRow = {};
  S.trace.batch.req_ids.forEach((rid, r) => { reqRow[rid] = r; });
  const freePos = {};
  kv.free_block_queue.forEach((b, i) => { freePos[b] = i; });
  const ownersOf = [], ownerKind = [];
  for (let b = 0; b < nb; b++) {
    const owners = kv.owners[String(b)] || [];
    ownersOf.push(owners);
    ownerKind.push(!owners.length ? null : owners.length > 1 ? "shared" : reqRow[owners[0]] !== undefined ? reqRow[owners[0]] : "other");
  }
  const cats = S.trace.batch.req_ids.map((rid, r) => ({ value: r, label: plotlyText(rid), color: colorOf(r) }));
  for (const [kind, color] of [["shared", OWNER_SHARED], ["other", OWNER_OTHER]]) {
    if (ownerKind.includes(kind)) cats.push({ value: cats.length, kind, label: L(kind === "shared" ? "shared_block" : "not_in_batch"), color });
  }
  const catOf = (k) => (k === null ? null : typeof k === "number" ? k : cats.find((c) => c.kind === k).value);
  const z = [], text = [];
  for (let b = 0; b < nb; b++) {
    const owners = ownersOf[b];
    const written = kv.written_slots ? kv.written_slots[b] : null;
    const label = `block ${b}` + (owners.length ? `, ${L("req")} ${owners.map(plotlyText).join("+")}` : freePos[b] !== undefined ? `, ${L("free")} #${freePos[b]}` : "") +
      `, ref ${kv.ref_cnt[b]}` + (written !== null ? `, written ${written}/${kv.block_size}` : "") + (b === 0 && S.overview.flavor !== "nanovllm" ? ` (${L("null_block")})` : "");
    const zr = [], tr = [];
    for (let s = 0; s < bs; s++) {
      let v;
      if (S.kvMetric === "owner") v = catOf(ownerKind[b]);
      else if (S.kvMetric === "ref_cnt") v = kv.ref_cnt[b];
      else if (S.kvMetric === "written") v = written === null ? null : s < written ? 1 : 0;
      else v = freePos[b] !== undefined ? freePos[b] : null;
      zr.push(v);
      tr.push(`slot ${b * kv.block_size + s}, ${label}`);
    }
    z.push(zr); text.push(tr);
  }
  return { z, text, nb, bs, owned: ownersOf.map((o) => o.join("+")), cats };
}

export function drawKv() {
  const { z, text, nb, owned, cats } = kvGrid();
  const fresh = newBlockSet();
  const bs = S.trace.kv_cache.block_size;
  S.shapes.kv = runs([...fresh].filter((b) => b < nb)).map(([lo, hi]) => blockRunShape(lo, hi, Math.min(bs, 512), "#D55E00"));
  const id = "kv";
  const owner = S.kvMetric === "owner";
  if (showView(id)) {
    // the table names the owner request(s) itself; the other metrics are numbers
    clear($("tbl-kv")).append(gridTable("table-kv", z, {
      label: L("kv_cache"), rowHeader: (r) => `block ${r}`, maxRows: MAX_KV_BLOCKS,
      cellText: (r, c) => (z[r][c] === null ? "·" : owner ? owned[r] : z[r][c]),
      cellClass: (r, c) => (fresh.has(r) ? "new" : ""),
    }));
    $("tbl-kv").querySelectorAll("td").forEach((td) => { td.dataset.slot = Number(td.dataset.r) * bs + Number(td.dataset.c); });
  } else {
    const colors = cats.length ? cats.map((c) => c.color) : [OWNER_OTHER];
    // one labelled tick per category; past 16 requests every k-th request keeps its label
    const every = Math.ceil(cats.filter((c) => !c.kind).length / 16);
    const ticks = cats.filter((c) => c.kind || c.value % every === 0);
    const colorbar = owner ? { tickmode: "array", tickvals: ticks.map((c) => c.value), ticktext: ticks.map((c) => c.label) } : {};
    heatmap($("hm-kv"), z, { title: `KV cache (${L("m_" + S.kvMetric)})`, xTitle: L("ax_slot"), yTitle: L("ax_physical"), text,
      hover: "%{text}<extra></extra>", colorscale: owner ? discreteScale(colors) : "Viridis",
      zmin: owner ? -0.5 : undefined, zmax: owner ? colors.length - 0.5 : undefined, colorbar, shapes: shapesFor("kv") });
    onCellClick("kv", (r) => ({ kind: "block", index: r }));
  }
  if (S.trace.kv_cache.num_blocks > MAX_KV_BLOCKS && !$("kv-note")) {
    $("tbl-kv").after(el("p", { id: "kv-note", class: "muted", text: L("kv_note_cap").replace("{n}", MAX_KV_BLOCKS) }));
  }
}

function newBlockSet() {
  const out = new Set();
  for (const blocks of Object.values(S.trace.scheduler.new_block_ids || {})) blocks.forEach((b) => out.add(b));
  return out;
}

// contiguous runs [lo, hi] of sorted block ids, so adjacent new blocks get one outline
function runs(ids) {
  const out = [];
  for (const b of ids.sort((x, y) => x - y)) {
    if (out.length && out[out.length - 1][1] === b - 1) out[out.length - 1][1] = b;
    else out.push([b, b]);
  }
  return out;
}

function blockRunShape(lo, hi, width, color) {
  return { type: "rect", x0: -0.5, x1: width - 0.5, y0: lo - 0.5, y1: hi + 0.5, line: { color, width: 2, dash: "dot" }, fillcolor: "rgba(0,0,0,0)" };
}

// a stepwise colour scale: category i (of colors.length) takes colors[i]
function discreteScale(colors) {
  const out = [], n = colors.length;
  colors.forEach((c, i) => out.push([i / n, c], [(i + 1) / n, c]));
  return out;
}

// the KV grid's colour-by menu; onChange redraws the cards
export function kvMetricSelect(onChange) {
  return el("label", { class: "small" }, [`${L("metric")} `, el("select", {
    id: "kv-metric", onchange: (e) => { S.kvMetric = e.target.value; onChange(); },
  }, ["owner", "ref_cnt", "written", "free"].map((m) => el("option", { value: m, selected: m === S.kvMetric, text: L(`m_${m}`) })))]);
}
