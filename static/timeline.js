// The step bar and what a step is: the timeline of steps (prefill, decode, mixed, idle; preempted
// and finished marks), the step label, the badges of the step (device, prepare_inputs time,
// paged = dense check, attention state) and the chips of what changed since the previous step
// (new, resumed, preempted and finished requests, new blocks, rows moved in the persistent batch).

import { moveLabel } from "./tables.js";
import { $, L, S, rowMoves, state } from "./trace.js";
import { clear, el } from "./views.js";

// one button per step, marked with its kind, preemptions and finishes; onPick(step) opens one
export function buildTimeline(onPick) {
  const box = clear($("timeline"));
  for (const s of S.overview.steps) {
    const marks = [];
    if (s.preempted_req_ids.length) marks.push(el("span", { class: "mark mark-preempt", text: "!", "aria-hidden": "true" }));
    if (s.finished_req_ids.length) marks.push(el("span", { class: "mark mark-finish", text: "✓", "aria-hidden": "true" }));
    const label = `${L("step")} ${s.step}: ${L("kind_" + s.kind)}` +
      (s.preempted_req_ids.length ? `, ${L("preempted")} ${s.preempted_req_ids.join(", ")}` : "");
    box.append(el("button", {
      class: `tl-step kind-${s.kind}`, role: "tab", "aria-label": label, title: label,
      dataset: { step: s.step }, onclick: () => onPick(s.step),
    }, [el("span", { text: s.step }), ...marks]));
  }
}

export function renderTimelineActive() {
  for (const b of $("timeline").children) {
    const on = Number(b.dataset.step) === state.step;
    b.classList.toggle("active", on);
    b.setAttribute("aria-selected", on ? "true" : "false");
    if (on) b.scrollIntoView({ block: "nearest", inline: "nearest" });
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
  const parts = Object.entries(nb).map(([r, b]) => `${r} → [${blockList(b)}]`);
  if (parts.length) box.append(chip("newblocks", L("new_blocks"), parts, 8));
  const moves = rowMoves().map(moveLabel);
  if (moves.length > 4) box.append(chip("moved", L("moved"), moves, 4));
  else for (const m of moves) box.append(el("span", { class: "chip moved", text: `${L("moved")}: ${m}` }));
}
