// The step bar and what a step is: the timeline of steps (prefill, decode, mixed, idle; preempted
// and finished marks), the step label, the badges of the step (device, prepare_inputs time,
// paged = dense check, attention state) and the chips of what changed since the previous step
// (new, resumed, preempted and finished requests, new blocks, rows moved in the persistent batch).

import { perGroup } from "./groups.js";
import { moveLabel } from "./tables.js";
import { $, A, L, S, poolBlocks, reqColor, reqTint, rowMoves, scenarioReqIds, scheduledRequests, state } from "./context.js";
import { clear, el } from "./views.js";

// one button per step, marked with its kind, preemptions and finishes; onPick(step) opens one
export function buildTimeline(onPick) {
  const box = clear($("timeline"));
  const cfg = S.overview.scenario.config || {};
  for (const s of S.overview.steps) {
    const marks = [];
    if (s.preempted_req_ids.length) marks.push(el("span", { class: "mark mark-preempt", text: "!", "aria-hidden": "true" }));
    if (s.finished_req_ids.length) marks.push(el("span", { class: "mark mark-finish", text: "✓", "aria-hidden": "true" }));
    const label = `${L("step")} ${s.step}: ${L("kind_" + s.kind)}` +
      (s.preempted_req_ids.length ? `, ${L("preempted")} ${s.preempted_req_ids.join(", ")}` : "");
    box.append(el("button", {
      class: `tl-step kind-${s.kind}`, role: "tab", "aria-label": label, title: label,
      dataset: { step: s.step }, onclick: () => onPick(s.step),
    }, [el("span", { text: s.step }), ...marks, stepBars(s, cfg)]));
  }
  renderTimelineLegend();
}

// two tiny bars under a step: tokens scheduled of the budget, KV blocks in use of the pool
function stepBars(s, cfg) {
  const budget = cfg.max_num_batched_tokens || 0, pool = s.kv_pool_blocks || poolBlocks(null);
  const bar = (cls, n, of, label) => {
    const f = of ? Math.min(1, n / of) : 0;
    return el("span", { class: `tl-bar ${cls}`, title: `${label}: ${n} / ${of}`, dataset: { n, of } },
      [el("span", { class: "tl-fill", style: `width:${(f * 100).toFixed(1)}%` })]);
  };
  return el("span", { class: "tl-bars", "aria-hidden": "true" }, [
    bar("tl-budget", s.num_tokens, budget, L("budget_bar")),
    bar("tl-pool", s.kv_blocks_in_use || 0, pool, L("pool_bar")),
  ]);
}

// what the timeline's colours and marks mean
function renderTimelineLegend() {
  const box = clear($("tl-legend"));
  for (const kind of ["prefill", "decode", "mixed", "idle"]) {
    box.append(el("span", { class: "tl-key" }, [el("span", { class: `tl-swatch kind-${kind}`, "aria-hidden": "true" }), L("kind_" + kind)]));
  }
  box.append(el("span", { class: "tl-key", text: L("tl_legend_marks") }));
  box.append(el("span", { class: "tl-key" }, [el("span", { class: "tl-bar tl-budget tl-demo", "aria-hidden": "true" }, [el("span", { class: "tl-fill" })]), L("budget_bar")]));
  box.append(el("span", { class: "tl-key" }, [el("span", { class: "tl-bar tl-pool tl-demo", "aria-hidden": "true" }, [el("span", { class: "tl-fill" })]), L("pool_bar")]));
}

function revealInStrip(b) {
  const strip = $("timeline");
  const bx = b.getBoundingClientRect(), sx = strip.getBoundingClientRect();
  if (bx.left < sx.left) strip.scrollLeft -= sx.left - bx.left + 4;
  else if (bx.right > sx.right) strip.scrollLeft += bx.right - sx.right + 4;
}

export function renderTimelineActive() {
  for (const b of $("timeline").children) {
    const on = Number(b.dataset.step) === state.step;
    b.classList.toggle("active", on);
    b.setAttribute("aria-selected", on ? "true" : "false");
    // the strip scrolls sideways to the step (the page itself stays where the reader is), in the
    // next frame, with that frame's layout rather than one forced now
    if (on) requestAnimationFrame(() => revealInStrip(b));
  }
  $("step-label").textContent = `${L("step")} ${state.step} / ${S.overview.num_steps}`;
}

export function renderBadges() {
  const tr = S.trace;
  const box = clear($("badges"));
  box.append(el("span", { class: "badge", text: `${L("device")}: ${tr.forward.device || S.created.device}` }));
  const prep = tr.timing_us.prepare_inputs || 0;
  box.append(el("span", { class: "badge", text: `${L("prepare_us")}: ${prep.toFixed(0)} µs` }));
  const diff = tr.forward.paged_vs_dense_max_abs_diff;
  if (diff !== undefined) {
    const ok = diff < 1e-4;
    box.append(el("span", { class: `badge ${ok ? "ok" : "bad"}`, id: "badge-dense",
      text: `${L("paged_dense")} ${ok ? "✓" : "✗"} (${Number(diff).toExponential(1)})` }));
  }
  if (tr.forward.slot_mapping_device_matches_cpu !== undefined) {
    const ok = tr.forward.slot_mapping_device_matches_cpu;
    box.append(el("span", { class: `badge ${ok ? "ok" : "bad"}`, text: `slot_mapping cpu = ${tr.forward.device} ${ok ? "✓" : "✗"}` }));
  }
  const k = S.trace.scalars.attn_state;
  if (k) box.append(el("span", { class: "badge", text: `attn_state: ${k}` }));
}

// A change chip lists at most `max` items; the whole list is in its tooltip.
function chip(cls, label, items, max = 12) {
  const full = `${label}: ${items.join(", ")}`;
  const shown = items.length > max ? `${items.slice(0, max).join(", ")} … (+${items.length - max} ${L("more")})` : items.join(", ");
  return el("span", { class: `chip ${cls}`, title: full }, [`${label}: `, shown]);
}

// block ids as listed; a long list writes its runs of consecutive ids as first–last
function blockList(ids) {
  if (ids.length <= 8) return ids.join(", ");
  const out = [];
  for (let i = 0; i < ids.length;) {
    let j = i;
    while (j + 1 < ids.length && ids[j + 1] === ids[j] + 1) j++;
    if (j - i >= 2) out.push(`${ids[i]}–${ids[j]}`);
    else for (let k = i; k <= j; k++) out.push(String(ids[k]));
    i = j + 1;
  }
  return out.join(", ");
}

export function renderChanges() {
  const sch = S.trace.scheduler;
  const box = clear($("changes"));
  if (S.trace.idle) box.append(el("p", { class: "idle-note", text: L("idle_step") }));
  if (sch.new_req_ids && sch.new_req_ids.length) box.append(chip("new", L("new_reqs"), sch.new_req_ids));
  if (sch.resumed_req_ids && sch.resumed_req_ids.length) box.append(chip("resumed", L("resumed"), sch.resumed_req_ids));
  if (sch.preempted_req_ids && sch.preempted_req_ids.length) box.append(chip("preempted", L("preempted"), sch.preempted_req_ids));
  if (sch.finished_req_ids && sch.finished_req_ids.length) box.append(chip("finished", L("finished"), sch.finished_req_ids));
  const nb = sch.new_block_ids || {};
  // with several KV cache groups, one list per group: "a → [17] · [18]"
  const parts = Object.entries(nb).map(([r, b]) => `${r} → ${perGroup(b).map((g) => `[${blockList(g)}]`).join(" · ")}`);
  if (parts.length) box.append(chip("newblocks", L("new_blocks"), parts, 8));
  const moves = rowMoves().map(moveLabel);
  if (moves.length > 4) box.append(chip("moved", L("moved"), moves, 4));
  else for (const m of moves) box.append(el("span", { class: "chip moved", text: `${L("moved")}: ${m}` }));
}

// ------------------------------------------------------------------ queue, budget and pool
// Where every request of the scenario stands at this step, in vLLM's own queues: `waiting` (head
// first, as the scheduler pops it) and `running`, then the requests not arrived yet and those
// finished; the scheduler's token budget and the KV pool's occupancy. vLLM 0.33 has no queue of
// preempted requests: _preempt_request sets the request's status to PREEMPTED and puts it back at
// the front of `waiting` (scheduler.py), so a preempted request is a chip of the waiting lane,
// marked "preempted", until it is scheduled again. A running request's chip carries a bar of its
// tokens: computed before this step, scheduled in it, still to come. Chips select their request
// (onPick(rid)); the focused request's chip is marked.
const LANE_MAX = 24;
const VLLM_QUEUES = new Set(["waiting", "running"]);

// the requests whose status is PREEMPTED after this step: preempted, not scheduled since (this
// step's own preemptions from its trace: a streaming run's overview may not have its steps yet)
function preemptedBy(step) {
  const out = new Set();
  for (const s of S.overview.steps) {
    if (s.step > step) break;
    for (const r of [...(s.new_req_ids || []), ...(s.resumed_req_ids || [])]) out.delete(String(r));
    for (const r of s.preempted_req_ids || []) out.add(String(r));
  }
  for (const r of S.trace.scheduler.preempted_req_ids || []) out.add(String(r));
  return out;
}

// the focused request's chip, marked (the queue is drawn per step; the focus changes between)
export function markQueueFocus() {
  document.querySelectorAll("#queue .qchip").forEach((c) => c.classList.toggle("focus", c.dataset.req === state.req));
}

function finishedBy(step) {
  const out = [];
  for (const s of S.overview.steps) if (s.step <= step) out.push(...s.finished_req_ids.map(String));
  return out;
}

function bar(cls, used, total, label) {
  const pct = total ? Math.min(100, (100 * used) / total) : 0;
  return el("div", { class: `qbar ${cls}`, role: "img", "aria-label": label, title: label }, [
    el("span", { class: "qbar-fill", style: `width:${pct.toFixed(1)}%` }), el("span", { class: "qbar-text", text: label })]);
}

export function renderQueue(onPick) {
  const box = clear($("queue"));
  const tr = S.trace, sch = tr.scheduler, cfg = S.overview.scenario.config;
  const arrival = new Map(scheduledRequests(S.overview.scenario).map((r) => [String(r.id), r.arrival_step || 0]));
  const preempted = preemptedBy(state.step);
  const finished = finishedBy(state.step);
  const running = tr.batch.req_ids.map(String);
  const waiting = (sch.waiting_req_ids || []).map(String);
  const arriving = scenarioReqIds().filter((r) => arrival.get(r) > state.step);
  const computed = A("num_computed_tokens_cpu"), scheduled = A("num_scheduled_tokens"), total = A("num_tokens");
  const maxLen = cfg.max_model_len;
  const chip = (rid, lane) => {
    const r = running.indexOf(rid);
    const was = lane === "waiting" && preempted.has(rid);
    const kids = [el("span", { text: rid }), was ? el("small", { class: "q-status", text: L("preempted") }) : null];
    if (lane === "running" && computed && scheduled && r >= 0) {
      const w = (n) => `${((100 * n) / maxLen).toFixed(1)}%`;
      const rest = Math.max(0, (total ? total[r] : 0) - computed[r] - scheduled[r]);
      kids.push(el("span", { class: "tokbar", "aria-hidden": "true" }, [
        el("span", { class: "tb-computed", style: `width:${w(computed[r])}` }), el("span", { class: "tb-scheduled", style: `width:${w(scheduled[r])}` }),
        el("span", { class: "tb-rest", style: `width:${w(rest)}` })]));
    }
    return el("button", { class: `qchip q-${lane}${was ? " q-preempted" : ""}${rid === state.req ? " focus" : ""}`, dataset: { req: rid },
      style: `background:${reqTint(rid)};border-left-color:${reqColor(rid)}`,
      title: `${rid}: ${L("q_" + lane)}${was ? ` · ${L("preempted")}` : ""}` + (r >= 0 && computed ? ` · computed ${computed[r]}, scheduled ${scheduled[r]}` : ""),
      onclick: () => onPick(rid) }, kids);
  };
  const lane = (key, ids) => {
    const shown = ids.slice(0, LANE_MAX).map((rid) => chip(rid, key));
    if (ids.length > LANE_MAX) shown.push(el("span", { class: "muted", text: `+${ids.length - LANE_MAX} ${L("more")}` }));
    // vLLM's queues by vLLM's names (in 中文 beside the word)
    const name = VLLM_QUEUES.has(key) ? (state.lang === "en" ? [el("code", { text: key })] : [`${L("q_" + key)} `, el("code", { text: key })]) : [L("q_" + key)];
    return el("div", { class: `qlane lane-${key}`, dataset: { count: ids.length } }, [el("span", { class: "qlane-h" }, [...name, ` (${ids.length})`]), ...shown]);
  };
  box.append(el("h2", { id: "queue-h", class: "visually-hidden", text: L("queue") }));
  const lanes = el("div", { class: "qlanes" }, [lane("waiting", waiting), lane("running", running)]);
  if (arriving.length) lanes.append(lane("arriving", arriving));
  lanes.append(lane("finished", finished));
  const used = tr.kv_cache && tr.kv_cache.ref_cnt ? tr.kv_cache.ref_cnt.filter((c) => c > 0).length : 0;
  const usable = tr.kv_cache ? poolBlocks(tr.kv_cache) : 0;
  const spent = tr.scalars.total_num_scheduled_tokens || 0;
  box.append(lanes, el("div", { class: "qbars" }, [
    bar("budget", spent, cfg.max_num_batched_tokens, `${L("budget")} ${spent} / ${cfg.max_num_batched_tokens}`),
    bar("pool", used, usable, `${L("pool")} ${used} / ${usable} ${L("blocks_used")}`)]));
}
