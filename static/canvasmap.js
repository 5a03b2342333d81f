// A heatmap drawn on a canvas: the cells (with their numbers where they fit), integer axis ticks,
// axis titles, the title and a legend on one canvas; the outlines and annotations (change marks, the
// selection, the kernel's read order) on a second canvas above it, so a hover or a selection redraws
// only that overlay. Crisp on HiDPI screens (the backing store is devicePixelRatio times the CSS
// size). Hover shows a tooltip (text only, never markup); the canvas is focusable: the arrow keys
// move a cell cursor whose text goes to a live region, and Enter or Space selects the cell as a
// click does. The figure's arguments stay readable as `div.data[0]` and `div.layout`, as Plotly's
// were, for the views' and tests' own checks. The colour scales and the legend are
// canvasscale.js's.

import { FONT, colourFn, drawLegend, legendOf, parseColor, tickStep } from "./canvasscale.js";

const DASHES = { solid: [], dot: [2, 3], dash: [6, 4], longdash: [10, 5], dashdot: [6, 3, 2, 3] };

// the theme's colours, read once per theme (a style read right after the tables were rebuilt
// would force the browser to recompute every style at once, on each step change)
let themeKey = null, theme = {}, themeGen = 0;
const darkQuery = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
if (darkQuery && darkQuery.addEventListener) darkQuery.addEventListener("change", () => { themeGen++; });
function cssVar(name, fallback) {
  const key = `${document.body.className}|${themeGen}`;
  if (key !== themeKey) { themeKey = key; theme = {}; }
  if (!(name in theme)) theme[name] = getComputedStyle(document.body).getPropertyValue(name).trim();
  return theme[name] || fallback;
}

// the hover template filled for one cell: %{x} %{y} %{z} %{text} %{customdata} (%{customdata[i]})
export function hoverText(tpl, fig, r, c) {
  const cd = fig.customdata && fig.customdata[r] ? fig.customdata[r][c] : "";
  return String(tpl || "row %{y}, col %{x}: %{z}")
    .replace(/<extra>.*?<\/extra>/g, "").replace(/<br\s*\/?>/g, "\n")
    .replace(/%\{(x|y|z|text|customdata)(?:\[(\d+)\])?(?::[^}]*)?\}/g, (_, k, i) => {
      let v = k === "x" ? c : k === "y" ? r : k === "z" ? fig.z[r][c] : k === "text" ? (fig.text && fig.text[r] ? fig.text[r][c] : "") : cd;
      if (i !== undefined && Array.isArray(v)) v = v[Number(i)];
      return v === null || v === undefined ? "" : Array.isArray(v) ? v.join(", ") : String(v);
    });
}

// a cell's text as hoverText writes %{text}
const cellText = (v) => (v === null || v === undefined ? "" : Array.isArray(v) ? v.join(", ") : String(v));

// A heatmap out of view can wait: while deferDraws(true) is on, drawHeatmap keeps the figure and
// draws it once the page is idle after the next frame (one heatmap at a time), or at once when
// anything reads the heatmap (its `_cm` parts or its `layout`), so a step change paints what is in
// view first and nothing reads a stale figure.
let deferring = false;
const pending = new Set();
let flushing = false;
export function deferDraws(on) { deferring = Boolean(on); }

// f runs in a task after the next frame is painted, behind any task that frame's own animation
// callbacks queue (so a "painted" timestamp taken there is not held up by work put off to here)
export function afterFrame(f) { putOff(1); requestAnimationFrame(() => setTimeout(() => setTimeout(() => done(f), 0), 0)); }

// f runs once the page is idle (within `timeout` ms when one is given), given the idle period's
// deadline (IdleDeadline; null where the browser has no idle callbacks: then in a task 50 ms on)
export function whenIdle(f, timeout) {
  putOff(1);
  if (window.requestIdleCallback) window.requestIdleCallback((deadline) => done(() => f(deadline)), timeout ? { timeout } : undefined);
  else setTimeout(() => done(() => f(null)), 50);
}
// readiness flag: body[data-put-off] counts the jobs put off above still to run ("0": the page
// drew all it put off); tests wait on it rather than on time
let putOffJobs = 0;
const putOff = (d) => { putOffJobs += d; document.body.dataset.putOff = String(putOffJobs); };
const done = (f) => { try { f(); } finally { putOff(-1); } };

// A big batch's table view of a card out of view waits as a heatmap does: while deferDraws(true)
// is on, `fill` (which rebuilds the table in `box`) runs once the page is idle after the frame
// (within 300 ms), then `after` (the selection's highlight on the new cells); a later fill of the
// same box replaces one still waiting. Otherwise `fill` runs at once.
const tableJobs = new Map();  // box -> the fill still to run
export function fillTable(box, fill, after) {
  if (!deferring) { tableJobs.delete(box); fill(); return; }
  const job = () => {
    if (tableJobs.get(box) !== job) return;
    tableJobs.delete(box);
    if (!box.isConnected) return;
    fill();
    if (after) after();
  };
  tableJobs.set(box, job);
  afterFrame(() => whenIdle(job, 300));
}

function flush(div) { if (pending.delete(div)) draw(div); }

// the heatmaps put off are drawn once the page is idle after the frame (within 300 ms), as many an
// idle period as it has time for (one at least; all of them where the page has nothing else to
// do, so that the step is whole after one more frame, not one frame per heatmap): a reader
// stepping quickly pays for the heatmaps in view only
const idle = (f) => whenIdle(f, 300);
const SPARE_MS = 8;  // an idle period with less time left than this draws no further heatmap
function drawLater(div) {
  pending.add(div);
  if (flushing) return;
  flushing = true;
  const next = (deadline) => {
    do {
      const [div0] = pending;
      if (div0 === undefined) break;
      flush(div0);
    } while (deadline && !deadline.didTimeout && deadline.timeRemaining() > SPARE_MS);
    if (!pending.size) { flushing = false; return; }
    idle(next);
  };
  afterFrame(() => idle(next));
}

// the parts of a heatmap's card, made once per div: the cells' canvas, the overlay canvas (which
// takes the pointer and the focus), the tooltip and the live region
function parts(div) {
  if (div.__cm) return div.__cm;
  const wrap = document.createElement("div");
  wrap.className = "cm-wrap";
  wrap.style.cssText = "position:relative;";
  const cells = document.createElement("canvas");
  cells.className = "cm-cells";
  cells.style.cssText = "display:block;";
  const over = document.createElement("canvas");
  over.className = "cm-overlay";
  over.style.cssText = "position:absolute;left:0;top:0;";
  over.tabIndex = 0;
  over.setAttribute("role", "img");
  const tip = document.createElement("div");
  tip.className = "cm-tip";
  tip.setAttribute("role", "tooltip");
  tip.hidden = true;
  tip.style.cssText = "position:absolute;pointer-events:none;white-space:pre;z-index:5;padding:3px 6px;border-radius:3px;" +
    "font:12px " + FONT + ";background:rgba(20,20,20,0.9);color:#fff;max-width:420px;overflow:hidden;text-overflow:ellipsis;";
  const live = document.createElement("div");
  live.className = "cm-live sr-only";
  live.setAttribute("aria-live", "polite");
  live.style.cssText = "position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap;";
  wrap.append(cells, over, tip, live);
  while (div.firstChild) div.removeChild(div.firstChild);
  div.append(wrap);
  const cm = { wrap, cells, over, tip, live, cursor: null, fig: null, geo: null, onClick: null };
  div.__cm = cm;
  // what reads the heatmap sees it drawn (a draw put off to after the frame is done first)
  let layout = div.layout;
  Object.defineProperty(div, "_cm", { configurable: true, get() { flush(div); return cm; } });
  Object.defineProperty(div, "layout", { configurable: true, get() { flush(div); return layout; }, set(v) { layout = v; } });
  over.addEventListener("mousemove", (e) => {
    const cell = cellAt(cm, e.offsetX, e.offsetY);
    if (!cell) { tip.hidden = true; return; }
    tip.textContent = hoverText(cm.fig.hover, cm.fig, cell[0], cell[1]);
    tip.hidden = false;
    const x = Math.min(e.offsetX + 12, Math.max(0, cm.geo.W - tip.offsetWidth - 2));
    tip.style.left = `${x}px`;
    tip.style.top = `${Math.max(0, e.offsetY - tip.offsetHeight - 8)}px`;
  });
  over.addEventListener("mouseleave", () => { tip.hidden = true; });
  over.addEventListener("click", (e) => {
    const cell = cellAt(cm, e.offsetX, e.offsetY);
    if (cell && cm.onClick) cm.onClick(cell[0], cell[1], cm.fig.z[cell[0]][cell[1]]);
  });
  over.addEventListener("keydown", (e) => onKey(div, cm, e));
  over.addEventListener("blur", () => { cm.cursor = null; drawOverlay(div); });
  // the width is the observer's (read once at first): reading it on each draw would force a layout
  if (typeof ResizeObserver !== "undefined") {
    new ResizeObserver((entries) => {
      const w = Math.round(entries[entries.length - 1].contentRect.width);
      if (w <= 0 || w === cm.width) return;
      cm.width = w;
      if (cm.fig && cm.geo && Math.abs(w - cm.geo.W) > 1) { pending.delete(div); draw(div); }
    }).observe(div);
  }
  return cm;
}

function onKey(div, cm, e) {
  const fig = cm.fig;
  if (!fig || !fig.rows || !fig.cols) return;
  const moves = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0], Home: [0, -1e9], End: [0, 1e9] };
  if (moves[e.key]) {
    const [r0, c0] = cm.cursor || [0, 0];
    const [dr, dc] = cm.cursor ? moves[e.key] : [0, 0];
    cm.cursor = [Math.max(0, Math.min(fig.rows - 1, r0 + dr)), Math.max(0, Math.min(fig.cols - 1, c0 + dc))];
    const [r, c] = cm.cursor;
    const v = fig.z[r][c];
    cm.live.textContent = v === null || v === undefined ? `row ${r}, col ${c}: empty` : hoverText(fig.hover, fig, r, c);
    drawOverlay(div);
  } else if (e.key === "Enter" || e.key === " ") {
    if (cm.cursor && cm.onClick) cm.onClick(cm.cursor[0], cm.cursor[1], fig.z[cm.cursor[0]][cm.cursor[1]]);
  } else return;
  // the page's own keys (step, stage, play) stay off while the heatmap has the focus
  e.preventDefault();
  e.stopPropagation();
}

// the cell [row, col] under a point of the overlay, or null (outside, or an empty cell)
function cellAt(cm, x, y) {
  const g = cm.geo, fig = cm.fig;
  if (!g || !fig) return null;
  const c = Math.floor((x - g.l) / g.cw), r = Math.floor((y - g.t) / g.ch);
  if (r < 0 || c < 0 || r >= fig.rows || c >= fig.cols) return null;
  const v = fig.z[r][c];
  return v === null || v === undefined ? null : [r, c];
}

// the heatmaps' label size in px: the page's --heatmap-text where set (present mode), else 11
function textPx(div) {
  const v = parseFloat(getComputedStyle(div).getPropertyValue("--heatmap-text"));
  return Number.isFinite(v) && v > 0 ? v : 11;
}

function sizeCanvas(canvas, W, H) {
  const dpr = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(H * dpr)) {
    canvas.width = Math.round(W * dpr);
    canvas.height = Math.round(H * dpr);
    canvas.style.width = `${W}px`;
    canvas.style.height = `${H}px`;
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, W, H);
  return ctx;
}

// Draws (or redraws) the heatmap `fig` (the arguments of views.heatmap) in `div`.
export function drawHeatmap(div, fig) {
  const cm = parts(div);
  cm.fig = fig;
  if (cm.cursor && (cm.cursor[0] >= fig.rows || cm.cursor[1] >= fig.cols)) cm.cursor = null;
  cm.over.setAttribute("aria-label", div.getAttribute("aria-label") || fig.title || "heatmap");
  if (deferring) drawLater(div);
  else { pending.delete(div); draw(div); }
}

function draw(div) {
  const cm = div.__cm, fig = cm.fig;
  const { rows, cols, z } = fig;
  if (!cm.width) cm.width = div.clientWidth || (div.parentElement && div.parentElement.clientWidth) || 600;
  const W = Math.max(200, cm.width);
  const H = fig.height;
  const fg = cssVar("--fg", "#111111"), plotBg = cssVar("--plot-bg", "#ffffff");
  const ctx = sizeCanvas(cm.cells, W, H);
  // the labels' size: 11 px, or the page's --heatmap-text (present mode sets it to the body's text
  // size, style.css), the margins and title sizes scaled with it
  const px = textPx(div), k = px / 11;
  // titles grow less than the numbers (the card's own header names the figure)
  const titlePx = Math.max(13, Math.round(px * 0.75)), axisPx = Math.max(12, Math.round(px * 0.7));
  ctx.font = `${px}px ${FONT}`;
  // margins: the y tick labels and title on the left, the legend on the right
  const yLabels = fig.yTicktext ? fig.yTicktext.map(String) : [String(Math.max(0, rows - 1))];
  const yw = Math.max(...yLabels.map((s) => ctx.measureText(s).width));
  const l = Math.ceil(yw) + (fig.yTitle ? axisPx + 14 : 10);
  let legend = null, r = 8;
  if (fig.showscale) {
    legend = legendOf(fig);
    const labels = legend.cats ? legend.cats.map((c) => c.label) : legend.vals.map(String);
    const lw = Math.min(160, Math.max(24, ...labels.map((s) => ctx.measureText(s).width), legend.title ? ctx.measureText(legend.title).width - 16 : 0));
    r = 8 + 12 + 6 + lw + 6;
  }
  const t = fig.title ? titlePx + 13 : 8, b = px + 11 + (fig.xTitle ? axisPx + 5 : 0);
  const pw = Math.max(10, W - l - r), ph = Math.max(10, H - t - b);
  const cw = pw / Math.max(1, cols), ch = ph / Math.max(1, rows);
  cm.geo = { W, H, l, t, pw, ph, cw, ch };
  cm.drawn = fig;  // the figure the canvas shows
  // the plot area, then the cells (gaps between cells where they are wide enough)
  ctx.fillStyle = plotBg;
  ctx.fillRect(l, t, pw, ph);
  const colour = colourFn(fig.colorscale, fig.zmin, fig.zmax, fig.reversescale);
  const gx = fig.xgap && cw > 3 ? 1 : 0, gy = fig.ygap && ch > 3 ? 1 : 0;
  // cell edges on whole device pixels, so narrow cells neither blur nor leave seams
  const dpr = window.devicePixelRatio || 1;
  const xe = Array.from({ length: cols + 1 }, (_, j) => Math.round((l + j * cw) * dpr) / dpr);
  if (rows * cols > 20000 && (cw < 4 || ch < 4)) {
    // a big grid of tiny cells: one pixel per cell in an image, scaled up without smoothing
    // (a rectangle per cell costs ~200 ms at 1024 × 130)
    const img = new ImageData(cols, rows), px = img.data, rgb = new Map();
    for (let i = 0; i < rows; i++) {
      const row = z[i];
      for (let j = 0; j < cols; j++) {
        const v = row[j];
        if (v === null || v === undefined) continue;
        let c = rgb.get(v);
        if (!c) { c = parseColor(colour(v)); rgb.set(v, c); }
        const k = (i * cols + j) * 4;
        px[k] = c[0]; px[k + 1] = c[1]; px[k + 2] = c[2]; px[k + 3] = 255;
      }
    }
    const off = document.createElement("canvas");
    off.width = cols; off.height = rows;
    off.getContext("2d").putImageData(img, 0, 0);
    ctx.save();
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, l, t, pw, ph);
    ctx.restore();
  } else {
    let last = null;
    for (let i = 0; i < rows; i++) {
      const row = z[i], y0 = Math.round((t + i * ch) * dpr) / dpr, y1 = Math.round((t + (i + 1) * ch) * dpr) / dpr;
      for (let j = 0; j < cols; j++) {
        const v = row[j];
        if (v === null || v === undefined) continue;
        const fill = colour(v);
        if (fill !== last) { ctx.fillStyle = fill; last = fill; }
        ctx.fillRect(xe[j], y0, xe[j + 1] - xe[j] - gx, y1 - y0 - gy);
      }
    }
  }
  // numbers in their cells, where they fit
  if (fig.texttemplate && fig.text) {
    const size = Math.round(fig.textSize * k);
    ctx.font = `${size}px ${FONT}`;
    ctx.fillStyle = "#111111";
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    if (ch >= size) {
      // (the usual template, the cell's own text, is read directly; a text's width is measured once)
      const plain = fig.texttemplate === "%{text}";
      const widths = new Map();
      for (let i = 0; i < rows; i++) {
        const textRow = fig.text[i];
        for (let j = 0; j < cols; j++) {
          if (z[i][j] === null || z[i][j] === undefined) continue;
          const s = plain ? cellText(textRow ? textRow[j] : "") : hoverText(fig.texttemplate, fig, i, j);
          if (!s) continue;
          let w = widths.get(s);
          if (w === undefined) { w = ctx.measureText(s).width; widths.set(s, w); }
          if (w <= cw - 2) ctx.fillText(s, l + (j + 0.5) * cw, t + (i + 0.5) * ch + 0.5);
        }
      }
    }
  }
  // the plot's frame, so empty rows and columns still show where the array ends
  ctx.strokeStyle = cssVar("--line", "#c8c8c8");
  ctx.lineWidth = 1;
  ctx.strokeRect(Math.round(l) - 0.5, Math.round(t) - 0.5, Math.round(pw) + 1, Math.round(ph) + 1);
  // axes: ticks at integers (every k-th where crowded), the ticktext the view gave, and titles
  ctx.fillStyle = fg;
  ctx.strokeStyle = fg;
  ctx.font = `${px}px ${FONT}`;
  ctx.textBaseline = "top";
  ctx.textAlign = "center";
  const xticks = [], yticks = [];
  const xs = tickStep(cols, pw, 28 * k);
  for (let j = 0; j < cols; j += xs) { xticks.push(String(j)); ctx.fillText(String(j), l + (j + 0.5) * cw, t + ph + 4); }
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  if (fig.yTicktext) fig.yTickvals.forEach((v, k) => { yticks.push(String(fig.yTicktext[k])); ctx.fillText(String(fig.yTicktext[k]), l - 5, t + (v + 0.5) * ch); });
  else { const ys = tickStep(rows, ph, 14 * k); for (let i = 0; i < rows; i += ys) { yticks.push(String(i)); ctx.fillText(String(i), l - 5, t + (i + 0.5) * ch); } }
  // what was drawn, readable beside the figure's arguments (axis ranges as Plotly named them)
  div.layout = { ...div.layout, xaxis: { range: [-0.5, cols - 0.5], ticktext: xticks }, yaxis: { range: [rows - 0.5, -0.5], ticktext: yticks },
                 legend: legend ? (legend.cats ? legend.cats.map((c) => c.label) : legend.vals.map(String)) : [], font: { size: px } };
  ctx.font = `${axisPx}px ${FONT}`;
  if (fig.xTitle) { ctx.textAlign = "center"; ctx.textBaseline = "bottom"; ctx.fillText(fig.xTitle, l + pw / 2, H - 2); }
  if (fig.yTitle) {
    ctx.save(); ctx.translate(axisPx - 1, t + ph / 2); ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "center"; ctx.textBaseline = "middle"; ctx.fillText(fig.yTitle, 0, 0); ctx.restore();
  }
  if (fig.title) { ctx.font = `${titlePx}px ${FONT}`; ctx.textAlign = "left"; ctx.textBaseline = "top"; ctx.fillText(fig.title, 4, 6); }
  if (legend) drawLegend(ctx, fig, legend, colour, l + pw + 8, t, ph, fg, px);
  sizeCanvas(cm.over, W, H);
  drawOverlay(div);
}

// the shapes and annotations (data coordinates, Plotly's rect and annotation fields) and the
// keyboard cursor, on the overlay canvas only
export function drawOverlay(div) {
  const cm = div._cm;
  if (!cm || !cm.geo) return;
  const { W, H, l, t, cw, ch } = cm.geo;
  const ctx = sizeCanvas(cm.over, W, H);
  const X = (x) => l + (x + 0.5) * cw, Y = (y) => t + (y + 0.5) * ch;
  for (const s of cm.fig.shapes || []) {
    const x0 = X(Math.min(s.x0, s.x1)), x1 = X(Math.max(s.x0, s.x1)), y0 = Y(Math.min(s.y0, s.y1)), y1 = Y(Math.max(s.y0, s.y1));
    if (s.fillcolor && parseColor(s.fillcolor)[3] > 0) { ctx.fillStyle = s.fillcolor; ctx.fillRect(x0, y0, x1 - x0, y1 - y0); }
    const line = s.line || {};
    const w = line.width === undefined ? 2 : line.width;
    if (!w) continue;
    ctx.strokeStyle = line.color || "#000000";
    ctx.lineWidth = w;
    ctx.setLineDash((DASHES[line.dash] || []).map((d) => d * Math.max(1, w / 2)));
    ctx.strokeRect(x0 + w / 2, y0 + w / 2, Math.max(1, x1 - x0 - w), Math.max(1, y1 - y0 - w));
  }
  ctx.setLineDash([]);
  for (const a of cm.fig.annotations || []) {
    const size = (a.font && a.font.size) || 11;
    ctx.font = `${size}px ${FONT}`;
    const text = String(a.text);
    const w = ctx.measureText(text).width + 6, h = size + 4, x = X(a.x), y = Y(a.y);
    if (a.bgcolor) { ctx.fillStyle = a.bgcolor; ctx.fillRect(x - w / 2, y - h / 2, w, h); }
    if (a.bordercolor) { ctx.strokeStyle = a.bordercolor; ctx.lineWidth = 1; ctx.strokeRect(x - w / 2 + 0.5, y - h / 2 + 0.5, w - 1, h - 1); }
    ctx.fillStyle = (a.font && a.font.color) || "#111111";
    ctx.textAlign = "center"; ctx.textBaseline = "middle";
    ctx.fillText(text, x, y + 0.5);
  }
  if (cm.cursor) {
    const [r, c] = cm.cursor;
    ctx.strokeStyle = cssVar("--accent", "#0072B2");
    ctx.lineWidth = 2;
    ctx.setLineDash([4, 2]);
    ctx.strokeRect(l + c * cw - 1, t + r * ch - 1, cw + 2, ch + 2);
    ctx.setLineDash([]);
  }
}

// the drawn figure (cells, overlay, on the page's background) as a PNG blob
export function toPng(div) {
  const cm = div._cm;
  if (!cm || !cm.geo) return Promise.resolve(null);
  const out = document.createElement("canvas");
  out.width = cm.cells.width;
  out.height = cm.cells.height;
  const ctx = out.getContext("2d");
  ctx.fillStyle = cssVar("--bg", "#ffffff");
  ctx.fillRect(0, 0, out.width, out.height);
  ctx.drawImage(cm.cells, 0, 0);
  ctx.drawImage(cm.over, 0, 0);
  return new Promise((resolve) => out.toBlob(resolve, "image/png"));
}

// the handler of a cell's click (and of Enter/Space on the keyboard cursor): fn(row, col, z)
export function onCell(div, fn) { parts(div).onClick = fn; }
