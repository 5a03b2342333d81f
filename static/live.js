// The run page following a live run (POST /api/runs/live: a vLLM server's recorder sends its steps
// to pagedviz as it schedules them). The run page's own follow of a run still computing grows the
// step bar as steps arrive; this adds a "live" mark while the run is live and a "follow" toggle
// that keeps the newest step in view: on by default while live, turned off by choosing a step by
// hand (a step button, the arrows, the player). When the run closes the mark says it ended.
// document.body.dataset.live says "1" while live, "0" once ended (for tests and readers).

import "./strings_live.js";
import { ctl, onView } from "./bus.js";
import { $, L, S, state } from "./context.js";
import { el } from "./views.js";

let box = null, mark = null, toggle = null;
let following = false, moving = false, timer = null;
let target = 0;  // the step the follow last moved to: any other step shown was chosen by hand
let chosen = 0;  // the step chosen by hand that turned the follow off (a move under way then yields to it)

function setFollow(on) {
  following = on;
  chosen = on ? 0 : state.step;
  if (toggle) toggle.setAttribute("aria-pressed", on ? "true" : "false");
  document.body.dataset.follow = on ? "1" : "0";
}

function texts() {
  if (!box) return;
  const ended = document.body.dataset.live === "0";
  mark.textContent = ended ? L("live_ended") : L("live_mark");
  mark.style.color = ended ? "#555" : "#b00020";
  mark.title = ended ? L("live_ended_title") : L("live_title");
  toggle.textContent = L("live_follow");
  toggle.title = L("live_follow_title");
}

function show() {
  if (!box) {
    mark = el("span", { class: "live-mark", role: "status", style: "font-weight:600;margin-left:.75em" });
    toggle = el("button", { type: "button", class: "live-follow", "aria-pressed": "true", onclick: () => { setFollow(!following); tick(); } });
    box = el("span", { id: "live", class: "live" }, [mark, " ", toggle]);
    const label = $("step-label");
    label.parentNode.insertBefore(box, label.nextSibling);
  }
  box.hidden = false;
  target = state.step;
  toggle.style.display = "";
  document.body.dataset.live = "1";
  setFollow(true);
  texts();
  clearInterval(timer);
  timer = setInterval(tick, 250);
}

// the newest step in view while following (the run page has grown the step bar meanwhile)
function tick() {
  if (!following || moving || !S.overview) return;
  const last = S.overview.num_steps;
  if (last > 0 && state.step !== last) {
    moving = true;
    target = last;
    Promise.resolve(ctl.showStep(last)).catch(() => {}).finally(() => {
      moving = false;
      if (!following && chosen && state.step !== chosen) Promise.resolve(ctl.showStep(chosen)).catch(() => {});  // the reader's choice stands
    });
  }
}

function ended() {
  clearInterval(timer);
  timer = null;
  if (!box || document.body.dataset.live !== "1") return;
  document.body.dataset.live = "0";
  tick();  // the last steps in view once more, if following
  toggle.style.display = "none";  // nothing more arrives
  texts();
}

export function initLive() {
  onView((what) => {
    if (what === "run") {
      if (S.created && S.created.live === true && S.overview && S.overview.complete === false) show();
      else if (box) { clearInterval(timer); box.hidden = true; delete document.body.dataset.live; }
    } else if (what === "complete") ended();
    else if (what === "step" && following && state.step !== target && document.body.dataset.live === "1") setFollow(false);  // chosen by hand
    else if (what === "lang") texts();
  });
}
