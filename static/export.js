// Export: each array of a step as JSON, CSV or .npy (links to the REST API), a heatmap as a PNG
// (the drawn canvas), and the link that reopens this exact view.

import { toSearch, writeState } from "./urlstate.js";
import { $, L, S, state } from "./context.js";
import { toPng } from "./canvasmap.js";
import { el } from "./views.js";

// one menu per card: a single tab stop that opens every array's links, so the data comes first in
// the tab order
export function exportMenu(names) {
  return el("details", { class: "export export-menu" }, [
    el("summary", { text: `${L("export_menu")} ▾` }),
    el("ul", {}, names.map((n) => el("li", {}, [el("code", { text: n }), " ", exportLinks(n)])))]);
}

// json / csv / npy download links of one array of the current step
export function exportLinks(name) {
  const base = `/api/runs/${S.created.run_id}/steps/${state.step}/arrays/${encodeURIComponent(name)}`;
  return el("span", { class: "export" }, ["json", "csv", "npy"].map((f) =>
    el("a", { href: `${base}?format=${f}`, download: "", "aria-label": `${name} ${f}`, text: f })));
}

// the PNG button of a system-level card (disabled while the card shows its table)
export function pngButton(id) {
  return el("button", { class: "small", onclick: () => downloadPng($(`hm-${id}`), `${id}-step${state.step}.png`),
    text: L("png"), "aria-label": `${id} PNG`, disabled: S.view[id] === "table" });
}

// the heatmap as drawn, saved as a PNG file
export async function downloadPng(div, filename) {
  const blob = div ? await toPng(div) : null;
  if (!blob) return;
  const url = URL.createObjectURL(blob);
  const a = el("a", { href: url, download: filename, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// the view's URL into the link field and, where the browser allows, the clipboard
export async function copyLink() {
  const url = window.location.origin + writeState(state);
  const out = $("link-out");
  out.value = url;
  out.hidden = false;
  out.select();
  try { await navigator.clipboard.writeText(url); } catch (_) { /* the selected field is the fallback */ }
  $("status").textContent = L("copied");
}

// "Embed link": this view as one figure alone (embed=<card>), for an <iframe> in slides; its href
// follows the view (step, selection) when it is used. As a menu item (li) or a bare link (a).
export function embedItem(card, as = "li") {
  const href = () => window.location.pathname + toSearch({ ...state, embed: card, note: "" });
  const a = el("a", { class: "embed-link small", href: href(), target: "_blank", rel: "noopener", text: L("embed_link"),
    "aria-label": `${L("embed_link")}: ${card}`, dataset: { card } });
  const fresh = () => { a.href = href(); };
  a.addEventListener("mouseenter", fresh);
  a.addEventListener("focus", fresh);
  a.addEventListener("click", fresh);
  return as === "li" ? el("li", {}, [a]) : a;
}
