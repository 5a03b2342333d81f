// The step's views, drawn from the run's context (context.js): every view of a step (renderStep),
// the stage chosen (setStage), the request in focus (pickRequest) and the system-level cards (the
// token table, block tables, KV cache, attention mask). run.js loads the run and its steps, wires
// the controls and calls these.

import { renderFeatures } from "./features.js";
import { card, drawBlockTable, drawMask, drawTokenIds } from "./heatmaps.js";
import { applySelection, lightArray, select } from "./hover.js";
import { drawKv, kvMetricSelect } from "./kvgrid.js";
import { kvGroups } from "./groups.js";
import { drawGroupTables, groupCardId } from "./grouptables.js";
import { renderStageDetail, renderStages } from "./stages.js";
import { writeState } from "./urlstate.js";
import { noteRowTops, renderRequestTable, renderTokenTable, slidePendingRows } from "./tables.js";
import { $, S, btName, isV2, stageNames, state } from "./context.js";
import { renderSlots } from "./slots.js";
import { drawAllTokenIds, drawInputBlockTables, drawSlotBlockTables } from "./v2tables.js";
import { markQueueFocus, renderBadges, renderChanges, renderQueue, renderTimelineActive } from "./timeline.js";
import { clear } from "./views.js";
import { deferDraws } from "./canvasmap.js";
import { emitView } from "./bus.js";
import { renderOverview } from "./overview.js";
import { renderEngineCore } from "./enginecore.js";

export function setStage(name) {
  state.stage = name;
  renderStages(setStage);
  renderTokenTable();
  renderStageDetail();
  writeState(state);
  emitView("stage");
}

export function moveStage(delta) {
  const names = stageNames();
  const i = Math.max(0, Math.min(names.length - 1, names.indexOf(state.stage) + delta));
  setStage(names[i]);
}

// every view of the step; the heatmaps are drawn with the selection already (each view's time goes
// to window.pagedvizTiming.parts, each system card's to .systemParts). Reads of the page's layout
// come first (the request rows' places) and the canvases are drawn next, while the page is
// unchanged: a canvas's font needs the page's styles, which would otherwise be recomputed for
// every table just rebuilt. The tables and the rest follow; the rows that moved slide last, so the
// step costs the page one layout.
export function renderStep() {
  const parts = {};
  const timed = (name, f) => { const t = performance.now(); f(); parts[name] = performance.now() - t; };
  noteRowTops();
  // a step change draws the system panels first, their places read from the page as it stands;
  // a run's first step draws them last, once the views above them have given them their places
  const first = !S.sysKey;
  if (!first) timed("system", renderSystem);
  timed("timeline", () => { renderTimelineActive(); renderBadges(); renderEngineCore(); renderChanges(); renderQueue(pickRequest); });
  timed("stages", () => { renderStages(setStage); renderStageDetail(); });
  timed("requests", () => { renderSlots(); renderRequestTable(); });
  timed("tokens", renderTokenTable);
  timed("overview", () => renderOverview(pickRequest));
  if (first) timed("system", renderSystem);
  timed("selection", () => { applySelection({ plots: false }); lightArray(state.array || null); });
  slidePendingRows();
  window.pagedvizTiming.parts = parts;
}

// focus on one request: select it where it is in the batch, else keep it for the steps it is in
export function pickRequest(rid) {
  const r = S.trace.batch.req_ids.map(String).indexOf(rid);
  if (r >= 0) { select({ kind: "request", index: r }); refocus(); return; }
  state.req = rid; state.pos = -1; state.block = -1;
  S.sel = null;
  writeState(state);
  applySelection();
  refocus();
}

// the views that mark the focused request (or keep its rows alone) redraw around it
export function refocus() {
  renderRequestTable();
  slidePendingRows();
  renderTokenTable();
  renderOverview(pickRequest);
  markQueueFocus();
  applySelection({ plots: false });
  // the tables are drawn anew: a checkpoint open hides its answer in them again (predict.js)
  document.dispatchEvent(new Event("pagedviz:refocused"));
}

// ------------------------------------------------------------------ system level
// The cards are rebuilt only when their set, views or language change; a step change redraws
// into the same canvases.
export function renderSystem() {
  const tr = S.trace;
  // the panels' places, read before this step writes anything (no layout to wait for): a heatmap
  // out of view is drawn after the frame that shows the step, not before it
  const away = (node) => { if (!node || node.hidden) return false; const r = node.getBoundingClientRect(); return r.top >= window.innerHeight || r.bottom <= 0; };
  // (the features panel's heatmaps by their own places too: the panel may start in view above them)
  const featureMaps = [...document.querySelectorAll("#features .heatmap")];
  const sysAway = away(document.querySelector(".sys-panel"));
  const featuresAway = away($("features-panel")) || (featureMaps.length > 0 && featureMaps.every(away));
  const bt = btName();
  const cards = [];
  if (tr.arrays.token_ids_cpu) cards.push(["token_ids_cpu", "token_ids_cpu"]);
  if (tr.arrays[bt]) cards.push(["block_table", isV2() ? "v2_block_tables" : bt]);
  if (tr.arrays.input_block_tables) cards.push(["input_block_tables", "v2_input_block_tables"]);
  if (tr.arrays.all_token_ids) cards.push(["all_token_ids", "v2_all_token_ids"]);
  if (tr.kv_cache && tr.kv_cache.num_blocks) cards.push(["kv", "kv_cache"]);
  if (tr.arrays.attn_mask) cards.push(["attn_mask", "attn_mask"]);
  // with several KV cache groups, the batch-order block table card holds one table per group
  const groups = kvGroups().length;
  const key = JSON.stringify([cards, S.view, state.lang, S.kvMetric, groups]);
  if (key !== S.sysKey) {
    S.sysKey = key;
    const grid = clear($("sys-grid"));
    for (const [id, titleKey] of cards) {
      const perGroup = groups > 1 && id === groupCardId();
      grid.append(card(id, perGroup ? "grp_block_tables" : titleKey, id === "kv" ? { extra: kvMetricSelect(redrawSystem), onToggle: redrawSystem }
        : { onToggle: redrawSystem, toggle: !perGroup }));
    }
  }
  S.shapes = {};
  const draw = { token_ids_cpu: drawTokenIds, block_table: isV2() ? drawSlotBlockTables : drawBlockTable, kv: drawKv, attn_mask: drawMask,
    input_block_tables: drawInputBlockTables, all_token_ids: drawAllTokenIds };
  if (groups > 1) draw[groupCardId()] = drawGroupTables;
  const parts = (window.pagedvizTiming.systemParts = {});
  try {
    deferDraws(sysAway);
    for (const [id] of cards) { const t = performance.now(); draw[id](); parts[id] = Math.round(performance.now() - t); }
    deferDraws(featuresAway);
    renderFeatures();
  } finally { deferDraws(false); }
}

export function redrawSystem() {
  renderSystem();
  applySelection();
}
