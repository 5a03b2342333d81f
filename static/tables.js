// The request and token tables: one row per request of the persistent batch with its
// request-level arrays, and one column per scheduled token with every token-level array in stage
// order (the current stage's writes and reads marked, later stages dimmed). Cells are tinted by
// request and tagged (data-r, data-t) for the linked highlighting in hover.js.

import { exportMenu } from "./export.js";
import { applySelection, select, setHover } from "./hover.js";
import { rowTops, slideRows } from "./motion.js";
import { writeState } from "./state.js";
import { $, L, S, reqOfTokens, reqTint, rowMoves, stageIndex, state, tokenCount, writerStage } from "./trace.js";
import { clear, el, fmtList } from "./views.js";

// the request table's causes before its effects: what the batch holds (computed so far, the
// sequence's length, this step's share), then every other array in the order its stage runs
const INPUTS_FIRST = ["num_computed_tokens_cpu", "num_tokens", "num_scheduled_tokens"];
function causesFirst(names) {
  const rank = (n) => { const i = INPUTS_FIRST.indexOf(n); if (i >= 0) return i - 100; const j = stageIndex(writerStage(n)); return j < 0 ? 99 : j; };
  return [...names].sort((x, y) => rank(x) - rank(y));
}

// "b: row 1 → 0" for a request whose batch row changed since the previous step
export function moveLabel(m) { return `${m.req_id}: ${L("row")} ${m.from} → ${m.to}`; }

// The previous step's value of an array for a request, matched by request id (not by row):
// undefined where the request was not in the previous batch or the array is new.
function previousValues() {
  const prev = S.prev;
  if (!prev || prev.idle || !prev.batch) return null;
  const rowOf = new Map(prev.batch.req_ids.map((rid, r) => [String(rid), r]));
  return (name, rid) => {
    const a = prev.arrays[name];
    const r = rowOf.get(String(rid));
    if (!a || a.level !== "request" || r === undefined || a.shape[0] !== prev.batch.req_ids.length) return undefined;
    return a.data[r];
  };
}

// a cell with its value and, when it changed since the previous step, the old one: "+1" for a
// number (its accessible label says "was 4"), the old value struck through otherwise
function deltaCell(value, old) {
  const td = el("td", { text: String(value) });
  if (old === undefined || String(old) === String(value)) return td;
  const label = `${L("delta_was")} ${old}`;
  td.classList.add("changed");
  if (typeof value === "number" && typeof old === "number") {
    const d = value - old;
    td.append(" ", el("span", { class: "delta", title: label, "aria-label": label, text: `${d > 0 ? "+" : "−"}${Math.abs(d)}` }));
  } else {
    td.append(" ", el("del", { class: "ghost", title: label, "aria-label": label, text: String(old) }));
  }
  return td;
}

// the "Δ previous step" switch (on by default: stepping is about what changed; off for a clean slide)
function deltaToggle() {
  return el("label", { class: "small delta-toggle" }, [
    el("input", { type: "checkbox", id: "delta-toggle", checked: state.delta, onchange: (e) => {
      state.delta = e.target.checked;
      writeState(state);
      renderRequestTable();
      applySelection({ plots: false });
    } }), ` ${L("delta_toggle")}`]);
}

let drawnStep = null;  // the step the request table shows, so that only a step change slides rows

export function renderRequestTable() {
  const old = $("request-table");
  const before = drawnStep !== null && drawnStep !== state.step ? rowTops(old) : new Map();
  drawnStep = state.step;
  const box = clear($("req-table"));
  const tr = S.trace;
  const ids = tr.batch.req_ids;
  if (!ids.length) { box.append(el("p", { class: "muted", text: L("idle_step") })); return; }
  const names = causesFirst(Object.keys(tr.arrays).filter((n) => tr.arrays[n].level === "request" && tr.arrays[n].shape[0] === ids.length));
  const extra = Object.keys(tr.arrays).filter((n) => tr.arrays[n].level === "request" && tr.arrays[n].shape[0] === ids.length + 1);
  const moved = new Map(rowMoves().map((m) => [m.req_id, m]));
  const was = state.delta ? previousValues() : null;
  const table = el("table", { class: "req-table", id: "request-table", "aria-label": L("request_level") });
  table.append(el("caption", {}, [exportMenu([...names, ...extra]), " ", deltaToggle()]));
  table.append(el("thead", {}, el("tr", {}, [el("th", { text: L("row") }), el("th", { text: L("req") }),
    ...names.map((n) => el("th", { title: n, dataset: { array: n } }, [el("code", { text: n })]))])));
  const body = el("tbody");
  const inPrev = S.prev && S.prev.batch ? new Set(S.prev.batch.req_ids.map(String)) : null;
  ids.forEach((rid, r) => {
    const move = moved.get(String(rid));
    const fresh = was && inPrev && !inPrev.has(String(rid));
    const row = el("tr", { dataset: { r, req: rid }, tabindex: 0, class: move ? "moved" : "",
      onmouseenter: () => setHover({ kind: "request", index: r }), onmouseleave: () => setHover(null),
      onclick: () => select({ kind: "request", index: r }), onfocus: () => setHover({ kind: "request", index: r }), onblur: () => setHover(null),
      onkeydown: (e) => { if (e.key === "Enter") select({ kind: "request", index: r }); } },
    [el("td", {}, [String(r), move ? el("span", { class: "move-label", text: ` (${moveLabel(move)})` }) : null,
      fresh ? el("span", { class: "delta delta-new", text: ` ${L("delta_new")}` }) : null]),
     el("td", { class: "req-cell", style: `background:${reqTint(rid)}`, text: rid }),
     ...names.map((n) => deltaCell(tr.arrays[n].data[r], was ? was(n, rid) : undefined))]);
    body.append(row);
  });
  table.append(body);
  box.append(table);
  for (const n of extra) box.append(el("p", { class: "value-line", dataset: { array: n } }, [el("code", { text: n }), " = ", fmtList(tr.arrays[n].data, 64)]));
  slideRows(table, before, [...moved.keys()]);
}

const MAX_TOKEN_COLS = 512;

export function renderTokenTable() {
  const box = clear($("tok-table"));
  const tr = S.trace;
  const T = tokenCount();
  if (!T) { box.append(el("p", { class: "muted", text: L("idle_step") })); return; }
  const reqOf = reqOfTokens();
  const cur = stageIndex(state.stage);
  const curInfo = tr.stages.find((s) => s.name === state.stage) || { reads: [], writes: [] };
  const names = Object.keys(tr.arrays).filter((n) => tr.arrays[n].level === "token");
  const order = (n) => { const i = stageIndex(writerStage(n)); return i < 0 ? 99 : i; };
  names.sort((x, y) => order(x) - order(y));
  // presentation: the token row from positions to slot_mapping, and what the stage reads and writes
  if (state.present) {
    const key = new Set(["req_indices", "positions", "block_numbers", "block_offsets", "slot_mapping", ...curInfo.reads, ...curInfo.writes]);
    names.splice(0, names.length, ...names.filter((n) => key.has(n)));
  }
  const shown = Math.min(T, MAX_TOKEN_COLS);
  const table = el("table", { class: "tok-table", id: "token-table", "aria-label": L("token_level") });
  table.append(el("caption", {}, exportMenu(names)));
  const head = el("tr", {}, [el("th", { scope: "col", text: L("token") })]);
  for (let i = 0; i < shown; i++) {
    head.append(el("th", { scope: "col", class: "tok-head", tabindex: 0, dataset: { t: i },
      style: `background:${reqTint(tr.batch.req_ids[reqOf[i]])}`, "aria-label": `${L("token")} ${i}, ${L("req")} ${tr.batch.req_ids[reqOf[i]]}`,
      text: i }));
  }
  table.append(el("thead", {}, head));
  const body = el("tbody");
  for (const n of names) {
    const data = tr.arrays[n].data;
    const idx = order(n);
    const cls = curInfo.writes.includes(n) ? "current" : curInfo.reads.includes(n) ? "reads" : idx > cur ? "future" : "";
    const row = el("tr", { class: `${cls}${state.array === n ? " array-hl" : ""}`, dataset: { array: n } }, [el("th", { scope: "row" }, [el("code", { text: n })])]);
    const cols = Math.min(data.length, MAX_TOKEN_COLS);
    for (let i = 0; i < cols; i++) {
      const pad = i >= T;
      row.append(el("td", { dataset: { t: i }, class: pad ? "pad" : "", style: pad ? "" : `background:${reqTint(tr.batch.req_ids[reqOf[i]])}`,
        text: String(data[i]) }));
    }
    body.append(row);
  }
  table.append(body);
  box.append(table);
  if (T > MAX_TOKEN_COLS) box.append(el("p", { class: "muted", text: L("more_tokens").replace("{n}", T - MAX_TOKEN_COLS) }));
}
