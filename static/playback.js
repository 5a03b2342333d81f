// Stage-by-stage playback: one step played through its stages in order, each stage held long
// enough to read its narration (narration.js follows the stage), at the step bar's one speed
// (×1: DWELL_MS a stage), stopping at the pause points the reader marks. What a stage writes is
// made visible from the back of a room: its rows flash in the warning colour and slide in, and
// stay outlined while the stage is on show. Keyboard: the buttons, or "p" to play / pause /
// continue.

import { ctl, onView } from "./bus.js";
import { stageText } from "./i18n.js";
import { $, L, S, stageFlavor, stageNames, state } from "./context.js";
import { clear, el, needsBuild, setText } from "./views.js";

const DWELL_MS = 1500;
let dwellMs = DWELL_MS;  // how long a stage stays at ×1 (the step bar's speed)
const P = { timer: null, paused: false, pausePoints: new Set(), step: null, ours: false };

// tests shorten the hold; the page itself never calls this
export function setDwell(ms) { dwellMs = ms; }

export function isPlaying() { return P.timer !== null; }

function label() {
  const names = stageNames();
  const i = names.indexOf(state.stage);
  setText($("pb-pos"), `${L("stage")} ${i + 1} / ${names.length}`);
  const btn = $("pb-play");
  const key = P.timer ? "pb_pause" : P.paused ? "pb_continue" : "pb_play";
  btn.dataset.i18n = key;
  // the pause sign is drawn by CSS (two bars): a font without ⏸ shows an empty box
  if (key === "pb_pause") {
    if (!btn.querySelector(".glyph-pause") || btn.textContent !== ` ${L(key)}`) btn.replaceChildren(el("span", { class: "glyph-pause", "aria-hidden": "true" }), ` ${L(key)}`);
  } else setText(btn, L(key));
  btn.setAttribute("aria-pressed", P.timer ? "true" : "false");
  setText($("pb-status"), P.paused ? L("pb_paused_at").replace("{stage}", stageText(state.lang, state.stage, stageFlavor())[0]) : "");
}

function schedule() {
  clearTimeout(P.timer);
  P.timer = setTimeout(tick, dwellMs / (S.speed || 1));
}

// what the stage just shown writes: its token rows and its values, marked as new (the mark's
// animation runs once, on the rows the stage's render just built)
function markNew() {
  for (const node of document.querySelectorAll("#token-table tr.current, #stage-values, .stage-btn.active")) node.classList.add("pb-new");
}

function tick() {
  const names = stageNames();
  const i = names.indexOf(state.stage);
  if (i < 0 || i + 1 >= names.length) { stop(); return; }
  const next = names[i + 1];
  P.ours = true;
  ctl.setStage(next);
  P.ours = false;
  markNew();
  if (i + 2 >= names.length) { stop(); return; }
  if (P.pausePoints.has(next)) { P.timer = null; P.paused = true; label(); return; }
  schedule();
  label();
}

export function play() {
  ctl.stopPlay();
  const names = stageNames();
  if (!names.length) return;
  P.step = state.step;
  if (!P.paused && names.indexOf(state.stage) >= names.length - 1) {
    P.ours = true;
    ctl.setStage(names[0]);  // from the top again
    P.ours = false;
  }
  P.paused = false;
  schedule();
  label();
}

export function stop() {
  clearTimeout(P.timer);
  P.timer = null;
  P.paused = false;
  if ($("pb-play")) label();
}

function pause() {
  clearTimeout(P.timer);
  P.timer = null;
  P.paused = true;
  label();
}

function toggle() { if (P.timer) pause(); else play(); }

// the buttons are built again only when the run's stages or the language change (a step change
// keeps them, and the keyboard focus on one of them); their marks follow the chosen points
function renderPausePoints() {
  const box = $("pb-points");
  if (!needsBuild(box, [stageNames(), state.lang, S.overview.flavor])) {
    for (const b of box.children) {
      const on = P.pausePoints.has(b.dataset.stage) ? "true" : "false";
      if (b.getAttribute("aria-pressed") !== on) b.setAttribute("aria-pressed", on);
    }
    return;
  }
  clear(box);
  stageNames().forEach((name, i) => {
    const [title] = stageText(state.lang, name, stageFlavor());
    const on = P.pausePoints.has(name);
    box.append(el("button", {
      type: "button", class: "small pb-point", "aria-pressed": on ? "true" : "false", dataset: { stage: name },
      "aria-label": `${L("pb_pause_at")}: ${i + 1}. ${title}`, title: `${i + 1}. ${title}`, text: String(i + 1),
      onclick: (e) => {
        if (P.pausePoints.has(name)) P.pausePoints.delete(name); else P.pausePoints.add(name);
        e.currentTarget.setAttribute("aria-pressed", P.pausePoints.has(name) ? "true" : "false");
      },
    }));
  });
}

// pause points chosen by another module (a lesson's checkpoint stages)
export function setPausePoints(names) {
  P.pausePoints = new Set(names);
  if ($("pb-points") && S.trace) renderPausePoints();
}

function build() {
  const section = el("section", { id: "playback", class: "playback", "aria-labelledby": "pb-h" }, [
    el("h2", { id: "pb-h", dataset: { i18n: "pb_title" }, text: L("pb_title") }),
    el("div", { class: "controls" }, [
      el("button", { type: "button", id: "pb-play", class: "primary", "aria-keyshortcuts": "p", onclick: toggle }),
      el("button", { type: "button", id: "pb-stop", dataset: { i18n: "pb_stop" }, text: L("pb_stop"), onclick: stop }),
      el("span", { id: "pb-pos", class: "muted" }),
    ]),
    el("p", { id: "pb-status", class: "pb-status", role: "status" }),
    el("div", { class: "pb-points-row" }, [el("span", { class: "muted", dataset: { i18n: "pb_pause_at" }, text: L("pb_pause_at") }),
      el("div", { id: "pb-points", class: "pb-points", role: "group", "aria-label": L("pb_pause_at") })]),
  ]);
  $("teach-side").prepend(section);
}

export function initPlayback() {
  build();
  // the step bar's speed is the stages' speed too: a change applies to the stage on show
  $("speed").addEventListener("change", () => { if (P.timer) schedule(); });
  onView((what) => {
    if ((what === "step" || what === "run") && state.step !== P.step) stop();
    if (what === "stage" && !P.ours && P.paused) { P.paused = false; }
    if (what !== "stage" || !S.trace) renderPausePoints();
    label();
  });
  document.addEventListener("keydown", (e) => {
    const tag = (e.target.tagName || "").toLowerCase();
    if (["input", "textarea", "select"].includes(tag) || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "p" && S.overview) { toggle(); e.preventDefault(); }
  });
}
