// Lessons: prose bound to the views. A lesson (GET /api/lessons/{id}, or a lecturer's own file
// packed into a link, GET /api/lessons/from-link?l=...) is a list of sections, each naming a
// scenario, a step, a stage, a selection and a paragraph (core/lesson.py). On the run page the
// lesson panel drives the view as the reader moves through the sections: it loads the section's
// run in place when it is another one, opens its step and stage and lights up its selection; a
// section with a checkpoint asks for a prediction first (predict.js). On the landing page the
// lessons come first ("start here"), and a lecturer loads a lesson file, which the server checks
// field by field and packs into a link to share.

import { errorLines, getJSON, postJSON } from "./api.js";
import { ctl, onView } from "./bus.js";
import { select } from "./hover.js";
import { t } from "./i18n.js";
import { refSelection } from "./narration.js";
import { openCheckpoint } from "./predict.js";
import { writeState } from "./state.js";
import { $, L, S, state } from "./trace.js";
import { clear, el } from "./views.js";

const LS = { lesson: null, runIds: new Map(), going: 0 };
let runReady = null;

export const lessonNow = () => LS.lesson;

const pick = (text, lang) => (text ? text[lang] || text.en || text.zh || "" : "");

// ------------------------------------------------------------------ landing page
// The "start here" cards of the shipped lessons, and the lecturer's loader of a lesson file.
export async function lessonGallery(box, lang) {
  const r = await getJSON(`/api/lessons?lang=${lang}`);
  clear(box);
  if (!r.ok) { box.append(el("p", { class: "error-text", text: errorLines(r.data).join("; ") })); return; }
  const q = lang === "zh" ? "&lang=zh" : "";
  for (const x of r.data) {
    const href = `/run?lesson=${encodeURIComponent(x.id)}${q}`;
    box.append(el("article", { class: "lesson-card", dataset: { lesson: x.id } }, [
      el("h3", {}, [el("a", { href, text: x.title })]),
      el("p", { class: "meta" }, [x.minutes ? `${x.minutes} ${t(lang, "minutes")} · ` : "", `${x.num_sections} ${t(lang, "sections")}`]),
      el("p", { text: x.summary }),
      el("a", { class: "button primary", href, text: t(lang, "start_lesson") }),
    ]));
  }
}

// a lecturer's lesson file: checked by the server; a valid one comes back packed into a link
export async function checkLessonFile(text) {
  let data;
  try { data = JSON.parse(text); } catch (err) { return { ok: false, lines: [`JSON: ${err.message}`] }; }
  const r = await postJSON("/api/lessons/validate", data);
  if (!r.ok) return { ok: false, lines: errorLines(r.data) };
  if (!r.data.valid) return { ok: false, lines: r.data.detail.map((d) => (d.field ? `${d.field}: ${d.message}` : d.message)) };
  return { ok: true, link: r.data.link, lesson: r.data.lesson };
}

export function lessonUrl(link, lang, sec = 0) {
  return `${window.location.origin}/run?l=${encodeURIComponent(link)}${sec ? `&sec=${sec}` : ""}${lang === "zh" ? "&lang=zh" : ""}`;
}

// the file input, its problems (each naming its field) and, once valid, the link to share
export function wireLessonLoader(input, out, lang) {
  input.addEventListener("change", () => {
    const file = input.files[0];
    if (!file) return;
    const reader = new FileReader();
    reader.onload = async () => {
      const res = await checkLessonFile(String(reader.result));
      clear(out);
      out.classList.toggle("bad", !res.ok);
      out.classList.toggle("ok", res.ok);
      if (!res.ok) { out.append(el("ul", {}, res.lines.map((l) => el("li", { text: `${file.name}: ${l}` })))); return; }
      const url = lessonUrl(res.link, lang);
      out.append(el("p", {}, [`✓ ${pick(res.lesson.title, lang)} · ${res.lesson.sections.length} ${t(lang, "sections")}`]),
        el("label", {}, [el("span", { text: t(lang, "share_link") }), " ",
          el("input", { id: "lesson-link", class: "link-out", readonly: true, value: url, "aria-label": t(lang, "share_link") })]),
        " ", el("a", { class: "button primary", id: "lesson-open", href: url, text: t(lang, "start_lesson") }));
    };
    reader.readAsText(file);
  });
}

// ------------------------------------------------------------------ run page
async function fetchLesson() {
  if (state.lesson) return getJSON(`/api/lessons/${encodeURIComponent(state.lesson)}`);
  return getJSON(`/api/lessons/from-link?l=${encodeURIComponent(state.l)}`);
}

// the run id a section's scenario has (content-addressed: the server tells it without running it)
async function runIdOf(ref) {
  const key = JSON.stringify(ref);
  if (!LS.runIds.has(key)) {
    LS.runIds.set(key, (async () => {
      let scenario = ref;
      if (typeof ref === "string") {
        const p = await getJSON(`/api/presets/${encodeURIComponent(ref)}`);
        if (!p.ok) return null;
        scenario = p.data.scenario;
      }
      const v = await postJSON("/api/scenarios/validate", scenario);
      return v.ok && v.data.valid ? v.data.run_id : null;
    })());
  }
  return LS.runIds.get(key);
}

// open section k: its run (in place), step, stage and selection, then its checkpoint
export async function goSection(k) {
  const L_ = LS.lesson;
  if (!L_) return;
  k = Math.max(0, Math.min(L_.sections.length - 1, k));
  const mine = ++LS.going;
  const sec = L_.sections[k];
  state.sec = k;
  renderLesson();
  const rid = await runIdOf(sec.scenario);
  if (mine !== LS.going) return;
  if (!S.created || rid !== S.created.run_id) {
    if (typeof sec.scenario === "string") await ctl.load({ preset: sec.scenario }, { step: sec.step, stage: sec.stage });
    else {
      const r = await postJSON("/api/runs", sec.scenario);
      if (!r.ok) { $("lesson-msg").textContent = errorLines(r.data).join("; "); return; }
      await ctl.load({ link: r.data.link }, { step: sec.step, stage: sec.stage });
    }
  } else {
    if (state.step !== sec.step) await ctl.showStep(sec.step);
    ctl.setStage(sec.stage);
  }
  if (mine !== LS.going) return;
  if (state.stage !== sec.stage) ctl.setStage(sec.stage);
  const sel = sec.selection ? refSelection(sec.selection) : null;
  select(sel);
  state.sec = k;
  writeState(state);
  renderLesson();
  openCheckpoint(sec.checkpoint ? { ...sec.checkpoint, step: sec.step, container: $("lesson-check"), source: "lesson" } : null);
  document.body.dataset.lessonSection = String(k);
}

function renderLesson() {
  const L_ = LS.lesson;
  const box = $("lesson");
  if (!L_ || !box) return;
  const k = state.sec;
  const sec = L_.sections[k];
  const lang = state.lang;
  $("lesson-title").textContent = pick(L_.title, lang);
  $("lesson-pos").textContent = `${L("section")} ${k + 1} / ${L_.sections.length}`;
  $("lesson-sec-title").textContent = pick(sec.title, lang) || `${L("section")} ${k + 1}`;
  $("lesson-text").textContent = pick(sec.paragraph, lang);
  $("lesson-prev").disabled = k === 0;
  $("lesson-next").disabled = k >= L_.sections.length - 1;
  const list = clear($("lesson-toc"));
  L_.sections.forEach((s, i) => list.append(el("li", {}, el("button", {
    type: "button", class: `small toc-btn${i === k ? " active" : ""}`, "aria-current": i === k ? "step" : null,
    dataset: { sec: i }, text: `${i + 1}. ${pick(s.title, lang) || L("section")}`, onclick: () => goSection(i),
  }))));
}

function buildPanel() {
  const section = el("section", { id: "lesson", class: "lesson", "aria-labelledby": "lesson-title" }, [
    el("p", { class: "lesson-kicker muted" }, [el("span", { dataset: { i18n: "lesson" }, text: L("lesson") }), " · ", el("span", { id: "lesson-pos" })]),
    el("h2", { id: "lesson-title" }),
    el("h3", { id: "lesson-sec-title" }),
    el("p", { id: "lesson-text", class: "lesson-text", "aria-live": "polite" }),
    el("div", { id: "lesson-check", class: "lesson-check" }),
    el("div", { class: "controls" }, [
      el("button", { type: "button", id: "lesson-prev", dataset: { i18n: "prev_section" }, text: L("prev_section"), onclick: () => goSection(state.sec - 1) }),
      el("button", { type: "button", id: "lesson-next", class: "primary", dataset: { i18n: "next_section" }, text: L("next_section"), onclick: () => goSection(state.sec + 1) }),
      el("button", { type: "button", id: "lesson-share", class: "small", dataset: { i18n: "share_link" }, text: L("share_link"), onclick: share }),
    ]),
    el("input", { id: "lesson-link", class: "link-out", readonly: true, hidden: true, "aria-label": L("share_link") }),
    el("details", { class: "lesson-toc-box" }, [el("summary", { dataset: { i18n: "sections_all" }, text: L("sections_all") }),
      el("ol", { id: "lesson-toc", class: "lesson-toc" })]),
    el("p", { id: "lesson-msg", class: "error-text", role: "alert" }),
  ]);
  $("teach-side").prepend(section);
}

// the lesson's own link at this section (a shipped lesson by id, a lecturer's packed)
async function share() {
  const q = new URLSearchParams();
  if (state.lesson) q.set("lesson", state.lesson); else q.set("l", state.l);
  if (state.sec) q.set("sec", String(state.sec));
  if (state.lang === "zh") q.set("lang", "zh");
  const url = `${window.location.origin}/run?${q}`;
  const out = $("lesson-link");
  out.value = url;
  out.hidden = false;
  out.select();
  try { await navigator.clipboard.writeText(url); } catch (_) { /* the selected field is the fallback */ }
}

export function initLesson() {
  if (!state.lesson && !state.l) return;
  buildPanel();
  document.body.classList.add("with-lesson");
  runReady = new Promise((resolve) => onView((what) => { if (what === "run") resolve(); }));
  onView((what) => { if (what === "lang") renderLesson(); });
  (async () => {
    const r = await fetchLesson();
    if (!r.ok) {
      $("lesson-title").textContent = L("lesson");
      $("lesson-msg").textContent = errorLines(r.data).join("; ");
      return;
    }
    LS.lesson = r.data;
    await runReady;
    await goSection(state.sec);
  })();
}
