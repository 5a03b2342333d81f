// A canvas heatmap's colours and legend (canvasmap.js draws the rest): Plotly-style colour scales
// (named or [[fraction, colour], ...]) mapped onto [zmin, zmax], CSS colours parsed, the integer
// tick step of an axis or legend, and the legend itself (categories, or a continuous bar).

const NAMED_SCALES = {
  Blues: [[0, "rgb(5,10,172)"], [0.35, "rgb(40,60,190)"], [0.5, "rgb(70,100,245)"], [0.6, "rgb(90,120,245)"],
          [0.7, "rgb(106,137,247)"], [1, "rgb(220,220,220)"]],
  Greys: [[0, "rgb(0,0,0)"], [1, "rgb(255,255,255)"]],
};
export const FONT = "system-ui, -apple-system, 'Segoe UI', sans-serif";

// "#rgb", "#rrggbb", "rgb(...)", "rgba(...)" -> [r, g, b, a]
export function parseColor(c) {
  const s = String(c).trim();
  if (s[0] === "#") {
    const h = s.length === 4 ? s.slice(1).split("").map((x) => x + x).join("") : s.slice(1, 7);
    return [parseInt(h.slice(0, 2), 16), parseInt(h.slice(2, 4), 16), parseInt(h.slice(4, 6), 16), 1];
  }
  const m = s.match(/rgba?\(([^)]*)\)/);
  if (m) { const p = m[1].split(",").map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; }
  return [0, 0, 0, 1];
}

// value -> CSS colour for a Plotly-style scale ([[fraction, colour], ...] or a name) on [zmin, zmax]
export function colourFn(scale, zmin, zmax, reverse) {
  const stops = (typeof scale === "string" ? NAMED_SCALES[scale] || NAMED_SCALES.Blues : scale).map(([f, c]) => [Number(f), parseColor(c)]);
  const cache = new Map();
  const span = zmax - zmin || 1;
  return (v) => {
    let out = cache.get(v);
    if (out) return out;
    let f = Math.max(0, Math.min(1, (v - zmin) / span));
    if (reverse) f = 1 - f;
    let k = 0;
    while (k < stops.length - 2 && f > stops[k + 1][0]) k++;
    const [f0, c0] = stops[k], [f1, c1] = stops[Math.min(k + 1, stops.length - 1)];
    const t = f1 > f0 ? (f - f0) / (f1 - f0) : 0;
    const mix = c0.map((x, i) => x + (c1[i] - x) * t);
    out = `rgb(${Math.round(mix[0])},${Math.round(mix[1])},${Math.round(mix[2])})`;
    cache.set(v, out);
    return out;
  };
}

// a tick step of 1, 2 or 5 times a power of ten that leaves at least `minPx` between ticks
export function tickStep(n, px, minPx) {
  if (n <= 24 && px / n >= minPx * 0.6) return 1;
  for (let p = 1; ; p *= 10) for (const m of [1, 2, 5]) if ((m * p * px) / n >= minPx) return m * p;
}

// the legend's entries: categories (array ticks on a stepwise scale) or a continuous bar
export function legendOf(fig) {
  const cb = fig.colorbar || {};
  if (cb.tickmode === "array" && Array.isArray(cb.tickvals)) {
    return { cats: cb.tickvals.map((v, i) => ({ v, label: String(cb.ticktext ? cb.ticktext[i] : v) })), title: cb.title && cb.title.text };
  }
  const lo = fig.zmin, hi = fig.zmax, step = tickStep(hi - lo + 1, 200, 40);
  const vals = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) vals.push(v);
  return { bar: true, vals, title: cb.title && cb.title.text };
}

export function drawLegend(ctx, fig, legend, colour, x, t, ph, fg, px = 11) {
  const k = px / 11;
  ctx.font = `${px}px ${FONT}`;
  ctx.textAlign = "left";
  ctx.textBaseline = "middle";
  let y = t;
  if (legend.title) { ctx.fillStyle = fg; ctx.fillText(legend.title, x, y + 5 * k); y += 16 * k; }
  if (legend.cats) {
    const step = Math.min(18 * k, Math.max(12 * k, (ph - (y - t)) / Math.max(1, legend.cats.length)));
    ctx.font = `${Math.round((step < 14 * k ? 10 : 11) * k)}px ${FONT}`;
    for (const c of legend.cats) {
      ctx.fillStyle = colour(c.v);
      ctx.fillRect(x, y + 1, 12, step - 3);
      ctx.strokeStyle = "rgba(128,128,128,0.6)";
      ctx.lineWidth = 1;
      ctx.strokeRect(x + 0.5, y + 1.5, 11, step - 4);
      ctx.fillStyle = fg;
      ctx.fillText(c.label, x + 18, y + step / 2);
      y += step;
      if (y > t + ph + 20) break;
    }
    return;
  }
  // a continuous bar, zmax at the top
  const h = Math.max(20, t + ph - y), lo = fig.zmin, hi = fig.zmax;
  for (let k = 0; k < h; k++) { ctx.fillStyle = colour(hi - ((hi - lo) * k) / Math.max(1, h - 1)); ctx.fillRect(x, y + k, 12, 1.2); }
  ctx.fillStyle = fg;
  for (const v of legend.vals) ctx.fillText(String(v), x + 18, y + ((hi - v) / (hi - lo || 1)) * (h - 1));
}
