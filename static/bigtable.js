// A big table's box (the request and token tables): whether the reader has scrolled it, how many
// rows or columns it shows, and the rest of its table, added once the page is idle after the frame
// that shows the step. tables.js draws the tables; this keeps their boxes' state.

import { afterFrame, whenIdle } from "./canvasmap.js";
import { applySelection } from "./hover.js";

// Whether the reader has scrolled `box` along `axis` ("scrollTop" or "scrollLeft"), watched from
// its first draw on: a scrolled box gets every row or column at once, not its first ones first.
// A scroll also brings in at once the rest of the table still to come (below).
const scrolledBoxes = new WeakMap();
export function scrolled(box, axis) {
  if (!scrolledBoxes.has(box)) {
    scrolledBoxes.set(box, false);
    box.addEventListener("scroll", () => {
      scrolledBoxes.set(box, box[axis] > 0);
      const job = lateJobs.get(box);
      if (job) job();
    }, { passive: true });
  }
  return scrolledBoxes.get(box);
}

// How many rows or columns a big table's box shows, from its size as last laid out (watched, never
// read in the middle of a redraw, where the read would cost a layout); `fallback` before the first.
const boxSizes = new WeakMap();
const sizeWatch = window.ResizeObserver ? new ResizeObserver((entries) => {
  for (const e of entries) boxSizes.set(e.target, e.contentRect);
}) : null;
export function shown(box, axis, cell, fallback) {
  if (sizeWatch && !boxSizes.has(box)) { boxSizes.set(box, null); sizeWatch.observe(box); }
  const r = boxSizes.get(box);
  const extent = r ? r[axis] : 0;
  return extent > 0 ? Math.ceil(extent / cell) + 4 : fallback;
}

// The rest of a big table, added by `add` once the page is idle after the frame that shows the
// step (at once when the reader scrolls its box), unless the table was redrawn meanwhile: a reader
// stepping quickly pays for what the box shows only. The late cells get what the views did to the
// others: the selection's highlight, and (predict.js and compare.js listen) a checkpoint's
// concealed answers and a comparison's marks. A table with all its rows and columns is marked
// data-whole="1".
const lateJobs = new Map();  // box -> the job still to run

// the job still to come for the table in `box` (or undefined), dropped: a redraw replaces it
export function dropLater(box) {
  const job = lateJobs.get(box);
  lateJobs.delete(box);
  return job;
}
export function addLater(box, table, add) {
  table.dataset.whole = "0";
  const job = () => {
    if (lateJobs.get(box) !== job) return;
    lateJobs.delete(box);
    if (!table.isConnected) return;
    add();
    table.dataset.whole = "1";
    applySelection({ plots: false });
    document.dispatchEvent(new Event("pagedviz:late-cells"));
  };
  lateJobs.set(box, job);
  afterFrame(() => whenIdle(job, 1000));
}
