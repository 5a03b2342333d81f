// The run-level charts under the run page: pagedviz.plots' run-metrics figure and request timeline
// (GET /api/runs/{id}/figures/{name}, plotly JSON in the page's theme and language) drawn with
// plotly.js served by the app (/vendor/plotly.min.js, from the installed plotly package). Loaded
// lazily: plotly.js (4.8 MB) is asked for only once the run's first step is painted, the run is
// computed whole, the reader has come within a screen of the charts, and the page is idle, so
// neither first paint nor a step change waits for it, and a reader who never goes down to the
// charts never fetches it (4.8 MB a student on a class server's network; drawing the two charts
// costs about a second of CPU on a small machine).
// A step change moves a marker over both figures (a transform, no redraw); a click on a figure
// opens the step under the pointer. Listens through bus.js; run.js does not know this module.

import { ctl, onView } from "./bus.js";
import { PLOTLY_LOCALES } from "./i18n.js";
import { $, L, S, state } from "./context.js";
import { el } from "./views.js";

const FIGURES = ["run_metrics", "timeline"];
const dark = window.matchMedia("(prefers-color-scheme: dark)");
let plotly = null;  // the promise of window.Plotly
let drawn = null;   // {runId, theme, lang} of the figures on show
let pending = 0;    // draws started; a later one supersedes the earlier

function loadPlotly() {
  if (!plotly) {
    plotly = new Promise((resolve, reject) => {
      const s = document.createElement("script");
      s.src = "/vendor/plotly.min.js";
      s.async = true;
      s.onload = () => resolve(window.Plotly);
      s.onerror = () => { plotly = null; reject(new Error("plotly.js did not load")); };
      document.head.append(s);
    });
  }
  return plotly;
}

// resolves once the body has data-<name>="1" (set by run.js)
function bodyFlag(name) {
  const key = name.replace(/-([a-z])/g, (_, c) => c.toUpperCase());
  if (document.body.dataset[key] === "1") return Promise.resolve();
  return new Promise((resolve) => {
    const mo = new MutationObserver(() => { if (document.body.dataset[key] === "1") { mo.disconnect(); resolve(); } });
    mo.observe(document.body, { attributes: true, attributeFilter: [`data-${name}`] });
  });
}
const idle = () => new Promise((r) => (window.requestIdleCallback ? requestIdleCallback(() => r(), { timeout: 3000 }) : setTimeout(r, 200)));

// resolves once the charts' box comes within a screen of the view (they are drawn by the time the
// reader scrolling down reaches them)
function nearView(node) {
  return new Promise((resolve) => {
    const io = new IntersectionObserver((es) => { if (es.some((e) => e.isIntersecting)) { io.disconnect(); resolve(); } }, { rootMargin: "100% 0px" });
    io.observe(node);
  });
}

function box() { return $("run-charts"); }

async function draw() {
  const root = box();
  if (!root || state.embed || !S.created) return;
  const mine = ++pending;
  // where the draw is (data-phase): a chart that does not come says where it stopped
  root.dataset.phase = "first-paint";
  await bodyFlag("first-paint");
  root.dataset.phase = "complete";
  await bodyFlag("complete");
  root.hidden = false;  // its heading, below the step's panels: the box the charts will fill
  root.dataset.phase = "near";
  if (!plotly) await nearView(root);
  root.dataset.phase = "idle";
  await idle();
  const want = { runId: S.created.run_id, theme: dark.matches ? "dark" : "light", lang: state.lang };
  if (mine !== pending || (drawn && JSON.stringify(drawn) === JSON.stringify(want))) return;
  try {
    await paint(root, mine, want);
  } catch (err) {
    // plotly.js that did not load, a figure the server refused, a figure plotly could not draw:
    // said in the charts' box (a later run or language draws again)
    if (mine !== pending) return;
    drawn = null;
    delete root.dataset.drawn;
    root.hidden = false;
    for (const old of root.querySelectorAll(".rc-figure, .error-text")) old.remove();  // the heading stays
    root.append(el("p", { class: "error-text", text: `${L("run_charts")}: ${err.message || err}` }));
  }
}

async function paint(root, mine, want) {
  root.dataset.phase = "loading";
  const [Plotly, figs] = await Promise.all([loadPlotly(), Promise.all(FIGURES.map((name) =>
    fetch(`/api/runs/${encodeURIComponent(want.runId)}/figures/${name}?theme=${want.theme}&lang=${want.lang}`)
      .then((r) => (r.ok ? r.json() : Promise.reject(new Error(`${name}: HTTP ${r.status}`))))))]);
  if (mine !== pending) return;
  if (!Plotly) throw new Error("plotly.js did not load");
  root.querySelector(".error-text")?.remove();
  root.hidden = false;
  root.setAttribute("aria-label", L("run_charts"));
  for (const [i, name] of FIGURES.entries()) {
    let fig = root.querySelector(`[data-figure="${name}"]`);
    if (!fig) {
      fig = el("div", { class: "rc-figure", dataset: { figure: name } }, [el("div", { class: "rc-plot" }), el("div", { class: "rc-marker", "aria-hidden": "true" })]);
      root.append(fig);
      fig.firstChild.addEventListener("click", (e) => pick(fig.firstChild, e));
    }
    const gd = fig.firstChild;
    root.dataset.phase = `drawing ${name}`;
    fig.setAttribute("role", "group");
    fig.setAttribute("aria-label", figs[i].layout.title ? figs[i].layout.title.text : name);
    await Plotly.react(gd, figs[i].data, figs[i].layout, { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"],
      ...(state.lang === "zh" ? { locale: "zh-CN", locales: PLOTLY_LOCALES.zh } : {}) });
    if (!gd.dataset.wired) { gd.on("plotly_afterplot", () => moveMarker(fig)); gd.dataset.wired = "1"; }
    moveMarker(fig);
  }
  drawn = want;
  root.dataset.drawn = String(FIGURES.length);
  root.dataset.phase = "drawn";
}

// the step under the pointer, from the figure's x axis (a step is a whole number)
function stepAt(gd, clientX) {
  const fl = gd._fullLayout;
  if (!fl || !fl.xaxis) return null;
  const px = clientX - gd.getBoundingClientRect().left - fl._size.l;
  if (px < 0 || px > fl._size.w) return null;
  return Math.round(fl.xaxis.p2l(px));
}

function pick(gd, e) {
  const n = stepAt(gd, e.clientX);
  if (n === null || !S.overview || n < 1 || n > S.overview.num_steps) return;
  ctl.stopPlay();
  ctl.showStep(n);
}

// the marker of the current step: a vertical band over the figure's plot area, moved by a
// transform (the figure itself is not redrawn)
function moveMarker(fig) {
  const gd = fig.firstChild, mark = fig.lastChild, fl = gd._fullLayout;
  const n = S.trace ? S.trace.step : state.step;
  if (!fl || !fl.xaxis || !n) { mark.hidden = true; return; }
  const w = Math.max(2, Math.abs(fl.xaxis.l2p(n + 0.5) - fl.xaxis.l2p(n - 0.5)));
  const x = fl._size.l + fl.xaxis.l2p(n) - w / 2;
  mark.hidden = false;
  mark.style.cssText = `top:${fl._size.t}px;height:${fl._size.h}px;width:${w}px;transform:translateX(${x}px)`;
  mark.dataset.step = String(n);
}

onView((what) => {
  if (what === "run" || what === "lang") draw();
  else if (what === "step") {
    if (drawn) for (const fig of box().querySelectorAll(".rc-figure")) moveMarker(fig);
  }
});
dark.addEventListener("change", () => { if (drawn) draw(); });
// this module may run after the page's run has loaded (its script came late): that run's charts
draw();
