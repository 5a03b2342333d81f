// The views of the features a step carries only when its scenario turns them on, each with its
// stage's formula (from the trace) and its "why" (the engine's stage text, else the trace's own): the padded
// buffers (query_start_loc, seq_lens, slot_mapping) with the padded part greyed and the kernel that
// reads each part named; the token_indices what-if; speculative decoding's logits rows with accepted
// and rejected drafts; async scheduling's device fill of input_ids; M-RoPE's 3 × T positions beside
// the 1-D ones; nano-vllm's cu_seqlens, last_indices and block_tables; the Ascend attention state
// and the mask each state builds. Also the KV cache tensor's shape on the KV card, a preset's
// notes (one line each) under the run's title, and, for the engine `vllm`, the line that says the
// step was computed by vLLM's own code.

import { getJSON } from "./api.js";
import { serverText, stageText } from "./i18n.js";
import { $, A, L, S, reqOfTokens, scheduledRequests, stageFlavor, state, tokenCount } from "./context.js";
import { clear, el, heatmap } from "./views.js";
import { isRerun } from "./whatif.js";

const fill = (key, vars) => Object.entries(vars).reduce((s, [k, v]) => s.replace(`{${k}}`, v), L(key));

// ------------------------------------------------------------------ helpers
function featCard(id, titleKey, children) {
  return el("section", { class: "card feat-card", id: `feat-${id}`, "aria-label": L(titleKey) },
    [el("header", {}, el("h3", { text: L(titleKey) })), ...children]);
}

// a stage's formula and its "why", when the step ran the stage
function stageBlock(name) {
  const info = S.trace.stages.find((s) => s.name === name);
  if (!info) return [];
  const [, expl] = stageText(state.lang, name, stageFlavor());
  return [el("pre", { class: "formula", dataset: { stage: name }, text: info.formula }),
          el("p", { class: "expl why", dataset: { stage: name }, text: expl || info.why || "" })];
}

// A wide table (a column per token or per buffer entry) shows at most MAX_COLS columns: the first
// and last ones and those that matter (the padding's start, the wrong what-if entries), with a "…"
// column where some are left out; every value is in the export links and the token table.
const MAX_COLS = 48;
export function pickCols(n, keep = []) {
  if (n <= MAX_COLS) return null;  // all of them
  const set = new Set();
  for (let i = 0; i < 16; i++) set.add(i);
  for (let i = n - 8; i < n; i++) set.add(i);
  for (const i of keep) { if (set.size >= MAX_COLS) break; if (i >= 0 && i < n) set.add(i); }
  return [...set].sort((a, b) => a - b);
}

// the cells of columns `cols` (null: every one of n), a gap cell before each jump
function cellsOf(n, cols, cell, gap) {
  const out = [];
  let last = -1;
  for (const i of cols || Array.from({ length: n }, (_, k) => k)) {
    if (i > last + 1) out.push(gap(i - last - 1));
    out.push(cell(i));
    last = i;
  }
  if (last < n - 1) out.push(gap(n - 1 - last));
  return out;
}
const gapTitle = (k) => `${k} ${L("cols_left_out")}`;

// how many table columns the entries [from, to) take, their gaps included
function spanOf(n, cols, from = 0, to = n) {
  if (!cols) return to - from;
  let span = 0, last = -1;
  for (const i of [...cols, n]) {
    if (i > last + 1 && last + 1 >= from && last + 1 < to) span += 1;  // the gap after `last`
    if (i < n && i >= from && i < to) span += 1;
    last = i;
  }
  return span;
}

// one table row: a header cell (an array's name) and its cells; cls(i) / title(i) per cell
function arrayRow(name, data, { cls = () => "", title = () => null, code = true, cols = null } = {}) {
  return el("tr", { dataset: { array: name } }, [el("th", { scope: "row" }, code ? el("code", { text: name }) : name),
    ...cellsOf(data.length, cols, (i) => el("td", { class: cls(i), title: title(i), dataset: { i }, text: String(data[i]) }),
      (k) => el("td", { class: "gap", title: gapTitle(k), text: "…" }))]);
}

function indexRow(n, label = L("index"), cols = null) {
  return el("tr", {}, [el("th", { scope: "col", text: label }),
    ...cellsOf(n, cols, (i) => el("th", { scope: "col", text: i }), (k) => el("th", { scope: "col", class: "gap", title: gapTitle(k), text: "…" }))]);
}

function table(id, rows, cls = "feat-table") {
  return el("div", { class: "scroll-x" }, el("table", { id, class: cls }, rows));
}

// ------------------------------------------------------------------ 1. padding
function paddedBuffer(name, data, valid, realKey, padKey, vars) {
  const pad = data.length - valid;
  const cols = pickCols(data.length, [valid - 2, valid - 1, valid, valid + 1, valid + 2]);
  const parts = el("tr", { class: "parts" }, [el("th", {}),
    el("th", { scope: "colgroup", colspan: spanOf(data.length, cols, 0, valid), class: "part-real", text: `${L("pad_real")}: ${fill(realKey, vars[0])}` })]);
  if (pad > 0) parts.append(el("th", { scope: "colgroup", colspan: spanOf(data.length, cols, valid), class: "part-pad", text: `${L("pad_padded")}: ${fill(padKey, vars[1])}` }));
  return table(`pad-${name}`, [el("thead", {}, [parts, indexRow(data.length, L("index"), cols)]),
    el("tbody", {}, arrayRow(name, data, { cols, cls: (i) => (i >= valid ? "pad" : ""), title: (i) => (i >= valid ? L(padKey).split(":")[0] : null) }))], "feat-table pad-table");
}

function paddingCard() {
  const arr = S.trace.arrays;
  const q = arr.query_start_loc, s = arr.seq_lens, m = arr.slot_mapping;
  if (!q || !q.buffer) return null;
  const qValid = q.valid ?? q.data.length, sValid = s && s.buffer ? (s.valid ?? s.data.length) : 0;
  const mValid = m && m.valid !== undefined ? m.valid : m ? m.data.length : 0;
  const padded = q.buffer.length > qValid || (s && s.buffer && s.buffer.length > sValid) || (m && m.data.length > mValid);
  if (!padded) return null;
  const kids = [];
  kids.push(paddedBuffer("query_start_loc", q.buffer, qValid, "pad_q_real", "pad_q_pad", [{ n: qValid }, {}]), ...stageBlock("query_start_loc"));
  if (s && s.buffer) kids.push(paddedBuffer("seq_lens", s.buffer, sValid, "pad_s_real", "pad_s_pad", [{ n: sValid }, {}]), ...stageBlock("seq_lens"));
  if (m) kids.push(paddedBuffer("slot_mapping", m.data, mValid, "pad_m_real", "pad_m_pad", [{ n: mValid }, { n: m.data.length }]), ...stageBlock("slot_mapping"));
  return featCard("padding", "f_padding", kids);
}

// ------------------------------------------------------------------ 2. token_indices what-if
function whatifCard() {
  const wrongIdx = A("token_indices_whatif");
  if (!wrongIdx) return null;
  const cfg = S.overview.scenario.config;
  const M = cfg.max_model_len, bs = cfg.block_size, K = Math.ceil(M / bs);
  const wrong = A("whatif_wrong");
  const T = tokenCount();
  const mark = (i) => (wrong[i] ? "wrong" : "");
  const nWrong = wrong.filter(Boolean).length;
  const cols = pickCols(T, wrong.flatMap((w, i) => (w ? [i] : [])));
  const span = spanOf(T, cols) + 1;
  const rows = [
    el("thead", {}, indexRow(T, L("token"), cols)),
    el("tbody", {}, [
      arrayRow("positions", A("positions"), { cols }), arrayRow("req_indices", A("req_indices"), { cols }),
      el("tr", { class: "group" }, el("th", { colspan: span, text: fill("whatif_right", { m: M }) })),
      arrayRow("token_indices", A("token_indices"), { cols, cls: (i) => (wrong[i] ? "right" : "") }),
      arrayRow("input_ids", A("input_ids"), { cols, cls: (i) => (wrong[i] ? "right" : "") }),
      el("tr", { class: "group" }, el("th", { colspan: span, text: fill("whatif_wrong", { k: K * bs }) })),
      arrayRow("token_indices_whatif", wrongIdx, { cols, cls: mark }),
      arrayRow("input_ids_whatif", A("input_ids_whatif").map((v, i) => (wrong[i] ? `✗ ${v}` : v)), { cols, cls: mark, title: (i) => (wrong[i] ? "whatif_wrong" : null) }),
    ]),
  ];
  return featCard("whatif", "f_whatif", [table("whatif-table", rows),
    el("p", { class: "count", text: nWrong ? fill("whatif_count", { n: nWrong, t: T }) : L("whatif_none") }),
    ...stageBlock("token_indices"), ...stageBlock("token_indices_whatif")]);
}

// ------------------------------------------------------------------ 3. speculative decoding
function specCard() {
  const nDraft = A("num_draft_tokens");
  if (!nDraft) return null;
  const tr = S.trace;
  if (tr.batch.slots) return specCardV2(nDraft);  // Model Runner V2: drafts on the worker
  const ids = tr.batch.req_ids;
  const cuDraft = A("cu_num_draft_tokens"), nSampled = A("num_sampled_tokens"), cuSampled = A("cu_num_sampled_tokens");
  const logits = A("logits_indices"), target = new Set(A("target_logits_indices")), bonus = new Set(A("bonus_logits_indices"));
  const drafts = A("draft_token_ids") || [], argmax = A("target_token_ids"), nAcc = A("num_accepted_tokens"), nRej = A("num_rejected_tokens");
  const fwd = tr.forward || {};
  const generated = fwd.generated_token_ids || {};
  const scheduled = tr.scheduler.scheduled_spec_decode_tokens || {};
  // per request: its per-request arrays; then per logits row its request, kind, draft and verdict
  const reqRows = ids.map((rid, r) => el("tr", { dataset: { r } }, [el("td", { text: rid }),
    ...[nDraft[r], cuDraft[r], nSampled[r], `[${(scheduled[rid] || []).join(", ")}]`, nAcc ? nAcc[r] : "", nRej ? nRej[r] : "",
        generated[rid] ? `[${generated[rid].join(", ")}]` : ""].map((v) => el("td", { text: String(v) }))]));
  const heads = ["num_draft_tokens", "cu_num_draft_tokens", "num_sampled_tokens", `${L("drafts")} (scheduler)`, "num_accepted_tokens", "num_rejected_tokens", `${L("generated")} (forward)`];
  const reqTable = table("spec-requests", [el("thead", {}, el("tr", {}, [el("th", { text: L("req") }), ...heads.map((h) => el("th", {}, el("code", { text: h })))])), el("tbody", {}, reqRows)], "feat-table req-table");
  const L_ = logits.length;
  const reqOf = [], kind = [], draft = [], verdict = [];
  ids.forEach((rid, r) => {
    const first = cuSampled[r] - nSampled[r], d0 = cuDraft[r] - nDraft[r];
    for (let k = 0; k < nSampled[r]; k++) {
      const j = first + k;
      reqOf[j] = rid;
      kind[j] = bonus.has(j) ? "bonus" : target.has(j) ? "target" : "";
      draft[j] = k < nDraft[r] ? drafts[d0 + k] : "";
      if (!nAcc) verdict[j] = "";
      else if (k === nDraft[r]) verdict[j] = nAcc[r] === nDraft[r] ? "bonus_used" : "bonus_unused";
      else verdict[j] = k < nAcc[r] ? "accepted" : k === nAcc[r] ? "rejected" : "not_checked";
    }
  });
  const vcls = { accepted: "ok", rejected: "bad", not_checked: "bad dim", bonus_used: "ok", bonus_unused: "dim", "": "" };
  const cols = pickCols(L_, verdict.flatMap((v, j) => (v === "rejected" ? [j] : [])));
  const strip = table("spec-strip", [el("thead", {}, indexRow(L_, L("logits_row"), cols)), el("tbody", {}, [
    arrayRow("logits_indices", logits, { cols, cls: (j) => kind[j] }),
    arrayRow(L("req"), reqOf, { cols, cls: (j) => kind[j], code: false }),
    arrayRow(L("kind"), kind.map((k) => (k ? L(k) : "")), { cols, cls: (j) => kind[j], code: false }),
    arrayRow(`${L("draft")} (draft_token_ids)`, draft, { cols, cls: (j) => kind[j], code: false }),
    arrayRow("target_token_ids", argmax || [], { cols, cls: (j) => kind[j] }),
    arrayRow(L("verdict"), verdict.map((v) => (v ? L(v) : "")), { cols, cls: (j) => `${kind[j]} ${vcls[verdict[j]]}`, code: false }),
  ])], "feat-table spec-strip");
  const lines = ["target_logits_indices", "bonus_logits_indices"].map((n) => el("p", { class: "value-line", dataset: { array: n } }, [el("code", { text: n }), ` = [${A(n).join(", ")}]`]));
  return featCard("spec", "f_spec", [reqTable, ...lines, strip, el("p", { class: "muted", text: L("spec_legend") }),
    ...stageBlock("spec_decode_metadata"), ...stageBlock("rejection_sampler")]);
}

// Model Runner V2's drafts: per request the drafts it verifies and what verification kept; per
// logits row its slot (expanded_idx_mapping), place (expanded_local_pos), draft and target
function specCardV2(nDraft) {
  const tr = S.trace;
  const ids = tr.batch.req_ids;
  const cu = A("cu_num_logits"), nSampled = A("num_sampled") || [], nRej = A("num_rejected") || [];
  const logits = A("logits_indices"), slotOf = A("expanded_idx_mapping") || [], local = A("expanded_local_pos") || [];
  const drafts = A("draft_sampled") || [], argmax = A("target_token_ids") || [];
  const generated = (tr.forward || {}).generated_token_ids || {};
  const scheduled = tr.scheduler.scheduled_spec_decode_tokens || {};
  const reqRows = ids.map((rid, r) => el("tr", { dataset: { r } }, [el("td", { text: rid }),
    ...[nDraft[r], `[${(scheduled[rid] || []).join(", ")}]`, `${cu[r]}..${cu[r + 1] - 1}`, nSampled[r] ?? "", nRej[r] ?? "",
        generated[rid] ? `[${generated[rid].join(", ")}]` : ""].map((v) => el("td", { text: String(v) }))]));
  const heads = ["num_draft_tokens", `${L("drafts")} (scheduler)`, "cu_num_logits", "num_sampled", "num_rejected", `${L("generated")} (forward)`];
  const reqTable = table("spec-requests", [el("thead", {}, el("tr", {}, [el("th", { text: L("req") }), ...heads.map((h) => el("th", {}, el("code", { text: h })))])), el("tbody", {}, reqRows)], "feat-table req-table");
  const reqOf = [], verdict = [];
  ids.forEach((rid, r) => {
    for (let j = cu[r]; j < cu[r + 1]; j++) {
      const k = j - cu[r];  // logits row k verifies the draft at k + 1; the last row is the bonus
      reqOf[j] = rid;
      if (!nSampled.length || nSampled[r] === 0) verdict[j] = "";
      else if (k === 0) verdict[j] = "";
      else verdict[j] = k < nSampled[r] ? "accepted" : k === nSampled[r] ? "rejected" : "not_checked";
    }
  });
  const vcls = { accepted: "ok", rejected: "bad", not_checked: "bad dim", "": "" };
  const L_ = logits.length;
  const cols = pickCols(L_, verdict.flatMap((v, j) => (v === "rejected" ? [j] : [])));
  const strip = table("spec-strip", [el("thead", {}, indexRow(L_, L("logits_row"), cols)), el("tbody", {}, [
    arrayRow("logits_indices", logits, { cols }),
    arrayRow(L("req"), reqOf, { cols, code: false }),
    arrayRow("expanded_idx_mapping", slotOf, { cols }),
    arrayRow("expanded_local_pos", local, { cols }),
    arrayRow("draft_sampled", drafts, { cols }),
    arrayRow("target_token_ids", argmax, { cols }),
    arrayRow(L("verdict"), verdict.map((v) => (v ? L(v) : "")), { cols, cls: (j) => vcls[verdict[j]], code: false }),
  ])], "feat-table spec-strip");
  return featCard("spec", "f_spec", [reqTable, strip, ...stageBlock("num_logits"), ...stageBlock("rejection_sampler")]);
}

// ------------------------------------------------------------------ 4. async scheduling
function asyncCard() {
  const dev = A("input_ids_device");
  if (!dev) return null;
  const T = tokenCount();
  const prevSampled = A("prev_sampled_token_ids") || [];
  const flat = A("sample_flattened_indices") || [], common = A("prev_common_req_indices") || [];
  const prevIds = S.prev && S.prev.batch.req_ids.length === prevSampled.length ? S.prev.batch.req_ids : prevSampled.map((_, k) => `#${k}`);
  const filledTok = new Map(flat.map((t, k) => [t, k])), fromRow = new Map(common.map((p, k) => [p, k]));
  const ids = S.trace.batch.req_ids, reqOf = reqOfTokens();
  const prevTable = table("async-prev", [el("thead", {}, indexRow(prevSampled.length, L("row"))), el("tbody", {}, [
    arrayRow(L("prev_batch"), prevIds, { code: false }),
    arrayRow("prev_sampled_token_ids", prevSampled, { cls: (k) => (fromRow.has(k) ? "linked-src" : "dim"), title: (k) => (fromRow.has(k) ? `→ input_ids_device[${flat[fromRow.get(k)]}]` : null) }),
  ])], "feat-table");
  const cols = pickCols(T, flat);
  const tokTable = table("async-tokens", [el("thead", {}, indexRow(T, L("token"), cols)), el("tbody", {}, [
    arrayRow(L("req"), reqOf.slice(0, T).map((r) => ids[r]), { cols, code: false }),
    arrayRow("input_ids", A("input_ids").slice(0, T), { cols, cls: (i) => (filledTok.has(i) ? "placeholder" : ""), title: (i) => (filledTok.has(i) ? L("placeholder") : null) }),
    arrayRow("input_ids_device", dev.slice(0, T), { cols, cls: (i) => (filledTok.has(i) ? "filled" : ""), title: (i) => (filledTok.has(i) ? L("filled") : null) }),
  ])], "feat-table");
  const links = el("ul", { class: "links", id: "async-links" }, flat.map((t, k) => el("li", { dataset: { k } }, el("code", {
    text: `prev_sampled_token_ids[${common[k]}] = ${prevSampled[common[k]]} → input_ids_device[${t}]   (${L("req")} ${prevIds[common[k]]})` }))));
  const mode = S.trace.scalars.input_ids_copy;
  const modeKey = mode === "one_copy" ? "async_one_copy" : mode === "scatter" ? "async_scatter" : "async_cpu";
  return featCard("async", "f_async", [el("p", { class: `mode mode-${mode}`, dataset: { mode }, text: `input_ids_copy = ${mode}: ${L(modeKey)}` }),
    prevTable, links, tokTable, ...stageBlock("prepare_input_ids")]);
}

// ------------------------------------------------------------------ 5. M-RoPE
function imageTokens() {
  const T = tokenCount(), pos = A("positions"), reqOf = reqOfTokens(), ids = S.trace.batch.req_ids;
  const byId = {};
  for (const r of scheduledRequests(S.overview.scenario)) byId[r.id] = r.image;
  const out = [];
  for (let i = 0; i < T; i++) {
    const im = byId[ids[reqOf[i]]];
    out.push(Boolean(im) && pos[i] >= im.offset && pos[i] < im.offset + im.t * im.h * im.w);
  }
  return out;
}

function mropeCard() {
  const m = A("mrope_positions");
  if (!m) return null;
  const T = m[0].length;
  const img = imageTokens();
  const cls = (i) => (img[i] ? "img" : "");
  const title = (i) => (img[i] ? L("image_token") : null);
  const cols = pickCols(T, img.flatMap((v, i) => (v ? [i] : [])));
  const rows = [el("thead", {}, indexRow(T, L("token"), cols)), el("tbody", {}, [
    arrayRow("positions", A("positions").slice(0, T), { cols, cls, title }),
    ...["t", "h", "w"].map((axis, k) => arrayRow(`mrope_positions[${k}] (${axis})`, m[k], { cols, cls, title })),
  ])];
  return featCard("mrope", "f_mrope", [el("div", { id: "hm-mrope", class: "heatmap" }), table("mrope-table", rows),
    el("p", { class: "muted", text: L("mrope_legend") }), ...stageBlock("mrope_positions")]);
}

function drawMrope() {
  const m = A("mrope_positions"), div = $("hm-mrope");
  if (!m || !div) return;
  const z = [A("positions").slice(0, m[0].length), ...m];
  heatmap(div, z, { title: "positions | mrope_positions (t, h, w)", xTitle: L("token"), hover: "%{y}, token %{x}: %{z}",
    yTickvals: [0, 1, 2, 3], yTicktext: ["positions", "t", "h", "w"], height: 200 });
}

// ------------------------------------------------------------------ 6. nano-vllm and Ascend
function nanoCard() {
  if (S.overview.flavor !== "nanovllm") return null;
  const tr = S.trace;
  const names = ["cu_seqlens_q", "cu_seqlens_k", "last_indices", "context_lens"].filter((n) => tr.arrays[n]);
  const rows = names.map((n) => el("p", { class: "value-line", dataset: { array: n } }, [el("code", { text: n }), ` = [${A(n).join(", ")}]`]));
  const bt = tr.scalars.block_tables;
  const btLine = el("p", { class: `bt-status ${bt === "passed" ? "ok" : ""}`, text: bt === "passed" ? `${L("bt_passed")}: [${(A("block_tables") || []).map((r) => `[${r.join(", ")}]`).join(", ")}]` : L("bt_none") });
  const hasPad = (A("block_tables") || []).some((r) => r.includes(-1));
  return featCard("nano", "f_nano", [...rows, btLine, hasPad ? el("p", { class: "muted", text: L("bt_pad") }) : null,
    ...["cu_seqlens_q", "cu_seqlens_k", "last_indices", "block_tables"].flatMap((n) => (tr.arrays[n] || n === "block_tables" ? stageBlock(n) : []))]);
}

function ascendCard() {
  const st = S.trace.scalars.attn_state;
  if (!st || S.overview.flavor !== "ascend") return null;
  const states = ["PrefillNoCache", "DecodeOnly", "SpecDecoding", "ChunkedPrefill", "PrefillCacheHit"];
  const m = A("attn_mask");
  const body = states.map((name, i) => {
    const [when, mask] = L(`as_${name}`);
    const cur = name === st;
    return el("tr", { class: cur ? "current" : "", "aria-current": cur ? "true" : null, dataset: { state: name } },
      [el("td", { text: i + 1 }), el("th", { scope: "row" }, el("code", { text: name })), el("td", { text: when }),
       el("td", { text: cur && m ? `${mask}  →  attn_mask ${m.length} × ${m[0].length}` : mask })]);
  });
  const tbl = table("ascend-states", [el("thead", {}, el("tr", {}, ["#", L("as_state"), L("as_when"), L("as_mask")].map((h) => el("th", { text: h })))), el("tbody", {}, body)], "feat-table req-table");
  const head = S.trace.scalars.attn_mask_head;
  return featCard("ascend", "f_ascend", [el("p", { class: "value-line" }, [el("code", { text: "attn_state" }), ` = ${st}`,
    S.trace.scalars.attn_state_source ? ` (${S.trace.scalars.attn_state_source})` : ""]), tbl,
    head ? el("p", { class: "muted", text: `HEAD: ${headText(head)}` }) : null, el("p", { class: "expl", text: L("as_decode_claim") }),
    el("pre", { class: "formula", text: (S.trace.stages.find((s) => s.name === "attn_mask") || {}).formula || "" })]);
}

// ------------------------------------------------------------------ 7. KV shape and notes
function kvShape() {
  const card = $("card-kv"), kv = S.trace.kv_cache;
  if (!card || !kv || !kv.shape) return;
  let line = $("kv-shape");
  if (!line) { line = el("p", { id: "kv-shape", class: "kv-shape" }); card.querySelector("header").after(line); }
  clear(line).append(`${L("kv_shape")}: `, el("code", { text: `[${kv.shape.join(", ")}]` }),
    kv.num_layers ? ` × ${kv.num_layers} ${L("kv_layers")}` : "", kv.layout ? el("span", { class: "muted", text: `  ${layoutText(kv.layout)}` }) : "");
}

// the server's layout line, its words in the page's language (the shape is code, kept as it is)
function layoutText(s) {
  return s.replace(" per layer (K and V)", ` ${L("kv_per_layer")}`).replace(" (one tensor, all layers)", ` ${L("kv_one_tensor")}`);
}

// every view of this step that its trace carries; called after the system-level cards are drawn
export function renderFeatures() {
  const box = $("features");
  if (!box || !S.trace) return;
  const cards = S.trace.idle ? [] : [whatifCard(), specCard(), asyncCard(), mropeCard(), nanoCard(), ascendCard(), paddingCard()].filter(Boolean);
  // a heatmap keeps its node across steps, as the system cards' heatmaps do: its canvases and its
  // measured width (a new node's width would be read from a page laid out again for it)
  const keep = [...box.querySelectorAll(".heatmap[id]")];
  clear(box).append(...cards);
  for (const old of keep) { const fresh = $(old.id); if (fresh) fresh.replaceWith(old); }
  $("features-panel").hidden = !cards.length;
  drawMrope();
  kvShape();
  engineMark();
}

// The engine `vllm` (a scenario's "engine": "vllm"): each of its steps says it was computed by vLLM's
// own code (forward.engine, e.g. "vllm 0.33.0"), what of it is vLLM's and what pagedviz's, and the
// arrays where pagedviz's replay computed something else (forward.vllm_differences)
function engineMark() {
  const box = $("engine-mark");
  if (!box) return;
  const fw = (S.trace && S.trace.forward) || {};
  const engine = typeof fw.engine === "string" && fw.engine.startsWith("vllm ") ? fw.engine : "";
  box.hidden = !engine;
  if (!engine) return clear(box);
  const version = `vLLM ${engine.slice(5)}`;
  const diffs = fw.vllm_differences || {};
  const names = Object.keys(diffs);
  clear(box).append(el("strong", { text: fill("engine_vllm", { version }) }), " ", L("engine_vllm_parts"),
    names.length ? el("span", { class: "warn engine-diff", title: names.map((n) => `${n}: ${diffs[n]}`).join("\n"),
      text: ` ${fill("engine_vllm_diff", { names: names.join(", ") })}` }) : "");
}

// vllm-ascend's HEAD mask, as the trace says it (core/flavors/ascend.py), in the page's language
function headText(head) {
  if (state.lang !== "zh" || !head.startsWith("triu(ones(2048, 2048), 1) int8")) return head;
  return L("as_head_mask") + (head.includes("_npu_paged_attention") ? L("as_head_decode") : "");
}

// the preset's notes (say, where its document has a typo), in the page's language
let zhPresets = null;

// a scenario's title in the page's language: a preset's own Chinese title when the scenario is
// that preset's (same name and title), else the scenario's title or name as given
export async function localTitleOf(sc) {
  const own = sc.title || sc.name;
  if (state.lang !== "zh") return own;
  if (!zhPresets) zhPresets = Promise.all([getJSON("/api/presets"), getJSON("/api/presets?lang=zh")]);
  const [en, zh] = await zhPresets;
  const i = en.ok && zh.ok ? en.data.findIndex((p) => p.id === sc.name && p.title === sc.title) : -1;
  return i >= 0 ? zh.data[i].title : own;
}
export async function showNotes(sc) {
  const box = $("preset-notes");
  if (!box) return;
  let notes = sc.notes || [];
  if (state.lang === "zh" && notes.length) {
    if (!zhPresets) zhPresets = Promise.all([getJSON("/api/presets"), getJSON("/api/presets?lang=zh")]);
    const [en, zh] = await zhPresets;
    const i = en.ok && zh.ok ? en.data.findIndex((p) => p.id === sc.name && JSON.stringify(p.notes) === JSON.stringify(notes)) : -1;
    if (i >= 0 && zh.data[i].notes && zh.data[i].notes.length) notes = zh.data[i].notes;
    else notes = notes.map((n) => serverText("zh", n));  // an imported recording's notes (core/replay.py)
  }
  // a what-if rerun carries its baseline's notes, which its changed settings may make false: they
  // are marked as the baseline's
  const rerun = isRerun(sc);
  const label = rerun ? `${L("note")} (${L("baseline")}): ` : `${L("note")}: `;
  clear(box).append(...notes.map((n) => el("li", { title: rerun ? `${L("wi_note_baseline")}. ${n}` : n, class: rerun ? "note-baseline" : "" },
    [el("strong", { text: label }), n])));
  box.hidden = !notes.length;
}
