// The request and token tables: one row per request of the persistent batch with its
// request-level arrays, and one column per scheduled token with every token-level array in stage
// order (the current stage's writes and reads marked, later stages dimmed). Cells are tinted by
// request and tagged (data-r, data-t) for the linked highlighting in hover.js.

import { exportMenu } from "./export.js";
import { select, setHover } from "./hover.js";
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

export function renderRequestTable() {
  const box = clear($("req-table"));
  const tr = S.trace;
  const ids = tr.batch.req_ids;
  if (!ids.length) { box.append(el("p", { class: "muted", text: L("idle_step") })); return; }
  const names = causesFirst(Object.keys(tr.arrays).filter((n) => tr.arrays[n].level === "request" && tr.arrays[n].shape[0] === ids.length));
  const extra = Object.keys(tr.arrays).filter((n) => tr.arrays[n].level === "request" && tr.arrays[n].shape[0] === ids.length + 1);
  const moved = new Map(rowMoves().map((m) => [m.req_id, m]));
  const table = el("table", { class: "req-table", id: "request-table", "aria-label": L("request_level") });
  table.append(el("caption", {}, exportMenu([...names, ...extra])));
  table.append(el("thead", {}, el("tr", {}, [el("th", { text: L("row") }), el("th", { text: L("req") }),
    ...names.map((n) => el("th", { title: n, dataset: { array: n } }, [el("code", { text: n })]))])));
  const body = el("tbody");
  ids.forEach((rid, r) => {
    const move = moved.get(String(rid));
    const row = el("tr", { dataset: { r, req: rid }, tabindex: 0, class: move ? "moved" : "",
      onmouseenter: () => setHover({ kind: "request", index: r }), onmouseleave: () => setHover(null),
      onclick: () => select({ kind: "request", index: r }), onfocus: () => setHover({ kind: "request", index: r }),
      onkeydown: (e) => { if (e.key === "Enter") select({ kind: "request", index: r }); } },
    [el("td", {}, [String(r), move ? el("span", { class: "move-label", text: ` (${moveLabel(move)})` }) : null]),
     el("td", { class: "req-cell", style: `background:${reqTint(rid)}`, text: rid }),
     ...names.map((n) => el("td", { text: String(tr.arrays[n].data[r]) }))]);
    body.append(row);
  });
  table.append(body);
  box.append(table);
  for (const n of extra) box.append(el("p", { class: "value-line", dataset: { array: n } }, [el("code", { text: n }), " = ", fmtList(tr.arrays[n].data, 64)]));
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
