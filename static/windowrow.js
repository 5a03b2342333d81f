// The sliding window on each request's token row: one cell per position of the request's sequence
// after this step (computed + scheduled tokens), block starts marked. A position whose logical
// block a sliding group replaced by the null block is drawn dropped; the others the group still
// holds; the window of the request's last token (its last `sliding_window` positions, what its
// sliding layers attend to) is outlined. One row per request for each distinct window of the
// run's sliding groups (groups with one window drop the same logical blocks).

import { L, S } from "./context.js";
import { groupShort, windowRows } from "./groups.js";
import { el } from "./views.js";

// past this many positions a row shows its last ones, after a cell that counts the rest
const MAX_POSITIONS = 96;

export function drawWindowRows() {
  const sets = windowRows();
  if (!sets.length) return null;
  const bs = S.trace.kv_cache.block_size;
  const box = el("div", { class: "win-rows", id: "win-rows" });
  for (const set of sets) {
    const title = L("win_title").replace("{w}", set.window).replace("{group}", groupShort(set.group));
    const list = el("div", { class: "win-set", dataset: { window: set.window, group: set.group } }, [el("h4", { class: "win-title", text: title })]);
    for (const row of set.rows) list.append(tokenRow(row, bs));
    if (set.more > 0) list.append(el("p", { class: "muted win-more-rows", text: `… +${set.more} ${L("more")}` }));
    box.append(list);
  }
  box.append(legend());
  return box;
}

function tokenRow(row, bs) {
  const from = Math.max(0, row.len - MAX_POSITIONS);
  const strip = el("span", { class: "win-strip" });
  if (from > 0) strip.append(el("span", { class: "win-more", text: `… ${from}` }));
  let dropped = 0;
  for (let p = 0; p < row.len; p++) if (!row.held(p)) dropped += 1;
  for (let p = from; p < row.len; p++) {
    const cls = ["win-pos", row.held(p) ? "win-held" : "win-drop"];
    if (p >= row.lo && p <= row.hi) cls.push("win-in");
    if (p === row.lo) cls.push("win-lo");
    if (p === row.hi) cls.push("win-hi");
    if (p % bs === 0) cls.push("win-block");
    const what = row.held(p) ? (p >= row.lo ? L("win_in") : L("win_held")) : L("win_dropped");
    strip.append(el("span", { class: cls.join(" "), dataset: { pos: p }, title: `${L("ax_position")} ${p}: ${what}` }));
  }
  const note = L("win_note").replace("{lo}", row.lo).replace("{hi}", row.hi).replace("{n}", dropped);
  return el("div", { class: "win-row", dataset: { req: row.rid, dropped } }, [
    el("strong", { class: "win-req", text: row.rid }), strip, el("span", { class: "win-note", text: note })]);
}

function legend() {
  const key = (cls, text) => el("li", {}, [el("span", { class: `win-pos ${cls}`, "aria-hidden": "true" }), text]);
  return el("ul", { class: "mark-legend win-legend" }, [key("win-held", L("win_held")), key("win-held win-in", L("win_in")), key("win-drop", L("win_dropped"))]);
}
