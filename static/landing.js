// The landing page: the preset gallery and a scenario editor checked live by the API.

import { errorLines, getJSON, postJSON, withProgress } from "./api.js";
import { applyI18n, docHref, progressText, t } from "./i18n.js";
import { readState, writeState } from "./urlstate.js";
import { clear, el, showUpstream } from "./views.js";
import { lessonGallery, wireLessonLoader } from "./lesson.js";
import { contrastLinks } from "./compare.js";
import { recordingsSection } from "./recordings.js";

const state = readState();
const $ = (id) => document.getElementById(id);
const L = (k) => t(state.lang, k);

// The form's fields in their order. The scenario's JSON Schema (GET /api/schema/scenario), when the
// server has it, adds each field's description, bounds, default and choices, and any config setting
// not listed here, so a new setting appears in the form without a change to this file.
const KNOWN = [
  ["name", "text"], ["flavor", ["vllm", "ascend", "nanovllm"]], ["seed", "int"], ["max_steps", "int"],
  ["engine", ["pagedviz", "vllm"]],
  ["block_size", "int"], ["max_model_len", "int"], ["max_num_reqs", "int"], ["max_num_batched_tokens", "int"],
  ["num_kv_blocks", "int"], ["long_prefill_token_threshold", "int"], ["enable_chunked_prefill", "bool"],
  ["enable_prefix_caching", "bool"], ["model", "bool"], ["device", ["auto", "cpu", "cuda", "npu"]],
];
const TOP = new Set(["name", "flavor", "seed", "max_steps", "engine"]);
// the engine's default is left out of the scenario, as the server writes it (so the run id is the same)
const LEFT_OUT = { engine: "pagedviz" };
let fields = [];  // {key, kind, top, prop, extra}: what the form shows, in order
// A setting only the schema lists (extra) is sent only when the loaded scenario gives it or the
// reader sets it: left alone, the server's default applies, which may depend on the flavour
// (model_runner and async_scheduling: V2 and async on vllm, v1 and sync elsewhere); the form shows
// such a choice as "(default)" and such a switch as neither on nor off.
let given = new Set();
const SCHEMA_URL = "/api/schema/scenario";
let schema = null;  // the scenario's JSON Schema, or null where the server has none
let extras = {};  // fields of a loaded scenario the form does not show (title, summary, model sizes, ...)

// a schema node with its "$ref" followed (within the schema itself)
function resolve(node) {
  let n = node || {};
  for (let i = 0; n.$ref && i < 16; i++) {
    n = n.$ref.replace(/^#\//, "").split("/").reduce((o, k) => (o ? o[decodeURIComponent(k)] : undefined), schema) || {};
  }
  return n;
}

// a property's form kind: a list of choices, "int", "number", "bool", "text", or null (not a form field)
function kindOf(prop) {
  const p = resolve(prop);
  const alts = (p.anyOf || p.oneOf || [p]).map(resolve).filter((a) => !(a.type === "null" || a.const === null));
  if (alts.length && alts.every((a) => a.enum || a.const !== undefined)) {
    const choices = alts.flatMap((a) => a.enum || [a.const]).filter((v) => v !== null);
    return choices.every((v) => typeof v === "string") ? choices : null;
  }
  const types = new Set(alts.flatMap((a) => [].concat(a.type || [])));
  types.delete("null");
  if (alts.length !== 1 || types.size !== 1) return null;
  return { integer: "int", number: "number", boolean: "bool", string: "text" }[[...types][0]] || null;
}

function buildFields() {
  const root = schema ? resolve(schema) : {};
  const top = root.properties || {};
  const cfg = (top.config && resolve(top.config).properties) || {};
  fields = KNOWN.map(([key, kind]) => {
    const prop = TOP.has(key) ? top[key] : cfg[key];
    const choices = Array.isArray(kind) && prop ? kindOf(prop) : null;
    return { key, kind: Array.isArray(choices) ? choices : kind, top: TOP.has(key), prop: prop ? resolve(prop) : null };
  });
  for (const [key, prop] of Object.entries(cfg)) {
    const kind = kindOf(prop);
    if (kind && !fields.some((f) => f.key === key)) fields.push({ key, kind, top: false, prop: resolve(prop), extra: true });
  }
}

const isNumeric = (kind) => kind === "int" || kind === "number";

// a field's help: its description (in 中文 from i18n.js's fh_<key>), bounds and default, from the schema
function helpOf(prop, key) {
  if (!prop) return "";
  const description = localHelp(key) || prop.description || "";
  const lo = prop.minimum ?? prop.exclusiveMinimum, hi = prop.maximum ?? prop.exclusiveMaximum;
  const bounds = lo !== undefined && hi !== undefined ? `${lo} … ${hi}` : lo !== undefined ? `≥ ${lo}` : hi !== undefined ? `≤ ${hi}` : "";
  const def = prop.default !== undefined && prop.default !== null ? `${L("default")} ${JSON.stringify(prop.default)}` : "";
  const facts = [bounds, def].filter(Boolean).join("; ");
  return [description, facts ? `(${facts})` : ""].filter(Boolean).join(" ");
}
// the field's description in the page's language where i18n.js has one ("" in English: the schema's)
function localHelp(key) {
  const k = `fh_${key}`;
  return state.lang === "zh" && key && t("zh", k) !== k ? t("zh", k) : "";
}

// a number as typed; undefined when empty (not sent: the server's default applies), anything else as typed (the API names it)
function num(input, kind = "int") {
  const raw = input.value.trim();
  if (raw === "") return undefined;
  const ok = kind === "int" ? /^-?\d+$/ : /^-?(\d+\.?\d*|\.\d+)(e-?\d+)?$/i;
  return ok.test(raw) ? Number(raw) : raw;
}

function buildConfigFields() {
  const box = clear($("config-fields"));
  for (const f of fields) {
    const id = `f-${f.key}`;
    const help = helpOf(f.prop, f.key);
    let input;
    if (Array.isArray(f.kind)) {
      const opts = f.kind.map((v) => el("option", { value: v, text: v }));
      // an extra setting left alone says so: the server picks its value
      if (f.extra) opts.unshift(el("option", { value: "", text: `(${L("default")})` }));
      input = el("select", { id }, opts);
    }
    else if (f.kind === "bool") input = el("input", { id, type: "checkbox" });
    else {
      input = el("input", { id, type: "text", inputmode: f.kind === "int" ? "numeric" : f.kind === "number" ? "decimal" : "text", autocomplete: "off",
        placeholder: f.prop && f.prop.default !== undefined && f.prop.default !== null && typeof f.prop.default !== "object" ? String(f.prop.default) : null });
    }
    if (help) input.setAttribute("aria-describedby", `help-${f.key}`);
    const touch = () => { input.dataset.touched = "1"; scheduleValidate(); };
    input.addEventListener("input", touch);
    input.addEventListener("change", touch);
    box.append(el("label", { for: id, class: `field field-${f.kind === "bool" ? "bool" : "text"}`, title: help || null, dataset: { field: f.key } },
      [el("code", { text: f.key }), input, help ? el("small", { id: `help-${f.key}`, class: "field-help", text: help, dataset: { help } }) : null]));
  }
  // the request table's column heads explain themselves from the schema as well
  const reqProps = schema ? resolve(resolve(resolve(schema).properties?.requests).items).properties || {} : {};
  document.querySelectorAll(".req-edit th[data-field]").forEach((th) => {
    const names = th.dataset.field.split(" ");
    const help = names.map((n) => (reqProps[n] ? `${n}: ${helpOf(resolve(reqProps[n]), n)}` : "")).filter(Boolean).join("\n");
    if (help) th.title = help;
  });
}

function reqRow(req = {}) {
  const kind = req.prompt !== undefined ? "prompt" : req.prompt_token_ids !== undefined ? "prompt_token_ids" : "prompt_len";
  const value = kind === "prompt" ? req.prompt : kind === "prompt_token_ids" ? req.prompt_token_ids.join(", ") : String(req.prompt_len ?? 8);
  const cell = (input, cls) => el("td", cls ? { class: cls } : {}, input);
  const inputs = {
    id: el("input", { type: "text", value: req.id ?? "", "aria-label": "id", class: "r-id" }),
    kind: el("select", { "aria-label": "prompt kind", class: "r-kind" },
      ["prompt_len", "prompt", "prompt_token_ids"].map((k) => el("option", { value: k, selected: k === kind, text: k }))),
    value: el("input", { type: "text", value, "aria-label": "prompt value", class: "r-value" }),
    max_tokens: el("input", { type: "text", value: String(req.max_tokens ?? 4), "aria-label": "max_tokens", class: "r-max" }),
    arrival: el("input", { type: "text", value: String(req.arrival_step ?? 1), "aria-label": "arrival_step", class: "r-arrival" }),
  };
  const tr = el("tr", {}, [cell(inputs.id), cell(inputs.kind), cell(inputs.value, "r-value-cell"), cell(inputs.max_tokens), cell(inputs.arrival),
    cell(el("button", { type: "button", class: "small", text: L("remove"), onclick: () => { tr.remove(); scheduleValidate(); } }))]);
  Object.values(inputs).forEach((i) => { i.addEventListener("input", scheduleValidate); i.addEventListener("change", scheduleValidate); });
  // what the row has no input for (n, priority, image) goes back with it unchanged
  tr.kept = Object.fromEntries(Object.entries(req).filter(([k]) => !ROW_KEYS.has(k)));
  return tr;
}
const ROW_KEYS = new Set(["id", "prompt", "prompt_len", "prompt_token_ids", "max_tokens", "arrival_step"]);

function load(scenario) {
  const cfg = scenario.config || {};
  extras = { ...scenario };
  given = new Set(Object.keys(cfg));
  for (const f of fields) {
    const input = $(`f-${f.key}`);
    delete input.dataset.touched;
    const value = f.top ? scenario[f.key] : f.key === "model" ? cfg.model !== null : cfg[f.key];
    if (f.extra && Array.isArray(f.kind) && value === undefined) { input.value = ""; continue; }
    // an extra switch left out shows neither state (the server's default applies) until it is set
    if (f.kind === "bool") input.indeterminate = Boolean(f.extra) && value === undefined;
    const def = f.prop ? f.prop.default : undefined;
    if (f.kind === "bool") input.checked = value === undefined ? (typeof def === "boolean" ? def : f.key !== "enable_prefix_caching") : Boolean(value);
    else if (Array.isArray(f.kind)) input.value = value === undefined ? (f.kind.includes(def) ? def : f.kind[0]) : String(value);
    else input.value = value === undefined || value === null ? "" : String(value);
  }
  const rows = clear($("req-rows"));
  (scenario.requests || []).forEach((r) => rows.append(reqRow(r)));
  scheduleValidate();
}

function collect() {
  const scenario = { ...extras };
  const config = { ...(extras.config || {}) };
  for (const f of fields) {
    const input = $(`f-${f.key}`);
    let value = f.kind === "bool" ? input.checked : isNumeric(f.kind) ? num(input, f.kind) : input.value;
    if (f.extra && ((Array.isArray(f.kind) && value === "") || (!given.has(f.key) && !input.dataset.touched))) value = undefined;
    if (LEFT_OUT[f.key] === value) value = undefined;
    if (f.key === "model") { if (!value) config.model = null; else if (config.model === null) delete config.model; continue; }
    const into = f.top ? scenario : config;
    if (value === undefined) delete into[f.key]; else into[f.key] = value;
  }
  scenario.config = config;
  scenario.requests = [...$("req-rows").children].map((tr) => {
    const q = (c) => tr.querySelector(c);
    const kind = q(".r-kind").value;
    const raw = q(".r-value").value;
    const req = { ...(tr.kept || {}), id: q(".r-id").value, max_tokens: num(q(".r-max")), arrival_step: num(q(".r-arrival")) };
    if (kind === "prompt") req.prompt = raw;
    else if (kind === "prompt_len") req.prompt_len = num(q(".r-value"));
    else req.prompt_token_ids = raw.split(/[\s,]+/).filter(Boolean).map((x) => (/^-?\d+$/.test(x) ? Number(x) : x));
    for (const k of Object.keys(req)) if (req[k] === undefined) delete req[k];
    return req;
  });
  return scenario;
}

// ------------------------------------------------------------------ inline problems
const REQ_INPUT = { id: ".r-id", max_tokens: ".r-max", arrival_step: ".r-arrival", prompt: ".r-value", prompt_len: ".r-value", prompt_token_ids: ".r-value" };

// the input a problem's field path points at, or null where the form has none for it
function inputFor(path) {
  const p = path.replace(/^scenario\./, "");
  const m = /^requests\[(\d+)\](?:\.(\w+))?/.exec(p);
  if (m) {
    const row = $("req-rows").children[Number(m[1])];
    return row ? row.querySelector(REQ_INPUT[m[2]] || ".r-value") : null;
  }
  const inConfig = p.startsWith("config.");
  const key = (inConfig ? p.slice("config.".length) : p).split(".")[0];
  const f = fields.find((x) => x.key === key && x.top === !inConfig);
  return f ? $(`f-${f.key}`) : null;
}

function clearProblems() {
  document.querySelectorAll("#editor .field-error").forEach((n) => n.remove());
  document.querySelectorAll("#editor [aria-invalid]").forEach((n) => {
    n.removeAttribute("aria-invalid");
    n.classList.remove("invalid");
    const rest = (n.getAttribute("aria-describedby") || "").split(" ").filter((id) => id && !id.startsWith("err-"));
    if (rest.length) n.setAttribute("aria-describedby", rest.join(" ")); else n.removeAttribute("aria-describedby");
  });
  for (const id of ["config-errors", "req-errors"]) { clear($(id)).hidden = true; }
}

// each problem next to its field; one the form has no field for (an unknown field of an uploaded
// file, a rule of the whole config) at the top of its fieldset, with its path
function showProblems(detail) {
  clearProblems();
  detail.forEach((d, i) => {
    const input = d.field ? inputFor(d.field) : null;
    if (input) {
      const id = `err-${i}`;
      input.classList.add("invalid");
      input.setAttribute("aria-invalid", "true");
      input.setAttribute("aria-describedby", [id, input.getAttribute("aria-describedby")].filter(Boolean).join(" "));
      input.parentElement.append(el("span", { id, class: "field-error", dataset: { field: d.field } }, serverLine(d.message)));
    } else {
      const box = $(/^(scenario\.)?requests/.test(d.field || "") ? "req-errors" : "config-errors");
      box.hidden = false;
      box.append(el("li", { class: "field-error", dataset: { field: d.field || "" } }, serverLine(d.field ? `${d.field}: ${d.message}` : d.message)));
    }
  });
}

// Under a field's own bound, the largest value the server accepts with the other fields as they are
// (the validator's maxima: the step-trace size, max_num_reqs x max_model_len, the pool, ...), where
// that is less; kept from the last valid answer while the scenario is not valid.
function showMaxima(maxima) {
  for (const f of fields) {
    const help = $(`help-${f.key}`);
    if (!help || f.top) continue;
    const n = maxima[`config.${f.key}`];
    const own = f.prop ? f.prop.maximum : undefined;
    const text = n !== undefined && (own === undefined || n < own) ? `${help.dataset.help} ${L("fh_now_max").replace("{n}", n)}` : help.dataset.help;
    help.textContent = text;
    help.parentElement.title = text;
  }
}

// each problem the server found, introduced in 中文 as the server's own words (English, marked so)
function serverLine(text) {
  return state.lang === "zh" ? [L("server_said"), " ", el("span", { lang: "en", text })] : [text];
}

let timer = null;
let seq = 0;
let lastCheck = null;  // the validator's latest answer (its run id lets a long run show progress)
function scheduleValidate() {
  clearTimeout(timer);
  document.body.dataset.checking = "1";  // readiness flag: "" once the latest edit is checked
  timer = setTimeout(() => { timer = null; validate(); }, 250);
}

async function validate() {
  const mine = ++seq;
  const r = await postJSON("/api/scenarios/validate", collect());
  if (mine !== seq) return r;  // a newer edit is on its way
  if (!timer) document.body.dataset.checking = "";
  const valid = r.ok && r.data.valid;
  lastCheck = valid ? r.data : null;
  const box = clear($("validation"));
  box.classList.toggle("ok", valid);
  box.classList.toggle("bad", !valid);
  if (valid) box.append(el("span", { text: `✓ ${L("valid")} (${r.data.num_requests} ${L("requests").toLowerCase()})` }));
  else box.append(el("ul", {}, errorLines(r.data).map((l) => el("li", {}, serverLine(l)))));
  if (valid && r.data.maxima) showMaxima(r.data.maxima);
  showProblems(!valid && r.data && Array.isArray(r.data.detail) ? r.data.detail : []);
  $("btn-run").disabled = !valid;
  return valid;
}

async function runIt() {
  if (!(await validate())) return;
  $("btn-run").disabled = true;
  const status = $("run-status");
  const r = await withProgress(lastCheck && lastCheck.run_id, postJSON("/api/runs", collect()), (p) => {
    status.textContent = progressText(state.lang, p);
  });
  status.textContent = "";
  $("btn-run").disabled = false;
  if (!r.ok) { await validate(); return; }
  window.location.href = r.data.url + (state.lang === "zh" ? "&lang=zh" : "");
}

function download() {
  const blob = new Blob([JSON.stringify(collect(), null, 2)], { type: "application/json" });
  const a = el("a", { href: URL.createObjectURL(blob), download: `${collect().name || "scenario"}.json` });
  document.body.append(a);
  a.click();
  a.remove();
}

function upload(e) {
  const file = e.target.files[0];
  if (!file) return;
  const reader = new FileReader();
  reader.onload = () => {
    try { load(JSON.parse(reader.result)); } catch (err) {
      const box = clear($("validation"));
      box.classList.remove("ok");
      box.classList.add("bad");
      box.append(el("span", { text: `${file.name}: ${err.message}` }));
    }
  };
  reader.readAsText(file);
}

async function gallery() {
  const r = await getJSON(`/api/presets?lang=${state.lang}`);
  const box = clear($("gallery"));
  if (!r.ok) { box.append(el("p", { class: "error-text", text: errorLines(r.data).join("; ") })); return; }
  for (const p of r.data) {
    const lang = state.lang === "zh" ? "&lang=zh" : "";
    box.append(el("article", { class: "preset-card", dataset: { preset: p.id } }, [
      el("h3", {}, [el("a", { href: `/run?preset=${encodeURIComponent(p.id)}${lang}`, text: p.title })]),
      el("p", { class: "meta" }, [el("code", { text: p.id }), " · ", el("span", { class: "badge", text: p.flavor }),
        // the worked example of a course document: its name (students hold it), and this project's guide
        ...(p.document ? [` · ${L("follows")} `, el("code", { text: p.document }), " · ",
          el("a", { href: docHref(state.lang, "/docs-md/arrays.md"), text: L("array_guide") })] : [])]),
      el("p", { text: p.summary }),
      el("div", { class: "card-actions" }, [
        el("a", { class: "button primary", href: `/run?preset=${encodeURIComponent(p.id)}${lang}`, text: L("open") }),
        el("button", { type: "button", class: "small", text: L("editor"), onclick: async () => {
          const d = await getJSON(`/api/presets/${encodeURIComponent(p.id)}`);
          if (d.ok) { load(d.data.scenario); $("editor").scrollIntoView(); }
        } }),
      ]),
    ]));
  }
}

// The scenario's JSON Schema, or null (the form then keeps its own list). The API's index is asked
// first: a server without the schema route answers it with no 404 in the console.
async function scenarioSchema() {
  const api = await getJSON("/openapi.json");
  if (!api.ok || !api.data || !api.data.paths || !api.data.paths[SCHEMA_URL]) return null;
  const r = await getJSON(SCHEMA_URL);
  return r.ok && r.data && typeof r.data === "object" ? r.data : null;
}

async function boot() {
  applyI18n(document, state.lang);
  document.querySelectorAll("[data-lang]").forEach((b) => {
    b.setAttribute("aria-pressed", b.dataset.lang === state.lang ? "true" : "false");
    b.onclick = () => { state.lang = b.dataset.lang; writeState(state); window.location.reload(); };
  });
  schema = await scenarioSchema();
  buildFields();
  buildConfigFields();
  $("btn-add-req").onclick = () => { $("req-rows").append(reqRow({ id: String($("req-rows").children.length) })); scheduleValidate(); };
  $("btn-run").onclick = runIt;
  $("btn-download").onclick = download;
  $("upload").onchange = upload;
  getJSON("/healthz").then((h) => showUpstream(h.data));
  wireLessonLoader($("lesson-upload"), $("lesson-file-out"), state.lang);
  contrastLinks($("contrasts"), state.lang);
  recordingsSection($("recording-list"), $("recording-upload"), $("recording-out"), state.lang);
  await lessonGallery($("lessons"), state.lang);
  await gallery();
  const first = await getJSON("/api/presets/seed-001");
  if (first.ok) load(first.data.scenario);
  document.body.dataset.ready = "1";
}

boot();
