// Where the student looks (lesson.js): the views a lesson's section talks about -- its own
// `views` (a panel by name, or an array: core/lesson.py), its checkpoint's array, its selection --
// brought onto the first screen together, and marked on the body for present mode (lesson.css).

import { $ } from "./context.js";

// where an array shows in the middle column: its token-table row, its request-table column, its
// line under the request table, its card; else wherever it is labelled
export function arrayNode(a, card) {
  const e = CSS.escape(a), q = (sel) => document.querySelector(sel);
  return q(`#token-table tr[data-array="${e}"]`) || q(`#request-table th[title="${e}"]`) || q(`#req-table [data-array="${e}"]`)
    || card || q(`.panels [data-array="${e}"]:not(.term)`) || q(`[data-array="${e}"]:not(.term)`);
}

// The views a section talks about, as the page's nodes: its own `views` (a panel by name, or an
// array), its checkpoint's array, the view of its selection. Those drawn (a flavour or present
// mode may not show one) are brought onto the first screen together.
export const LOOK_PANELS = {
  queue: "#queue", block_table: "#card-block_table", kv: "#card-kv", attn_mask: "#card-attn_mask",
  slots: "#slotmap", requests: "#request-table", tokens: "#token-table",
};

const cardOf = (a) => $(a === "block_table" || a === "block_tables" ? "card-block_table" : `card-${a}`);
export const viewNode = (name) => (LOOK_PANELS[name] ? document.querySelector(LOOK_PANELS[name]) : arrayNode(name, cardOf(name)));

function selectionNode(sec) {
  const q = (sel) => document.querySelector(sel);
  const s = sec.selection;
  if (s && s.kind === "block") return $("card-block_table") || $("card-kv");
  if (s && s.kind === "token") return q(`#token-table [data-t="${Number(s.id)}"]`) || $("tok-table");
  if (s && (s.kind === "request" || s.kind === "row") && sec.stage !== "update_states") return q("#request-table tr.hl");
  return null;
}

// the panels a section looks at, on the body (data-look): present mode, which keeps some panels
// off its one screen, shows those (lesson.css)
function markLook(sec) {
  const names = new Set(sec.views || []);
  const asked = sec.checkpoint && viewNode(sec.checkpoint.array);
  if (asked && asked.closest(".req-panel")) names.add("requests");
  if (asked && asked.closest("#card-attn_mask")) names.add("attn_mask");
  document.body.dataset.look = [...names].join(" ");
}

function lookNodes(sec) {
  const nodes = [...(sec.views || []).map(viewNode)];
  if (sec.checkpoint) nodes.push(viewNode(sec.checkpoint.array));
  nodes.push(selectionNode(sec));
  return nodes.filter((n, i) => n && n.getClientRects().length && nodes.indexOf(n) === i);
}

// the section's view brought into sight: the lesson panel from its top, the page scrolled so that
// every view the section talks about lies on the screen (at the page's top where they fit under
// it, else centred together; when they cannot all fit, from the first one's top)
export function bringIntoView(sec) {
  const side = $("teach-side");
  if (side) side.scrollTop = 0;
  markLook(sec);
  const nodes = lookNodes(sec);
  if (!nodes.length) { window.scrollTo(0, 0); return; }
  const boxes = nodes.map((n) => n.getBoundingClientRect());
  const top = Math.min(...boxes.map((r) => r.top)) + window.scrollY;
  const bottom = Math.max(...boxes.map((r) => r.bottom)) + window.scrollY;
  const room = window.innerHeight, pad = 6;
  // the page's top (the step bar and all) where they fit under it
  const y = bottom <= room - pad ? 0 : bottom - top <= room - 2 * pad ? top - (room - (bottom - top)) / 2 : boxes[0].top + window.scrollY - pad;
  window.scrollTo(0, Math.max(0, Math.round(y)));
}
