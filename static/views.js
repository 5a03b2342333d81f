// DOM and heatmap helpers. Text always goes in through textContent, never innerHTML, so scenario
// names and prompts are shown as the user typed them and never run as markup.

import { drawHeatmap, drawOverlay, onCell } from "./canvasmap.js";
import { serverText, t } from "./i18n.js";

// Okabe-Ito: a palette that stays distinct for colour-blind viewers and on a projector. Its eighth
// colour, grey, is kept for "not one request": blocks of several owners, and every request of a
// batch too big for one colour each. From static/palette.json (pagedviz.plots reads it too), which
// the page's template carries (#palette).
const IDENTITY = JSON.parse(document.getElementById("palette").textContent);
export const PALETTE = IDENTITY.colours;
export const TINTS = IDENTITY.tints;
export const NUM_IDENTITY_COLORS = IDENTITY.count;
export const GREY = PALETTE[7], GREY_TINT = TINTS[7];

export function colorOf(i) { return PALETTE[((i % PALETTE.length) + PALETTE.length) % PALETTE.length]; }
export function tintOf(i) { return TINTS[((i % TINTS.length) + TINTS.length) % TINTS.length]; }

export function el(tag, attrs = {}, children = []) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") node.textContent = v;
    else if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k.startsWith("on")) {
      // kept on the node too, so that morph.js can move them to the node a redraw keeps
      node.addEventListener(k.slice(2), v);
      (node.__on || (node.__on = [])).push([k.slice(2), v]);
    }
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of [].concat(children)) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// every child removed in one call (one mutation, not one per child: a step change empties a dozen
// views of their tables and lists)
export function clear(node) { node.replaceChildren(); return node; }

// a text written only where it changed: the same text written again is a new text node to lay
// out (a stage's engine source is hundreds of lines)
export function setText(node, text) { if (node.textContent !== text) node.textContent = text; }

// Whether `node`'s content must be built (again) for `key`: not when it was built for an equal key
// and still has it. A view that keeps its nodes across steps (a step or stage change rewriting
// only their marks and values) builds them when this says so.
const builtFor = new WeakMap();
export function needsBuild(node, key) {
  const k = JSON.stringify(key);
  if (builtFor.get(node) === k && node.firstChild) return false;
  builtFor.set(node, k);
  return true;
}

export function fmtList(data, max = 40) {
  const flat = Array.isArray(data) ? data : [data];
  const shown = flat.slice(0, max).map((x) => (Array.isArray(x) ? `[${x.join(", ")}]` : String(x)));
  return `[${shown.join(", ")}${flat.length > max ? `, … (${flat.length - max} more)` : ""}]`;
}

// A grid table for a 2-D array, cells tagged with data-r / data-c for linked highlighting.
export function gridTable(id, rows, { label, maxRows = 64, maxCols = 512, cellText, cellClass, rowHeader }) {
  const table = el("table", { id, class: "grid-table", "aria-label": label });
  const nR = Math.min(rows.length, maxRows);
  const nC = rows.length ? Math.min(rows[0].length, maxCols) : 0;
  const head = el("tr", {}, [el("th", { scope: "col", text: "" })]);
  for (let c = 0; c < nC; c++) head.append(el("th", { scope: "col", text: c }));
  table.append(el("thead", {}, head));
  const body = el("tbody");
  for (let r = 0; r < nR; r++) {
    const tr = el("tr", { dataset: { r } }, [el("th", { scope: "row", text: rowHeader ? rowHeader(r) : r })]);
    for (let c = 0; c < nC; c++) {
      tr.append(el("td", { class: cellClass ? cellClass(r, c) : "", dataset: { r, c },
                            text: cellText ? cellText(r, c) : rows[r][c] }));
    }
    body.append(tr);
  }
  table.append(body);
  return table;
}

// Heatmap labels and hover text are drawn as text (canvas text and textContent), never read as
// markup, so user text (request ids) goes in as typed; kept for the views that still call it.
export function plotlyText(s) {
  return String(s);
}

// A heatmap drawn (or redrawn in place) on a canvas in `div` (canvasmap.js); `shapes` outline
// highlighted cells, `annotations` label them; yTickvals/yTicktext name the rows, `height` overrides
// the height that follows the row count.
function presentHeight() {
  const cls = document.body.classList;
  if (cls.contains("present")) return cls.contains("big-batch") ? 150 : 190;
  // the normal view's first screen holds the block table and the KV pool side by side (style.css)
  return !cls.contains("big-batch") && window.innerWidth >= 1101 ? 170 : 420;
}

export function heatmap(div, z, { title, colorscale = "Blues", reversescale = false, zmin, zmax, text, customdata, texttemplate, hover, xTitle, yTitle, shapes = [], annotations = [], showscale = true, colorbar = {}, yTickvals, yTicktext, height }) {
  const rows = z.length, cols = rows ? z[0].length : 0;
  if (zmin === undefined || zmax === undefined) {
    let lo = Infinity, hi = -Infinity;
    for (const row of z) for (const v of row) if (v !== null && v !== undefined) { if (v < lo) lo = v; if (v > hi) hi = v; }
    if (zmin === undefined) zmin = lo === Infinity ? 0 : lo;
    if (zmax === undefined) zmax = hi === -Infinity ? 1 : hi;
  }
  const fig = {
    type: "heatmap", z, rows, cols, colorscale, reversescale, zmin, zmax, text, customdata, texttemplate,
    textSize: cols > 32 ? 9 : 12, hover: hover || "row %{y}, col %{x}: %{z}", title, xTitle, yTitle,
    xgap: cols > 64 ? 0 : 1, ygap: rows > 64 ? 0 : 1, colorbar, showscale, shapes, annotations,
    yTickvals, yTicktext,
    // presentation keeps the figures short (a big batch's shorter still, under its overview)
    height: height || Math.max(140, Math.min(presentHeight(), 28 * rows + 80)),
  };
  div.setAttribute("aria-label", t(pageLang(), "hm_label").replace("{title}", title).replace("{rows}", rows).replace("{cols}", cols));
  // the figure stays readable where Plotly kept it: the trace as data[0], shapes in layout
  div.data = [fig];
  div.layout = { shapes, annotations, title: { text: title } };
  drawHeatmap(div, fig);
  return div;
}

// new outlines and annotations on a drawn heatmap: only its overlay is redrawn, not its cells
export function setOverlay(div, shapes, annotations = []) {
  if (!div || !div.data) return;
  div.data[0].shapes = shapes;
  div.data[0].annotations = annotations;
  div.layout = { ...div.layout, shapes, annotations };
  drawOverlay(div);
}

// a cell's click, or Enter/Space on the keyboard cursor, calls fn(row, col, z)
export function onHeatmapCell(div, fn) { onCell(div, fn); }

// a stepwise colour scale: category i (of colors.length) takes colors[i]
export function discreteScale(colors) {
  const out = [], n = colors.length;
  colors.forEach((c, i) => out.push([i / n, c], [(i + 1) / n, c]));
  return out;
}

export function cellShape(x, y, color = "#000000", dash = "solid", width = 3) {
  return { type: "rect", x0: x - 0.5, x1: x + 0.5, y0: y - 0.5, y1: y + 0.5,
           line: { color, width, dash }, fillcolor: "rgba(0,0,0,0)" };
}

export function rowShape(y, x1, color = "#000000") {
  return { type: "rect", x0: -0.5, x1: x1 - 0.5, y0: y - 0.5, y1: y + 0.5,
           line: { color, width: 2 }, fillcolor: "rgba(0,0,0,0)" };
}

// The upstream source(s) the engine mirrors, as the server names them: a string ("vLLM 0.33.0"), a
// {name, version | commit} object, or a map of such per flavour. "" when there is none.
export function upstreamText(u) {
  if (typeof u === "string") return u;
  if (Array.isArray(u)) return [...new Set(u.map(upstreamText).filter(Boolean))].join(" · ");
  if (!u || typeof u !== "object") return "";
  if (typeof u.name === "string") return [u.name, u.version || u.commit || ""].filter(Boolean).join(" ");
  return upstreamText(Object.entries(u).map(([k, v]) => (typeof v === "string" && !/\s/.test(v) ? `${k} ${v}` : v)));
}

// the run page's header: what the run mirrors, short, from the run's `upstream` (the footer's
// source) with vLLM's runner named in the page's language (`words`: {v1, v2}): "vLLM 0.33.0 ·
// Model Runner V2", "vLLM 0.33.0 · V1 runner · vllm-ascend 182b75e", "nano-vllm bb823b3"
export function runHeaderText(upstream, words) {
  return upstreamText(upstream).split(" · ").filter(Boolean)
    .map((p) => (/^Model Runner V2\b/.test(p) ? words.v2 : /^V1 runner\b/.test(p) ? words.v1 : p)).join(" · ");
}

// the footer names what the server says the engine mirrors; its own text stays where nothing is said
export function showUpstream(...answers) {
  const text = answers.map((a) => (a && typeof a === "object" ? upstreamText(a.upstream) : "")).find(Boolean);
  const span = document.getElementById("upstream");
  if (text && span) span.textContent = serverText(pageLang(), text);
}

// the page's language, as applyI18n set it on <html>
export function pageLang() { return document.documentElement.lang === "zh-CN" ? "zh" : "en"; }
