// The KV cache grid: one row per physical block, one column per slot in the block, coloured by the
// owner request (the request's own colour for the whole run), by ref count, by written slots or by
// free-queue order, each on a colour domain fixed for the whole run. This step's changes carry
// distinct marks: allocated, reused from the prefix cache (ref +1), freed, freed by a preemption.
// When a token is selected, the blocks its attention reads through block_table[req] are numbered
// in logical order, up to its own position (the causal cut). As a heatmap or as a table. With
// several KV cache groups the owner colours say the group's kind too, the null block is labelled,
// a block that changed group since the previous step has its own mark (poolgroups.js, groups.js).

import { flatBlocks, isHybrid, movedBlocks } from "./groups.js";
import { onCellClick, showView } from "./heatmaps.js";
import { annotationsFor, shapesFor } from "./hover.js";
import { $, L, S, bigBatch, reqColor, reqOrder, scenarioReqIds } from "./context.js";
import { GREY, clear, discreteScale, el, gridTable, heatmap, plotlyText } from "./views.js";
import { blockWords, isNullBlock, nullColor, ownerCellText, poolCategories, renderPoolLegend } from "./poolgroups.js";

const MAX_KV_BLOCKS = 256;
const OWNER_SHARED = "#444444";

// The marks of this step's changes: colour, dash and a glyph for the table view and the legend.
export const MARKS = {
  allocated: { color: "#D55E00", dash: "dash", width: 2, glyph: "+" },
  reused: { color: "#009E73", dash: "solid", width: 3, glyph: "↺" },
  freed: { color: "#0072B2", dash: "dot", width: 2, glyph: "−" },
  preempted: { color: "#CC79A7", dash: "dashdot", width: 3, glyph: "!" },
};
// with several KV cache groups: a block that changed group since the previous step (a sliding
// group gave it back, another group took it)
export const MOVED = { color: "#7F3C8D", dash: "solid", width: 3, glyph: "⇄" };
const marksOn = () => (isHybrid() ? { ...MARKS, moved: MOVED } : MARKS);
// the colour-by metric on show: "group" only where the run has groups
const metricOn = () => (S.kvMetric === "group" && !isHybrid() ? "owner" : S.kvMetric);

// What happened to each block between the previous step's pool and this one's:
// {allocated, reused, freed, preempted}: block id -> the request(s) it concerns.
export function blockChanges() {
  const out = { allocated: new Map(), reused: new Map(), freed: new Map(), preempted: new Map(), moved: new Map() };
  const kv = S.trace.kv_cache || {};
  const prev = S.prev && S.prev.kv_cache ? S.prev.kv_cache : null;
  const hashBefore = (prev && prev.block_hash) || {};
  const hashNow = kv.block_hash || {};
  const seen = new Set();
  const add = (m, b, rid) => { if (!m.has(b)) m.set(b, []); m.get(b).push(rid); };
  for (const [rid, blocks] of Object.entries(S.trace.scheduler.new_block_ids || {})) {
    for (const b of flatBlocks(blocks)) {
      // a hit on a block hashed before this step (its hash survived), or on one that a request
      // earlier in this same step filled, is a reuse: its ref count goes up by one
      const hit = (hashBefore[b] !== undefined && hashBefore[b] === hashNow[b]) || seen.has(b);
      add(hit ? out.reused : out.allocated, b, rid);
      seen.add(b);
    }
  }
  if (prev && prev.owners) {
    const preempted = new Set((S.trace.scheduler.preempted_req_ids || []).map(String));
    const nowOwners = kv.owners || {};
    for (const [b, owners] of Object.entries(prev.owners)) {
      const still = new Set((nowOwners[b] || []).map(String));
      for (const rid of owners.map(String)) if (!still.has(rid)) add(preempted.has(rid) ? out.preempted : out.freed, Number(b), rid);
    }
  }
  for (const [b] of movedBlocks()) for (const rid of (kv.owners || {})[String(b)] || []) add(out.moved, b, String(rid));
  return out;
}

// colours for the owner metric: one category per request of the scenario (fixed for the run;
// all grey past the palette), then one for blocks shared by several requests
function ownerCategories() {
  const ids = scenarioReqIds();
  if (bigBatch()) return { cats: [{ value: 0, label: L("req"), color: GREY }, { value: 1, kind: "shared", label: L("shared_block"), color: OWNER_SHARED }], of: (owners) => (owners.length > 1 ? 1 : 0) };
  const cats = ids.map((rid, i) => ({ value: i, rid, label: plotlyText(rid), color: reqColor(rid) }));
  cats.push({ value: ids.length, kind: "shared", label: L("shared_block"), color: OWNER_SHARED });
  return { cats, of: (owners) => (owners.length > 1 ? ids.length : reqOrder(owners[0])) };
}

// a sequential blue scale cut into n equal steps, for counts
function countColors(n) {
  const lo = [239, 243, 255], hi = [8, 48, 107];
  return Array.from({ length: n }, (_, i) => {
    const f = n === 1 ? 0 : i / (n - 1);
    return `rgb(${lo.map((c, k) => Math.round(c + (hi[k] - c) * f)).join(",")})`;
  });
}

// the colour scale, domain and legend of each metric: categories for owners and booleans, integer
// steps for counts, the pool's own length for the free-queue order; none depends on the step
function encoding(metric, kv) {
  if (isHybrid() && (metric === "owner" || metric === "group")) {
    const { cats } = poolCategories(metric);
    return { colors: cats.map((c) => c.color), cats };
  }
  if (metric === "owner") {
    const { cats } = ownerCategories();
    return { colors: cats.map((c) => c.color), cats };
  }
  if (metric === "written") {
    return { colors: ["#f2f2f2", "#0072B2"], cats: [{ value: 0, label: L("slot_empty") }, { value: 1, label: L("slot_written") }] };
  }
  if (metric === "ref_cnt") {
    const max = Math.max(2, scenarioReqIds().length);
    const every = Math.ceil((max + 1) / 12);
    return { colors: countColors(max + 1), cats: Array.from({ length: max + 1 }, (_, v) => ({ value: v, label: String(v) })).filter((c) => c.value % every === 0) };
  }
  return { continuous: true, zmin: 0, zmax: Math.max(1, kv.num_blocks - 1) };
}

function kvGrid(changes) {
  const kv = S.trace.kv_cache;
  const nb = Math.min(kv.num_blocks, MAX_KV_BLOCKS);
  const bs = Math.min(kv.block_size, 512);
  const freePos = {};
  kv.free_block_queue.forEach((b, i) => { freePos[b] = i; });
  const metric = metricOn(), hybrid = isHybrid();
  const of = hybrid && (metric === "owner" || metric === "group") ? null : ownerCategories().of;
  const poolOf = of ? null : poolCategories(metric).of;
  const marks = marksOn();
  const ownersOf = [];
  for (let b = 0; b < nb; b++) ownersOf.push((kv.owners[String(b)] || []).map(String));
  const z = [], text = [];
  for (let b = 0; b < nb; b++) {
    const owners = ownersOf[b];
    const written = kv.written_slots ? kv.written_slots[b] : null;
    const on = Object.keys(marks).filter((k) => changes[k].has(b)).map((k) => `${L("mark_" + k)} (${changes[k].get(b).map(plotlyText).join("+")})`);
    const grp = hybrid ? blockWords(b) : "";
    const label = `block ${b}` + (owners.length ? `, ${L("req")} ${owners.map(plotlyText).join("+")}` : freePos[b] !== undefined ? `, ${L("free")} #${freePos[b]}` : "") +
      `, ref ${kv.ref_cnt[b]}` + (written !== null ? `, written ${written}/${kv.block_size}` : "") +
      (hybrid ? (grp ? ` (${grp})` : "") : b === 0 && S.overview.flavor !== "nanovllm" ? ` (${L("null_block")})` : "") +
      (on.length ? ` · ${on.join(", ")}` : "");
    const zr = [], tr = [];
    for (let s = 0; s < bs; s++) {
      let v;
      if (poolOf) v = poolOf(b, owners);
      else if (metric === "owner") v = owners.length ? of(owners) : null;
      else if (metric === "ref_cnt") v = kv.ref_cnt[b];
      else if (metric === "written") v = written === null ? null : s < written ? 1 : 0;
      else v = freePos[b] !== undefined ? freePos[b] : null;
      zr.push(v);
      tr.push(`slot ${b * kv.block_size + s}, ${label}`);
    }
    z.push(zr); text.push(tr);
  }
  return { z, text, nb, bs, owned: ownersOf.map((o, b) => (hybrid ? ownerCellText(b, o) : o.join("+"))) };
}

export function drawKv() {
  const changes = blockChanges();
  const { z, text, nb, owned } = kvGrid(changes);
  const bs = S.trace.kv_cache.block_size;
  const width = Math.min(bs, 512);
  S.shapes.kv = [];
  S.labels = { kv: nullLabel(metricOn(), bs) };
  const marks = marksOn(), metric = metricOn();
  for (const [kind, m] of Object.entries(marks)) {
    for (const [lo, hi] of runs([...changes[kind].keys()].filter((b) => b < nb))) {
      S.shapes.kv.push({ type: "rect", x0: -0.5, x1: width - 0.5, y0: lo - 0.5, y1: hi + 0.5, line: { color: m.color, width: m.width, dash: m.dash }, fillcolor: "rgba(0,0,0,0)" });
    }
  }
  const owner = metric === "owner" || metric === "group";
  if (showView("kv")) {
    // the table names the owner request(s) itself; the other metrics are numbers
    const glyphs = (b) => Object.keys(marks).filter((k) => changes[k].has(b)).map((k) => marks[k].glyph).join("");
    clear($("tbl-kv")).append(gridTable("table-kv", z, {
      label: L("kv_cache"), rowHeader: (r) => `${glyphs(r)} block ${r}`.trim(), maxRows: MAX_KV_BLOCKS,
      cellText: (r, c) => (z[r][c] === null ? "·" : owner ? owned[r] : z[r][c]),
      cellClass: (r) => [...Object.keys(marks).filter((k) => changes[k].has(r)).map((k) => `mark-${k}`), isHybrid() && isNullBlock(r) ? "null-block" : ""].join(" ").trim(),
    }));
    $("tbl-kv").querySelectorAll("td").forEach((td) => { td.dataset.slot = Number(td.dataset.r) * bs + Number(td.dataset.c); });
  } else {
    const enc = encoding(metric, S.trace.kv_cache);
    let opts;
    if (enc.continuous) {
      opts = { colorscale: "Blues", reversescale: true, zmin: enc.zmin, zmax: enc.zmax, colorbar: { tickformat: "d", title: { text: L("m_free") } } };
    } else {
      // categories: only those on show get a labelled tick (past 16 requests every k-th one)
      const present = new Set(z.flat().filter((v) => v !== null));
      const shown = enc.cats.filter((c) => !owner || present.has(c.value));
      const every = Math.ceil(shown.length / 16);
      const ticks = shown.filter((c, i) => c.kind || i % every === 0);
      opts = { colorscale: discreteScale(enc.colors), zmin: -0.5, zmax: enc.colors.length - 0.5,
               colorbar: { tickmode: "array", tickvals: ticks.map((c) => c.value), ticktext: ticks.map((c) => c.label) } };
    }
    heatmap($("hm-kv"), z, { title: `KV cache (${L("m_" + metric)})`, xTitle: L("ax_slot"), yTitle: L("ax_physical"), text,
      hover: "%{text}", shapes: shapesFor("kv"), annotations: annotationsFor("kv"), ...opts });
    onCellClick("kv", (r, c) => ({ kind: "slot", index: r * bs + c }));
  }
  renderKvLegend(changes);
  if (isHybrid() && owner) renderPoolLegend($("card-kv"), metric, new Set(z.flat().filter((v) => v !== null)));
  else if ($("kv-pool-legend")) $("kv-pool-legend").remove();
  if (S.trace.kv_cache.num_blocks > MAX_KV_BLOCKS && !$("kv-note")) {
    $("tbl-kv").after(el("p", { id: "kv-note", class: "muted", text: L("kv_note_cap").replace("{n}", MAX_KV_BLOCKS) }));
  }
}

// under the grid: each change mark with its count this step, and the kernel-read mark
function renderKvLegend(changes) {
  let box = $("kv-legend");
  if (!box) { box = el("ul", { id: "kv-legend", class: "mark-legend", "aria-label": L("legend") }); $("card-kv").append(box); }
  clear(box);
  for (const [kind, m] of Object.entries(marksOn())) {
    const blocks = [...changes[kind].keys()].sort((x, y) => x - y);
    box.append(el("li", { class: `legend-${kind}`, dataset: { count: blocks.length } }, [
      el("span", { class: "swatch-line", style: `border-top: ${m.width}px ${m.dash === "solid" ? "solid" : m.dash === "dot" ? "dotted" : "dashed"} ${m.color}`, "aria-hidden": "true" }),
      `${m.glyph} ${L("mark_" + kind)}: `, el("strong", { text: blocks.length ? blocks.join(", ") : "—" })]));
  }
  box.append(el("li", { class: "legend-read" }, [el("span", { class: "swatch-fill", "aria-hidden": "true" }), L("mark_read")]));
}

// with several groups the null block is labelled on the grid itself: it is neither free nor a request's
function nullLabel(metric, bs) {
  if (!isHybrid() || (metric !== "owner" && metric !== "group") || !isNullBlock(0)) return [];
  return [{ x: (Math.min(bs, 512) - 1) / 2, y: 0, text: L("null_block"), showarrow: false, bgcolor: nullColor(), bordercolor: "#808080", font: { size: 11, color: nullColor() === "#1a1a1a" ? "#ffffff" : "#111111" } }];
}

// contiguous runs [lo, hi] of sorted block ids, so adjacent marked blocks get one outline
function runs(ids) {
  const out = [];
  for (const b of ids.sort((x, y) => x - y)) {
    if (out.length && out[out.length - 1][1] === b - 1) out[out.length - 1][1] = b;
    else out.push([b, b]);
  }
  return out;
}


// the KV grid's colour-by menu; onChange redraws the cards
export function kvMetricSelect(onChange) {
  return el("label", { class: "small" }, [`${L("metric")} `, el("select", {
    id: "kv-metric", onchange: (e) => { S.kvMetric = e.target.value; onChange(); },
  }, ["owner", ...(isHybrid() ? ["group"] : []), "ref_cnt", "written", "free"].map((m) => el("option", { value: m, selected: m === metricOn(), text: L(`m_${m}`) })))]);
}
