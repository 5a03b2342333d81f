// The KV pool of a run with several KV cache groups, coloured by group and owner. The groups share
// one pool: a block in use belongs to one group of one request (or several requests, through a
// prefix-cache hit). By owner, a full-attention group's block takes its request's colour and a
// sliding group's the request's light tint; by group, each group has a colour of its own. The
// null block 0 is neither free nor any request's: it is the placeholder a sliding group puts where
// the window dropped a block, drawn in a colour and with a label of its own. A legend under the
// pool names every colour on show. With one group kvgrid.js colours the pool as it always did.

import { L, S, bigBatch, reqColor, reqOrder, reqTint, scenarioReqIds } from "./context.js";
import { NULL_BLOCK, blockGroup, groupShort, isSliding, kvGroups } from "./groups.js";
import { GREY, GREY_TINT, clear, el } from "./views.js";

// the null block's colour: near black on the light theme, near white on the dark one (groups.css)
const darkTheme = () => Boolean(window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches);
export const nullColor = () => (darkTheme() ? "#e6e6e6" : "#1a1a1a");
const SHARED = "#444444";
// one colour per group (Paul Tol's muted scheme: distinct for colour-blind viewers)
const GROUP_COLORS = ["#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255"];
const groupColor = (g) => GROUP_COLORS[g % GROUP_COLORS.length];

// whether block b is the null block of this run (vLLM keeps block 0 as its null block)
export const isNullBlock = (b) => b === NULL_BLOCK && S.overview.flavor !== "nanovllm";

// The categories of the pool's colour in a run with groups, for "owner" or "group":
// {cats: [{value, label, color, kind}], of(block, owners) -> value | null}
export function poolCategories(metric) {
  const groups = kvGroups(), where = blockGroup();
  const sliding = (b) => isSliding(groups[where.get(b)]);
  if (metric === "group") {
    const cats = groups.map((g, i) => ({ value: i, label: groupShort(i, g), color: groupColor(i), kind: "group" }));
    cats.push({ value: groups.length, label: L("null_block"), color: nullColor(), kind: "null" });
    return { cats, of: (b, owners) => (isNullBlock(b) ? groups.length : owners.length && where.has(b) ? where.get(b) : null) };
  }
  const ids = bigBatch() ? [] : scenarioReqIds();
  const cats = [];
  ids.forEach((rid, i) => {
    cats.push({ value: 2 * i, rid, label: `${rid} · ${L("grp_full_short")}`, color: reqColor(rid), kind: "full" });
    cats.push({ value: 2 * i + 1, rid, label: `${rid} · ${L("grp_window_short")}`, color: reqTint(rid), kind: "sliding" });
  });
  const n = 2 * ids.length;
  if (bigBatch()) {
    cats.push({ value: 0, label: `${L("req")} · ${L("grp_full_short")}`, color: GREY, kind: "full" });
    cats.push({ value: 1, label: `${L("req")} · ${L("grp_window_short")}`, color: GREY_TINT, kind: "sliding" });
  }
  const base = bigBatch() ? 2 : n;
  cats.push({ value: base, label: L("shared_block"), color: SHARED, kind: "shared" });
  cats.push({ value: base + 1, label: L("null_block"), color: nullColor(), kind: "null" });
  const of = (b, owners) => {
    if (isNullBlock(b)) return base + 1;
    if (!owners.length) return null;
    if (owners.length > 1) return base;
    return (bigBatch() ? 0 : 2 * reqOrder(owners[0])) + (sliding(b) ? 1 : 0);
  };
  return { cats, of };
}

// a block's words for the hover and the table: "g1 · sliding 8" or "null block: ..."
export function blockWords(b) {
  if (isNullBlock(b)) return L("null_block_what");
  const g = blockGroup().get(b);
  return g === undefined ? "" : groupShort(g);
}

// the table view's owner cell: "a·g1", "null"
export function ownerCellText(b, owners) {
  if (isNullBlock(b)) return L("null_block");
  const g = blockGroup().get(b);
  return owners.length ? `${owners.join("+")}${g === undefined ? "" : `·g${g}`}` : null;
}

// the pool's legend under the grid: the colours on show, what the null block is, and the groups
export function renderPoolLegend(card, metric, present) {
  let box = document.getElementById("kv-pool-legend");
  if (!box) { box = el("ul", { id: "kv-pool-legend", class: "mark-legend pool-legend", "aria-label": L("grp_pool_legend") }); card.append(box); }
  clear(box);
  const { cats } = poolCategories(metric);
  for (const c of cats) {
    if (c.kind !== "null" && !present.has(c.value)) continue;
    box.append(el("li", { class: `pool-${c.kind}`, dataset: { kind: c.kind } }, [
      el("span", { class: "swatch-fill", style: c.kind === "null" ? undefined : `background: ${c.color}`, "aria-hidden": "true" }),
      c.kind === "null" ? L("null_block_what") : c.label]));
  }
  box.append(el("li", { class: "pool-free", dataset: { kind: "free" } }, [el("span", { class: "swatch-fill pool-free-swatch", "aria-hidden": "true" }), L("free")]));
}
