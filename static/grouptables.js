// The block tables of a run with several KV cache groups, side by side: one table per group,
// each under its group's name (kind, layers, window), rows in batch order. A sliding group's
// null block (0 inside a request's own blocks: the window dropped that logical block) is drawn
// as what it is, a block this step added is outlined as on today's table, and a block that
// changed group since the previous step (a sliding group gave it back, a full group took it) has
// its own outline. With more than two groups (Gemma 3: five sliding, one full), the first group
// of each kind is a table and the others fold to one compact row each, a click away from their
// table. With one group the block table card is heatmaps.js's, as it always was.

import { putTable } from "./heatmaps.js";
import { L, S, isV2 } from "./context.js";
import { NULL_BLOCK, blocksOf, fewRows, groupLabel, groupRows, isSliding, kvGroups, movedBlocks, perGroup, rowLengths } from "./groups.js";
import { el, gridTable } from "./views.js";
import { drawWindowRows } from "./windowrow.js";

// the groups folded open by the reader, kept across steps (by group index)
const unfolded = new Set();

// the card that holds the tables: V1's block_table, V2's gathered input_block_tables
export const groupCardId = () => (isV2() ? "input_block_tables" : "block_table");

// a table's id: group 0 keeps today's (hover.js, predict.js and the tests read it), the others _g{g}
const tableId = (g) => `table-${groupCardId()}${g === 0 ? "" : `_g${g}`}`;

export function drawGroupTables() {
  const id = groupCardId();
  const box = document.getElementById(`tbl-${id}`);
  document.getElementById(`hm-${id}`).hidden = true;
  box.hidden = false;
  const groups = kvGroups();
  const ids = S.trace.batch.req_ids.map(String);
  const moved = movedBlocks();
  const added = S.trace.scheduler.new_block_ids || {};
  const tables = groups.map((g, i) => {
    const { rows, name } = groupRows(i);
    const lens = rowLengths(i);
    const fresh = ids.map((rid) => new Set(perGroup(added[rid])[i] || []));
    // the KV manager's blocks (scheduler.block_ids): where it holds the null block, V1's runner
    // still has the id it was first given (vLLM's runner is not told of a window's drops)
    const mgr = ids.map((rid) => blocksOf(rid, i));
    const nullAt = (r, c) => r < ids.length && c < (lens[r] || 0) && mgr[r][c] === NULL_BLOCK;
    return { g, i, rows, name, lens, fresh, nullAt };
  });
  // the columns any group uses, and one more (its padding), so that the tables fit side by side
  let used = 0;
  for (const t of tables) t.rows.forEach((row, r) => row.forEach((v, c) => { if (v !== NULL_BLOCK || c < (t.lens[r] || 0)) used = Math.max(used, c + 1); }));
  const first = new Set(groups.map((g) => isSliding(g)).map((s, i, all) => all.indexOf(s)));
  const fold = groups.length > 2;
  const cellClass = (t) => (r, c) => {
    const v = t.rows[r][c];
    if (t.nullAt(r, c)) return v === NULL_BLOCK ? "null-block" : "null-block runner-stale";
    if (v === NULL_BLOCK) return "zero";
    // past a row's own blocks: a stale id an earlier holder of the state slot left (V2), struck
    if (r < ids.length && c >= (t.lens[r] || 0)) return "zero sm-stale";
    return [t.fresh[r] && t.fresh[r].has(v) ? "new" : "", moved.has(v) && moved.get(v).to === t.i ? "moved-block" : ""].join(" ").trim();
  };
  // the rows: the batch's, and past it only those that still hold a block in some group
  let nRows = ids.length;
  for (const t of tables) t.rows.forEach((row, r) => { if (row.some((v) => v !== NULL_BLOCK)) nRows = Math.max(nRows, r + 1); });
  putTable(box, () => {
    const wrap = el("div", { class: "bt-groups", dataset: { groups: groups.length } });
    for (const t of tables) {
      const cols = Math.min(t.rows.length ? t.rows[0].length : 0, Math.max(1, used + 1));
      const rows = t.rows.slice(0, nRows).map((row) => row.slice(0, cols));
      const head = el("h4", { class: "bt-group-name", text: groupLabel(t.i, t.g) });
      const table = gridTable(tableId(t.i), rows, {
        label: groupLabel(t.i, t.g), cellClass: cellClass(t), cellText: (r, c) => (t.nullAt(r, c) ? NULL_BLOCK : rows[r][c]),
        rowHeader: (r) => (r < ids.length ? `${r} · ${ids[r]}` : String(r)),
      });
      table.querySelectorAll("td.null-block").forEach((td) => {
        td.title = L("null_block_what");
        const stale = rows[Number(td.dataset.r)][Number(td.dataset.c)];
        if (stale === NULL_BLOCK) return;
        td.dataset.stale = stale;
        td.title += ` · ${L("grp_runner_keeps").replace("{name}", t.name).replace("{b}", stale)}`;
      });
      table.querySelectorAll("td.moved-block").forEach((td) => {
        const m = moved.get(Number(td.textContent));
        td.title = L("grp_moved_title").replace("{from}", groupLabel(m.from)).replace("{to}", groupLabel(m.to));
      });
      const kind = isSliding(t.g) ? "sliding" : "full";
      if (!fold || first.has(t.i)) {
        wrap.append(el("section", { class: `bt-group bt-${kind}`, dataset: { group: t.i } }, [head, table]));
        continue;
      }
      const details = el("details", { class: `bt-group bt-${kind} compact`, dataset: { group: t.i }, open: unfolded.has(t.i) },
        [el("summary", {}, [el("span", { class: "bt-group-name", text: groupLabel(t.i, t.g) }), compactRow(t, ids, cellClass(t))]), table]);
      details.addEventListener("toggle", () => { if (details.open) unfolded.add(t.i); else unfolded.delete(t.i); });
      wrap.append(details);
    }
    const frag = el("div", {}, [wrap]);
    const win = drawWindowRows();
    if (win) frag.append(win);
    return frag;
  });
}

// a folded group in one line: each batch request's blocks in this group, in logical order
function compactRow(t, ids, cls) {
  const line = el("span", { class: "bt-compact" });
  const few = fewRows(ids);
  few.rows.forEach((r) => {
    const rid = ids[r];
    if (!t.rows[r]) return;
    const n = t.lens[r] || 0;
    const cells = [];
    for (let c = 0; c < n && c < t.rows[r].length; c++) {
      const k = cls(r, c);
      const nul = t.nullAt(r, c);
      cells.push(el("span", { class: `bt-chip ${k}`, title: nul ? L("null_block_what") : undefined, text: nul ? NULL_BLOCK : t.rows[r][c] }));
    }
    line.append(el("span", { class: "bt-compact-req" }, [el("strong", { text: `${rid}:` }), ...cells]));
  });
  if (few.more > 0) line.append(el("span", { class: "muted", text: `… +${few.more} ${L("more")}` }));
  return line;
}

