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
import { lightArray, select } from "./hover.js";
import { bringIntoView, viewNode } from "./lessonlook.js";
import { stageText, t } from "./i18n.js";
import { refButton, refSelection } from "./narration.js";
import { openCheckpoint } from "./predict.js";
import { toSearch, writeState } from "./urlstate.js";
import { $, L, S, stageFlavor, state } from "./context.js";
import { clear, el } from "./views.js";

// lesson, the run ids of its scenarios, the section asked for last and the one on show, the run the
// section opened, whether the wrap-up shows, each checkpoint's verdict at its first check
const LS = { lesson: null, runIds: new Map(), want: -1, opened: null, runId: null, ending: false, firstTry: new Map() };
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

// Nothing of the previous section survives that this one did not ask for: the selection, the
// focused request (and "only this request"), the array in focus, a linked note, a hover, a
// checkpoint still open, the step player.
function clearView() {
  ctl.stopPlay();
  openCheckpoint(null);
  // (a link to this section's own note keeps it: it is the section's "#" link, opened)
  const note = state.note === `lesson-${LS.want}` ? state.note : "";
  Object.assign(state, { req: "", pos: -1, block: -1, slot: -1, tok: -1, array: "", note });
  S.sel = null;
  S.hover = null;
  S.focusOnly = false;
  lightArray(null);
}

// ------------------------------------------------------------------ the section's address
// The one place the lesson writes the address bar: the section's own view (run, step, stage, its
// selection, sec), written at once. What a checkpoint must not give away before Check is to be
// taken out here, in addressState(), and the section's "#" link is made from the same state.
function addressState() { return state; }

function writeSectionAddress() {
  writeState(addressState(), { settled: true });
  refreshNoteLink();
}

// the section's "#" link: this section's address with note=lesson-<section>
const noteId = () => `lesson-${state.sec}`;
const noteHref = () => window.location.pathname + toSearch({ ...addressState(), note: noteId() });

function refreshNoteLink() {
  const a = $("lesson-note");
  if (a) { a.href = noteHref(); a.title = L("note_link"); a.setAttribute("aria-label", L("note_link")); }
}

function noteLink() {
  return el("a", { id: "lesson-note", class: "note-link", href: noteHref(), title: L("note_link"), "aria-label": L("note_link"), text: "#",
    onmouseenter: refreshNoteLink, onfocus: refreshNoteLink,
    onclick: (e) => {
      e.preventDefault();
      state.note = noteId();
      writeSectionAddress();
      document.querySelectorAll(".note-target").forEach((n) => n.classList.remove("note-target"));
      $("lesson-text").classList.add("note-target");
    } });
}

// open section k: its run (in place), step, stage and selection, then its checkpoint. One section
// opens at a time (a run loading in place must finish before another starts); a section asked for
// while another opens waits, and only the last one asked for is opened.
let opening = Promise.resolve();
export function goSection(k) {
  const L_ = LS.lesson;
  if (!L_) return opening;
  k = Math.max(0, Math.min(L_.sections.length - 1, k));
  // the panel and its buttons count from the section asked for at once, even while another opens
  LS.want = k;
  state.sec = k;
  LS.ending = false;
  document.body.dataset.lessonReady = "0";
  renderLesson();
  opening = opening.then(() => (LS.want === k && LS.opened !== k ? openSection(k) : finishIfShown(k)))
    .catch((err) => console.error(err));
  return opening;
}

// a section asked for again (while it was opening, or from the list while on show): it is on
// show, ready, its panel from the top and its views in sight again
function finishIfShown(k) {
  if (LS.want !== k || LS.opened !== k) return;
  bringIntoView(LS.lesson.sections[k]);
  document.body.dataset.lessonReady = "1";
}

async function openSection(k) {
  const sec = LS.lesson.sections[k];
  LS.opened = null;
  clearView();
  const rid = await runIdOf(sec.scenario);
  if (LS.want !== k) return;
  if (!S.created || rid !== S.created.run_id) {
    if (typeof sec.scenario === "string") await ctl.load({ preset: sec.scenario }, { step: sec.step, stage: sec.stage });
    else {
      const r = await postJSON("/api/runs", sec.scenario);
      if (!r.ok) { $("lesson-msg").textContent = errorLines(r.data).join("; "); return; }
      await ctl.load({ link: r.data.link }, { step: sec.step, stage: sec.stage });
    }
  } else if (state.step !== sec.step) await ctl.showStep(sec.step);
  if (LS.want !== k || !S.trace) return;  // another section was asked for meanwhile: it opens next
  if (state.stage !== sec.stage) ctl.setStage(sec.stage);
  LS.runId = S.created.run_id;
  applySectionSelection(sec);
  // the section's own address at once, even after a burst of writes (Next and Back in quick succession)
  writeSectionAddress();
  renderLesson();
  openCheckpoint(sec.checkpoint ? { ...sec.checkpoint, step: sec.step, container: $("lesson-check"), source: "lesson" } : null);
  bringIntoView(sec);
  LS.opened = k;
  document.body.dataset.lessonSection = String(k);
  document.body.dataset.lessonReady = "1";
}

// The section's selection, lit up and in the address. A request that is not in this step's batch
// (preempted, waiting, finished) is focused all the same, as the focus box does: the queue, the
// overview and the focus box show it, and req=<id> names it.
function applySectionSelection(sec) {
  const s = sec.selection;
  const sel = s ? refSelection(s) : null;
  select(sel);
  if (!sel && s && s.kind === "request" && S.overview.scenario.requests.some((r) => String(r.id) === String(s.id))) {
    state.req = String(s.id);
    S.sel = null;
  }
  if (S.onFocusChange) S.onFocusChange();  // the focus box and the views that mark the focus
}

// whether the page shows the section's own view (its run and step)
function atSection() {
  const sec = LS.lesson && LS.lesson.sections[state.sec];
  return Boolean(sec && S.created && S.created.run_id === LS.runId && state.step === sec.step);
}

// "step 2 / 5 · stage · run title": what the page shows, wherever it is scrolled; and, when the
// student has stepped away from the section's step, a line that says so with the way back
function renderWhere() {
  const L_ = LS.lesson;
  if (!L_ || !$("lesson-where") || !S.overview) return;
  const sec = L_.sections[state.sec];
  const [stageTitle] = stageText(state.lang, state.stage, stageFlavor());
  // the step and stage first: the line is cut at its end when the run's title is long (whole in its title)
  const where = $("lesson-where");
  where.textContent = `${L("step")} ${state.step} / ${S.overview.num_steps} · ${stageTitle} · ${$("run-title").textContent}`;
  where.parentElement.title = where.textContent;
  const away = $("lesson-away");
  const off = document.body.dataset.lessonReady === "1" && !atSection();
  away.hidden = !off;
  if (off) {
    const [secStage] = stageText(state.lang, sec.stage, stageFlavor());
    clear(away).append(el("span", { text: L("lesson_away").replace("{n}", sec.step).replace("{s}", secStage).replace("{m}", state.step) }), " ",
      el("button", { type: "button", class: "small", id: "lesson-back", text: L("lesson_back"), onclick: backToSection }));
  }
}

// the way back: the section's step and stage on the same run (the answers typed so far kept), else the whole section
async function backToSection() {
  const sec = LS.lesson.sections[state.sec];
  if (!S.created || S.created.run_id !== LS.runId) { await goSection(state.sec); return; }
  ctl.stopPlay();
  await ctl.showStep(sec.step);
  ctl.setStage(sec.stage);
  renderWhere();
  bringIntoView(sec);
}

const ESC = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

// the paragraph with its names made links: an array's name shows and lights the array; "request
// 2", "block 5", "row 0", "token 7" (请求 2, 块 5, 第 0 行) light and select what they name
function linkedText(text) {
  const arrays = S.trace ? Object.keys(S.trace.arrays).sort((a, b) => b.length - a.length) : [];
  const parts = [...arrays.map((a) => `\\b${ESC(a)}\\b`), "[Rr]equest ([\\w-]+)\\b", "请求 ([\\w-]+)", "[Bb]lock (\\d+)\\b", "(?<!每)块 (\\d+)",
    "[Rr]ow (\\d+)\\b", "第 (\\d+) 行", "[Tt]oken (\\d+)\\b"];
  const re = new RegExp(parts.map((p) => `(${p})`).join("|"), "g");
  const kinds = ["request", "request", "block", "block", "row", "row", "token"];
  const out = [];
  let last = 0;
  for (const m of text.matchAll(re)) {
    out.push(text.slice(last, m.index));
    last = m.index + m[0].length;
    if (arrays.includes(m[0])) {
      out.push(el("button", { type: "button", class: "lesson-ref ref", dataset: { shows: m[0] }, title: L("lesson_show"), text: m[0], onclick: () => showArray(m[0]) }));
      continue;
    }
    // the groups after the arrays' come in pairs (whole match, id): find which kind matched
    let g = 1 + arrays.length, kind = null, id = null;
    for (const kd of kinds) { if (m[g] !== undefined) { kind = kd; id = m[g + 1]; break; } g += 2; }
    if (!kind || (kind === "request" && S.trace && !S.overview.scenario.requests.some((r) => String(r.id) === id))) { out.push(m[0]); continue; }
    out.push(refButton({ kind, id: kind === "request" ? id : Number(id) }, m[0]));
  }
  out.push(text.slice(last));
  return out;
}

// an array named in the text: lit in every view and scrolled to
function showArray(name) {
  lightArray(name);
  const n = viewNode(name);
  if (n) n.scrollIntoView({ block: "center", inline: "nearest", behavior: "smooth" });
}

// the end of the lesson: what was done, and where to go from here
function renderEnd() {
  const L_ = LS.lesson;
  const box = clear($("lesson-end"));
  box.hidden = !LS.ending;
  if (!LS.ending) return;
  const cps = L_.sections.map((s, i) => [s, i]).filter(([s]) => s.checkpoint);
  const right = cps.filter(([, i]) => LS.firstTry.get(i) === true).length;
  const home = `/${state.lang === "zh" ? "?lang=zh" : ""}`;
  box.append(el("h3", { text: L("lesson_end_h") }),
    el("p", { text: L("lesson_end_text").replace("{n}", L_.sections.length).replace("{right}", right).replace("{total}", cps.length) }),
    el("ol", { class: "lesson-end-list" }, L_.sections.map((s, i) => el("li", {}, [
      `${pick(s.title, state.lang) || L("section")}`, s.checkpoint ? ` ${LS.firstTry.get(i) === true ? "✓" : LS.firstTry.has(i) ? "✗" : "–"}` : ""]))),
    el("div", { class: "controls" }, [
      el("button", { type: "button", id: "lesson-again", onclick: () => { LS.firstTry.clear(); goSection(0); }, text: L("lesson_end_again") }),
      el("a", { class: "button", href: home, text: L("lesson_end_home") })]));
  box.scrollIntoView({ block: "nearest" });
}

function finish() {
  LS.ending = true;
  renderLesson();
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
  const text = pick(sec.paragraph, lang);
  const body = $("lesson-text");
  clear(body).append(...(S.created && S.created.run_id === LS.runId ? linkedText(text) : [text]));
  body.dataset.note = noteId();
  refreshNoteLink();
  $("lesson-prev").disabled = k === 0;
  const last = k >= L_.sections.length - 1;
  const next = $("lesson-next");
  next.disabled = last && LS.ending;
  next.dataset.i18n = last ? "lesson_finish" : "next_section";
  next.textContent = L(next.dataset.i18n);
  const list = clear($("lesson-toc"));
  L_.sections.forEach((s, i) => list.append(el("li", {}, el("button", {
    type: "button", class: `small toc-btn${i === k ? " active" : ""}`, "aria-current": i === k ? "step" : null,
    dataset: { sec: i }, text: `${i + 1}. ${pick(s.title, lang) || L("section")}`, onclick: () => goSection(i),
  }))));
  renderWhere();
  renderEnd();
}

// The panel, laid out for one screen at 1280 x 720: Back and Next at its top (never below the
// fold, however long the paragraph), the run on show in one line, the section's title with its "#"
// link, the paragraph, the checkpoint; sharing and the list of sections below.
function buildPanel() {
  const section = el("section", { id: "lesson", class: "lesson", "aria-labelledby": "lesson-title" }, [
    el("div", { class: "lesson-nav" }, [
      el("button", { type: "button", id: "lesson-prev", class: "small", dataset: { i18n: "prev_section" }, text: L("prev_section"), onclick: () => goSection(state.sec - 1) }),
      el("span", { id: "lesson-pos", class: "lesson-pos" }),
      el("button", { type: "button", id: "lesson-next", class: "primary", dataset: { i18n: "next_section" }, text: L("next_section"), onclick: () => (state.sec >= LS.lesson.sections.length - 1 ? finish() : goSection(state.sec + 1)) }),
    ]),
    el("div", { class: "lesson-kicker muted" }, [el("span", { dataset: { i18n: "lesson" }, text: L("lesson") }), " · ", el("h2", { id: "lesson-title" })]),
    el("p", { class: "lesson-where muted" }, [el("span", { dataset: { i18n: "lesson_where" }, text: L("lesson_where") }), ": ", el("span", { id: "lesson-where" })]),
    el("div", { class: "lesson-sec-head" }, [el("h3", { id: "lesson-sec-title" }), noteLink()]),
    el("p", { id: "lesson-text", class: "lesson-text", "aria-live": "polite" }),
    el("p", { id: "lesson-away", class: "lesson-away", role: "status", hidden: true }),
    el("div", { id: "lesson-check", class: "lesson-check" }),
    el("div", { id: "lesson-end", class: "lesson-end", role: "status", hidden: true }),
    el("div", { class: "controls lesson-foot" }, [
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
  onView((what) => {
    // another run on show (a what-if, a rerun): the section is no longer on show as it opened it
    if (what === "run" && S.created && S.created.run_id !== LS.runId) LS.opened = null;
    if (what === "lang") renderLesson(); else renderWhere();
  });
  // the run's title is written (and, in 中文, translated) after the run loads: the line follows it
  new MutationObserver(() => renderWhere()).observe($("run-title"), { childList: true, characterData: true, subtree: true });
  // a checkpoint's first check counts for the wrap-up
  document.addEventListener("pagedviz:checked", (e) => {
    if (e.detail.source === "lesson" && !LS.firstTry.has(state.sec)) LS.firstTry.set(state.sec, Boolean(e.detail.all_correct));
  });
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
