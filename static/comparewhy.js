// What a comparison is about, in one line: the first step where the two runs differ (GET
// /api/compare's steps, read here), and at the step on show, what differs (the tokens scheduled,
// the requests batched, the arrays, the KV blocks' owners) and why (the sentences of the step's
// narration that only one run says, and what the setting B changes does). Every number comes from
// the runs; the settings' explanations name none.

import { L, state } from "./context.js";

// arrays named first when they differ (the ones the compare view shows), the rest after
const SHOWN = ["slot_mapping", "block_table", "input_block_tables", "block_tables", "positions", "seq_lens", "query_start_loc"];

// whether a step's entry shows a difference a reader can see in the panes or the arrays
export function stepDiffers(e) {
  if (!e || !e.in_a || !e.in_b) return Boolean(e);
  const arrays = Object.values(e.arrays || {}).some((d) => d.status === "shape" || d.num_diff > 0);
  const kv = e.kv_cache && (e.kv_cache.owners.length || e.kv_cache.ref_cnt.length);
  const batch = e.batch && (!e.batch.same_order || !e.batch.same_requests);
  return Boolean(arrays || kv || batch || attnDiffers(e));
}

// whether the attention state (vllm-ascend's attn_state) or attn_mask differs: one side builds
// one the other has not, or another one
export function attnDiffers(e) {
  const st = (e.scalars || {}).attn_state;
  const mask = [...(e.only_a || []), ...(e.only_b || [])].includes("attn_mask") || Boolean((e.arrays || {}).attn_mask);
  return Boolean((st && st[0] !== st[1]) || mask);
}

// an attn_mask's shape in words ("5 × 8"), or "none" where the step has none
export function maskShape(t) {
  const m = t && t.arrays.attn_mask;
  return m ? m.shape.join(" × ") : L("cmp_attn_none");
}

// the first step whose entry differs; else the first step where only one run has some array
// (another flavour's own arrays), else step 1
export function firstDiffStep(cmp) {
  const steps = cmp.steps || [];
  const hit = steps.find(stepDiffers);
  if (hit) return hit.step;
  const own = steps.find((e) => (e.only_a || []).length || (e.only_b || []).length);
  return own ? own.step : 1;
}

const fmt = (key, vals) => Object.entries(vals).reduce((s, [k, v]) => s.replaceAll(`{${k}}`, String(v)), L(key));
const list = (xs, max = 8) => (xs.length > max ? `${xs.slice(0, max).join(", ")}, …` : xs.join(", "));

// the facts of one step: [text], each short (`ta`, `tb`: the two steps' traces, for the shapes
// of what only one side has)
export function whatDiffers(e, ta = null, tb = null) {
  if (!e.in_b) return [L("cmp_b_ended")];
  const out = [];
  const sched = (e.scalars || {}).total_num_scheduled_tokens;
  if (sched && sched[0] !== null && sched[1] !== null) out.push(fmt("cmp_w_sched", { a: sched[0], b: sched[1] }));
  const b = e.batch;
  if (b && !b.same_requests) out.push(fmt("cmp_w_reqs", { a: `[${b.req_ids[0].join(", ")}]`, b: `[${b.req_ids[1].join(", ")}]` }));
  else if (b && !b.same_order) out.push(fmt("cmp_w_order", { a: `[${b.req_ids[0].join(", ")}]`, b: `[${b.req_ids[1].join(", ")}]` }));
  const differ = Object.entries(e.arrays || {}).filter(([, d]) => d.status === "shape" || d.num_diff > 0).map(([n]) => n);
  const named = [...SHOWN.filter((n) => differ.includes(n)), ...differ.filter((n) => !SHOWN.includes(n))];
  if (named.length) out.push(`${L("cmp_w_arrays")} ${list(named, 4)}${named.length > 4 ? ` (+${named.length - 4})` : ""}`);
  const kv = e.kv_cache ? e.kv_cache.owners : [];
  if (kv.length) out.push(fmt("cmp_w_kv", { blocks: list(kv) }));
  // the attention state and mask (vllm-ascend builds them, vLLM's runners do not): from the traces
  const st = (e.scalars || {}).attn_state;
  const attn = attnDiffers(e);
  if (st && st[0] !== st[1]) out.push(fmt("cmp_w_attn", { a: st[0] ?? L("cmp_attn_none"), b: st[1] ?? L("cmp_attn_none") }));
  if (attn && ta && tb && maskShape(ta) !== maskShape(tb)) out.push(fmt("cmp_w_mask", { a: maskShape(ta), b: maskShape(tb) }));
  const shown = (xs) => xs.filter((x) => !(attn && ta && tb && x === "attn_mask"));
  const onlyA = shown(e.only_a || []), onlyB = shown(e.only_b || []);
  if (!named.length && (onlyA.length || onlyB.length)) {
    const side = (xs, tag) => (xs.length ? `${fmt("cmp_w_only", { side: tag })} ${list(xs, 4)}` : "");
    out.push(...[side(onlyA, "A"), side(onlyB, "B")].filter(Boolean));
  }
  return out;
}

// the why: the step's sentences only one side says (its own words, from the trace), then what the
// setting B changes does
export function whyDiffers(e, na, nb, pairs, ta = null, tb = null) {
  const nd = e.narration || { only_a: [], only_b: [] };
  // a side's own sentence: why a request waits or was preempted first (rendered from the trace's
  // waiting_causes / preemption_causes), else its first own sentence
  const causal = (it) => it.key === "waiting" || /^preempt:(?!no_admission)/.test(it.key);
  const own = (items, keys, tag) => {
    const mine = items.filter((it) => !it.stage && keys.includes(it.key));
    return [...mine.filter(causal), ...mine.filter((it) => !causal(it))].slice(0, 1)
      .map((it) => `${tag}: ${it.text[state.lang] || it.text.en}`);
  };
  const out = [...own(na, nd.only_a, "A"), ...own(nb, nd.only_b, "B")];
  // the side that is vllm-ascend: its attention state at this step, from its trace
  const asc = [ta, tb].find((t) => t && t.scalars && t.scalars.attn_state);
  for (const [k, v] of pairs || []) {
    if (k === "flavor" && asc && (v === "ascend" || v === "vllm")) {
      out.push(fmt("cmp_why_flavor_ascend", { state: asc.scalars.attn_state, mask: maskShape(asc) }));
      continue;
    }
    const text = L(`cmp_why_${k}`);
    if (text && text !== `cmp_why_${k}`) out.push(text);
  }
  return out;
}
