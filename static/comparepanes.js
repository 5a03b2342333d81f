// The compare view's two panes (compare.js decides what is compared and when): run A and run B
// side by side at the same step, each with its queue, its block table, its KV pool and the step's
// token row (positions over slot_mapping), on the first screen. Both sides are matched by request,
// never by batch row (two runners may order a batch differently): a block-table cell, a token or a
// KV block that the other side holds otherwise is outlined as a difference. A long token row is
// shown compressed: a run of tokens of one request with consecutive positions and slots is one
// cell ("0–15" over "32–47").

import { gatheredReads } from "./kernelreads.js";
import { L, reqColor, reqTint, state } from "./context.js";
import { clear, el } from "./views.js";

const MAX_TOKEN_CELLS = 48;   // past this many cells, a request's runs are merged into one cell each
const MAX_KV_CELLS = 96;      // a bigger pool shows its first blocks and says how many more

function arr(t, name) { return t && t.arrays[name] ? t.arrays[name] : null; }

// the request of each scheduled token, its position and its slot: [{req, pos, slot}]
export function tokensOf(t) {
  const ids = (t.batch.req_ids || []).map(String);
  const qsl = arr(t, "query_start_loc") || arr(t, "cu_seqlens_q");
  const pos = arr(t, "positions"), slots = arr(t, "slot_mapping");
  if (!qsl || !pos || !slots) return [];
  const out = [];
  for (let r = 0; r < ids.length && r + 1 < qsl.data.length; r++) {
    for (let i = qsl.data[r]; i < qsl.data[r + 1] && i < pos.data.length; i++) {
      out.push({ req: ids[r], pos: pos.data[i], slot: slots.data[i] });
    }
  }
  return out;
}

// the table the kernel reads, one row per batch row: {req: [blocks]} with the padding cut off;
// Model Runner V2's gathered rows up to num_blocks (kernelreads.js, the main view's rule): the
// stale entries past them, never read, go to `stale` ({req: [[col, block]]}), struck, not compared
export function blockRowsOf(t, flavor, stale = new Map()) {
  const bt = arr(t, "input_block_tables") || arr(t, "block_table") || arr(t, "block_tables");
  const ids = (t.batch.req_ids || []).map(String);
  const pad = flavor === "nanovllm" ? -1 : 0;
  const reads = arr(t, "input_block_tables") ? gatheredReads(t) : null;
  const out = new Map();
  if (!bt || bt.shape.length !== 2) return out;
  ids.forEach((rid, r) => {
    const row = bt.data[r] || [];
    let end = row.length;
    while (end > 0 && (row[end - 1] === pad || (reads && !reads(r, end - 1)))) end--;
    out.set(rid, row.slice(0, end));
    const left = reads ? row.map((v, c) => [c, v]).filter(([c, v]) => c >= end && v !== pad) : [];
    if (left.length) stale.set(rid, left);
  });
  return out;
}

// the pool's usable blocks (vLLM's count, the null block left out; nano-vllm: all)
const usableOf = (t) => (t.kv_cache || {}).num_usable_blocks ?? (t.kv_cache || {}).num_blocks ?? 0;

function ownersOf(t) {
  const kv = t.kv_cache || {};
  const out = [];
  for (let b = 0; b < (kv.num_blocks || 0); b++) out.push(((kv.owners || {})[String(b)] || []).map(String).join("+"));
  return out;
}

// where each request stands in this step, in vLLM's queues: {req: "running 44" | "waiting" |
// "waiting preempted" | "finished"} (vLLM 0.33 puts a preempted request back at the front of
// `waiting`, with the status PREEMPTED: there is no queue of preempted requests)
export function lanesOf(t) {
  const sch = t.scheduler || {};
  const out = new Map();
  for (const r of sch.waiting_req_ids || []) out.set(String(r), "waiting");
  for (const r of sch.preempted_req_ids || []) out.set(String(r), "waiting preempted");
  for (const r of sch.finished_req_ids || []) out.set(String(r), "finished");
  const n = sch.num_scheduled_tokens || {};
  for (const r of t.batch.req_ids || []) out.set(String(r), `running ${n[r] ?? n[String(r)] ?? ""}`.trim());
  return out;
}

function reqStyle(rid) { return `background:${reqTint(rid)};border-left-color:${reqColor(rid)}`; }

function queuePart(mine, other) {
  const lanes = ["running", "waiting", "finished"];
  const box = el("div", { class: "cp-queue" });
  for (const lane of lanes) {
    const ids = [...mine.entries()].filter(([, v]) => v.split(" ")[0] === lane);
    if (!ids.length) continue;
    box.append(el("span", { class: "cp-lane-h", text: L(`q_${lane}`) }));
    for (const [rid, v] of ids) {
      const extra = v.split(" ")[1];
      const count = extra === "preempted" ? L("preempted") : extra;  // a running request's tokens, a waiting one's status
      box.append(el("span", { class: `cp-chip q-${lane}${extra === "preempted" ? " q-preempted" : ""}${other.get(rid) !== v ? " cp-diff" : ""}`, dataset: { req: rid }, style: reqStyle(rid),
        title: `${rid}: ${L(`q_${lane}`)}${count ? ` · ${count}` : ""}` }, [el("b", { text: rid }), count ? el("span", { class: "cp-count", text: `·${count}` }) : null]));
    }
  }
  if (!box.childNodes.length) box.append(el("span", { class: "muted", text: "–" }));
  return box;
}

function blockPart(mine, other, side, note, stale) {
  const rows = [...mine.entries()];
  const table = el("table", { class: "cp-bt", dataset: { side } });
  const body = el("tbody");
  const otherRows = [...other.keys()];
  rows.forEach(([rid, blocks], r) => {
    const theirs = other.get(rid);
    // the batch row, outlined where the other run puts this request in another row
    const moved = otherRows.includes(rid) && otherRows.indexOf(rid) !== r;
    const tr = el("tr", { dataset: { req: rid } }, [el("td", { class: `cp-row${moved ? " cp-diff" : ""}`, text: String(r) }),
      el("th", { scope: "row", class: "cp-req", style: reqStyle(rid), text: rid })]);
    blocks.forEach((b, c) => tr.append(el("td", { class: !theirs || theirs[c] !== b ? "cp-diff" : "", dataset: { c }, text: String(b) })));
    // stale cells past the row's own blocks: shown struck, as the main view does, and never outlined
    for (const [c, b] of stale.get(rid) || []) {
      tr.append(el("td", { class: "sm-stale", dataset: { c, stale: "1" }, title: L("cmp_stale_cell"), text: String(b) }));
    }
    body.append(tr);
  });
  if (!rows.length) body.append(el("tr", {}, el("td", { class: "muted", text: note || "–" })));
  table.append(body);
  return table;
}

function kvPart(mine, other, side) {
  const box = el("div", { class: "cp-kv", dataset: { side } });
  const differs = (b) => mine[b] !== (other[b] ?? "");
  const shown = Math.min(mine.length, MAX_KV_CELLS);
  for (let b = 0; b < shown; b++) {
    const owner = mine[b];
    // a run of free blocks that the other side leaves free too is one cell ("28–63")
    let end = b;
    while (!owner && end + 1 < shown && !mine[end + 1] && !differs(end + 1) && !differs(b)) end++;
    if (end - b >= 3) {
      box.append(el("span", { class: "cp-blk cp-free-run", dataset: { block: b, last: end }, title: `${b}–${end}: ${L("free")}` },
        [el("small", { text: `${b}–${end}` }), el("b", { text: L("free") })]));
      b = end;
      continue;
    }
    const first = owner.split("+")[0];
    box.append(el("span", { class: `cp-blk${owner ? " used" : ""}${owner.includes("+") ? " shared" : ""}${differs(b) ? " cp-diff" : ""}`,
      dataset: { block: b }, style: owner && !owner.includes("+") ? `background:${reqTint(first)}` : "",
      title: `${L("sel_block")} ${b}: ${owner || L("free")}` }, [el("small", { text: String(b) }), el("b", { text: owner || "·" })]));
  }
  if (mine.length > MAX_KV_CELLS) box.append(el("span", { class: "muted", text: `+${mine.length - MAX_KV_CELLS}` }));
  return box;
}

// runs of tokens: one request, consecutive positions and slots, one difference status
function tokenRuns(tokens, otherSlots, merge) {
  const runs = [];
  for (const tk of tokens) {
    const differs = otherSlots.get(`${tk.req}:${tk.pos}`) !== tk.slot;
    const last = runs[runs.length - 1];
    const joins = last && last.req === tk.req && last.differs === differs &&
      (merge || (tk.pos === last.pos1 + 1 && tk.slot === last.slot1 + 1));
    if (joins) { last.pos1 = tk.pos; last.slot1 = tk.slot; last.n++; }
    else runs.push({ req: tk.req, pos0: tk.pos, pos1: tk.pos, slot0: tk.slot, slot1: tk.slot, n: 1, differs });
  }
  return runs;
}

function tokenPart(mine, other, side) {
  const otherSlots = new Map(other.map((tk) => [`${tk.req}:${tk.pos}`, tk.slot]));
  let runs = tokenRuns(mine, otherSlots, false);
  let merged = false;
  if (runs.length > MAX_TOKEN_CELLS) { runs = tokenRuns(mine, otherSlots, true); merged = true; }
  const span = (a, b) => (a === b ? String(a) : `${a}–${b}`);
  const box = el("div", { class: "cp-tokens", dataset: { side, merged: merged ? "1" : "" } }, [
    el("span", { class: "cp-tok-h" }, [el("code", { class: "t-positions", text: "positions" }), el("code", { class: "t-slot_mapping", text: "slot_mapping" })])]);
  for (const r of runs) {
    box.append(el("span", { class: `cp-tok${r.differs ? " cp-diff" : ""}`, dataset: { req: r.req, n: r.n }, style: reqStyle(r.req),
      title: `${r.req} · ${r.n} ${L("token")}` }, [el("span", { text: span(r.pos0, r.pos1) }), el("b", { text: merged && r.n > 1 ? `${r.slot0}…${r.slot1}` : span(r.slot0, r.slot1) })]));
  }
  if (!runs.length) box.append(el("span", { class: "muted", text: L("cmp_no_tokens") }));
  return box;
}

const MASK_ROWS = 16, MASK_COLS = 40;  // an attn_mask bigger than this shows its top-left corner

// the attention state and attn_mask a side builds (vllm-ascend's; vLLM's runners build neither):
// the state's name and the mask drawn cell by cell (1 = masked, filled), each outlined where the
// other side has another one or none
function attnPart(me, you, side) {
  const st = (t) => (t.scalars.attn_state === undefined || t.scalars.attn_state === null ? null : String(t.scalars.attn_state));
  const mask = (t) => t.arrays.attn_mask || null;
  const key = (m) => (m ? `${m.shape.join("x")}:${m.data.map((row) => row.join("")).join("/")}` : "");
  const mine = mask(me), state2 = st(me);
  const box = el("div", { class: "cp-attn", dataset: { side } }, [
    el("span", { class: `cp-attn-state${state2 !== st(you) ? " cp-diff" : ""}`, dataset: { state: state2 || "" } }, [
      el("code", { text: "attn_state" }), " ", el("b", { text: state2 || L("cmp_attn_none") })]),
    el("span", { class: `cp-attn-mask${key(mine) !== key(mask(you)) ? " cp-diff" : ""}` }, [
      el("code", { text: "attn_mask" }), " ", el("b", { text: mine ? `[${mine.shape.join(" × ")}]` : L("cmp_attn_none") })]),
  ]);
  if (mine && mine.shape.length === 2) {
    const rows = mine.data.slice(0, MASK_ROWS).map((row) => el("tr", {}, row.slice(0, MASK_COLS).map((v) => el("td", { class: v ? "m" : "" }))));
    box.append(el("table", { class: "cp-mask", "aria-label": `attn_mask ${mine.shape.join(" × ")}` }, el("tbody", {}, rows)));
    if (mine.shape[0] > MASK_ROWS || mine.shape[1] > MASK_COLS) {
      box.append(el("span", { class: "muted small-text", text: L("cmp_mask_cap").replace("{r}", Math.min(mine.shape[0], MASK_ROWS)).replace("{c}", Math.min(mine.shape[1], MASK_COLS)) }));
    }
  }
  return box;
}

const hasAttn = (t) => (t.scalars.attn_state !== undefined && t.scalars.attn_state !== null) || Boolean(t.arrays.attn_mask);

// one side's pane; `me` and `you` are {trace, flavor}, `label` its heading
function pane(side, label, me, you) {
  const stale = new Map();
  const mine = { lanes: lanesOf(me.trace), bt: blockRowsOf(me.trace, me.flavor, stale), kv: ownersOf(me.trace), tok: tokensOf(me.trace) };
  const theirs = { lanes: lanesOf(you.trace), bt: blockRowsOf(you.trace, you.flavor), kv: ownersOf(you.trace), tok: tokensOf(you.trace) };
  const T = me.trace.scalars.total_num_scheduled_tokens ?? mine.tok.length;
  return el("section", { class: `cp-pane cp-${side}`, dataset: { side }, "aria-label": label }, [
    el("h3", { class: "cp-head" }, [el("span", { class: "cp-tag", text: side.toUpperCase() }), " ", label]),
    el("h4", { text: L("queue") }), queuePart(mine.lanes, theirs.lanes),
    el("h4", {}, [L("cmp_block_table"), " ", el("code", { class: "t-block_table", text: me.trace.arrays.input_block_tables ? "input_block_tables" : me.trace.arrays.block_table ? "block_table" : "block_tables" })]),
    blockPart(mine.bt, theirs.bt, side, typeof me.trace.scalars.block_tables === "string" && me.trace.scalars.block_tables !== "passed" ? L("bt_none") : "", stale),
    el("h4", { text: `${L("pool")} · ${usableOf(me.trace)} ${L("cmp_blocks")}` }), kvPart(mine.kv, theirs.kv, side),
    el("h4", { text: `${L("cmp_token_row")} · T = ${T}` }), tokenPart(mine.tok, theirs.tok, side),
    ...(hasAttn(me.trace) || hasAttn(you.trace) ? [el("h4", { text: L("cmp_attn") }), attnPart(me.trace, you.trace, side)] : []),
  ]);
}

// both panes into `box`
export function renderPanes(box, a, b) {
  clear(box);
  box.append(pane("a", a.label, a, b), pane("b", b.label, b, a));
  box.dataset.lang = state.lang;
}
