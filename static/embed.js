// The embeddable figure: /run?...&embed=<card> shows one figure of the run page alone -- no header,
// no controls, only a small step caption and the ← / → keys -- sized to the window, for an <iframe>
// in a lecturer's slides (the server lets such pages be framed: PAGEDVIZ_EMBED_ANCESTORS). The
// page draws as usual; this module marks the figure and its ancestors and the stylesheet hides the
// rest. It also puts an "Embed link" into each card's export menu and each system card's tools.

import { onView } from "./bus.js";
import { embedItem } from "./export.js";
import { $, L, S, state } from "./context.js";
import { el } from "./views.js";

// each embeddable card and the element that is its figure
export const EMBED_CARDS = {
  token_ids_cpu: "#card-token_ids_cpu", block_table: "#card-block_table", kv: "#card-kv", attn_mask: "#card-attn_mask",
  requests: ".req-panel", tokens: ".tok-panel", formula: "#slot-formula", queue: "#queue", narration: "#narration",
  // Model Runner V2: the slot map, the gathered block table and each slot's tokens
  slots: "#slots-panel", input_block_tables: "#card-input_block_tables", all_token_ids: "#card-all_token_ids",
};
const MENU_CARDS = [["#request-table caption details.export-menu > ul", "requests"], ["#token-table caption details.export-menu > ul", "tokens"]];

// the figure's element and its ancestors keep their place; everything else is hidden by style.css
function keepFigure() {
  const target = document.querySelector(EMBED_CARDS[state.embed]);
  if (!target || target.classList.contains("embed-target")) return;
  document.querySelectorAll(".embed-target").forEach((n) => n.classList.remove("embed-target"));
  document.querySelectorAll(".embed-keep").forEach((n) => n.classList.remove("embed-keep"));
  target.classList.add("embed-target");
  for (let n = target.parentElement; n && n !== document.body; n = n.parentElement) n.classList.add("embed-keep");
  // a heatmap follows its box's new width
  requestAnimationFrame(() => window.dispatchEvent(new Event("resize")));
}

function caption() {
  const box = $("embed-caption");
  if (!box || !S.overview) return;
  box.textContent = `${L("embed_step")} ${state.step} / ${S.overview.num_steps} · ${L("embed_help")}`;
}

// "Embed link" in the tables' export menus and in each system card's tools
function decorate() {
  for (const [sel, card] of MENU_CARDS) {
    const ul = document.querySelector(sel);
    if (ul && !ul.querySelector(".embed-link")) ul.append(embedItem(card));
  }
  document.querySelectorAll("#sys-grid .card").forEach((c) => {
    const tools = c.querySelector(".card-tools");
    const card = c.id.replace(/^card-/, "");
    if (tools && EMBED_CARDS[card] && !tools.querySelector(".embed-link")) tools.append(embedItem(card, "a"));
  });
}

let pending = false;
function onChange() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => {
    pending = false;
    if (!state.embed) decorate();
    else if (!document.body.classList.contains("embed-unknown")) { keepFigure(); caption(); }
  });
}

function init() {
  if (state.embed) {
    document.body.classList.add("embed");
    document.body.dataset.embed = state.embed;
    const known = Object.prototype.hasOwnProperty.call(EMBED_CARDS, state.embed);
    document.body.append(el("p", { id: "embed-caption", class: "embed-caption", role: "status",
      text: known ? "" : `embed = ${Object.keys(EMBED_CARDS).join(" | ")}` }));
    if (!known) document.body.classList.add("embed-unknown");
  }
  new MutationObserver(onChange).observe(document.body, { childList: true, subtree: true });
  onView(() => onChange());
  onChange();
}

init();
