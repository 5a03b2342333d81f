// Short transitions that show what changed between two steps: a request row slides from its old
// batch row to its new one (FLIP with the Web Animations API), the KV pool bar grows or shrinks
// from its previous fill, and this step's new-block chips fly in from the pool bar. Each lasts at
// most MOTION_MS; none runs under prefers-reduced-motion, nor while Play steps faster than an
// animation would take (they would overlap).

import { onView } from "./bus.js";
import { S } from "./context.js";

export const MOTION_MS = 250;

export function motionAllowed() {
  if (window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches) return false;
  if (S.timer && 1000 / S.speed < 2 * MOTION_MS) return false;
  return true;
}

// the top of each request's row before the table is redrawn: request id -> y
export function rowTops(table) {
  const out = new Map();
  if (!table) return out;
  table.querySelectorAll("tbody tr[data-req]").forEach((tr) => out.set(tr.dataset.req, tr.getBoundingClientRect().top));
  return out;
}

// FLIP: each row of `ids` is drawn in its new place, then slides there from where it was. The new
// places are read in the frame's animation callback, once every view of the step is written: the
// layout that read costs is the one the frame needs anyway (read earlier, while views are still
// being written, it would be a layout of its own).
export function slideRows(table, before, ids) {
  if (!table || !motionAllowed() || !before.size) return;
  requestAnimationFrame(() => {
    if (!table.isConnected) return;
    const moves = [];
    for (const rid of ids) {
      const tr = table.querySelector(`tbody tr[data-req="${CSS.escape(rid)}"]`);
      if (!tr || !before.has(rid)) continue;
      const dy = before.get(rid) - tr.getBoundingClientRect().top;
      if (Math.abs(dy) >= 1) moves.push([tr, dy]);
    }
    for (const [tr, dy] of moves) {
      tr.animate([{ transform: `translateY(${dy}px)` }, { transform: "translateY(0)" }], { duration: MOTION_MS, easing: "ease-out" });
    }
  });
}

// the pool bar from its previous fill to this step's, and the new-block chips out of the bar
let lastPool = null;
const poolFill = () => document.querySelector("#queue .qbar.pool .qbar-fill");
function poolMotion() {
  const fill = poolFill();
  const now = fill ? fill.style.width : null;
  const was = lastPool;
  lastPool = now;
  // nothing moves on the first step shown: there is no previous step to move from
  if (!fill || was === null || !motionAllowed()) return;
  // the fill is scaled from its old width to its new one (a transform: no layout on each frame)
  const a = parseFloat(was), b = parseFloat(now);
  if (was !== now && a >= 0 && b > 0) {
    fill.style.transformOrigin = "0 50%";
    fill.animate([{ transform: `scaleX(${a / b})` }, { transform: "none" }], { duration: MOTION_MS, easing: "ease-out" });
  }
  // the chips' places are read in the frame's animation callback (see slideRows)
  requestAnimationFrame(() => flyChips(fill));
}

function flyChips(fill) {
  const chip = document.querySelector("#changes .chip.newblocks");
  const bar = fill.isConnected ? fill.closest(".qbar") : null;
  if (chip && bar) {
    // from the bar's middle, kept inside the window: a chip in flight must not widen the page
    const a = bar.getBoundingClientRect(), b = chip.getBoundingClientRect(), k = 0.4;
    const right = document.documentElement.clientWidth - 1;
    const x = Math.max(0, Math.min(a.left + a.width / 2 - (b.width * k) / 2, right - b.width * k)) - b.left;
    chip.style.transformOrigin = "0 0";
    chip.animate([{ transform: `translate(${x}px, ${a.top - b.top}px) scale(${k})`, opacity: 0 },
      { transform: "none", opacity: 1 }], { duration: MOTION_MS, easing: "ease-out" });
  }
}

onView((what) => {
  if (what === "step") poolMotion();
  // a run (re)loaded: its first step shown is where the next change moves from
  else if (what === "run") { const fill = poolFill(); lastPool = fill ? fill.style.width : null; }
});
