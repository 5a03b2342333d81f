// The landing page: the preset gallery and a scenario editor checked live by the API.

import { errorLines, getJSON, postJSON, withProgress } from "./api.js";
import { applyI18n, progressText, t } from "./i18n.js";
import { readState, writeState } from "./state.js";
import { clear, el } from "./views.js";

const state = readState();
const $ = (id) => document.getElementById(id);
const L = (k) => t(state.lang, k);

const CONFIG = [
  ["name", "text"], ["flavor", ["vllm", "ascend", "nanovllm"]], ["seed", "int"], ["max_steps", "int"],
  ["block_size", "int"], ["max_model_len", "int"], ["max_num_reqs", "int"], ["max_num_batched_tokens", "int"],
  ["num_kv_blocks", "int"], ["long_prefill_token_threshold", "int"], ["enable_chunked_prefill", "bool"],
  ["enable_prefix_caching", "bool"], ["model", "bool"], ["device", ["auto", "cpu", "cuda", "npu"]],
];
const TOP = new Set(["name", "flavor", "seed", "max_steps"]);
let extras = {};  // fields of a loaded scenario the form does not show (title, summary, model sizes, ...)

function num(input) {
  const raw = input.value.trim();
  return raw !== "" && /^-?\d+$/.test(raw) ? Number(raw) : raw;  // anything else goes as typed: the API names it
}

function buildConfigFields() {
  const box = clear($("config-fields"));
  for (const [key, kind] of CONFIG) {
    const id = `f-${key}`;
    let input;
    if (Array.isArray(kind)) input = el("select", { id }, kind.map((v) => el("option", { value: v, text: v })));
    else if (kind === "bool") input = el("input", { id, type: "checkbox" });
    else input = el("input", { id, type: "text", inputmode: kind === "int" ? "numeric" : "text", autocomplete: "off" });
    input.addEventListener("input", scheduleValidate);
    input.addEventListener("change", scheduleValidate);
    box.append(el("label", { for: id, class: `field field-${kind === "bool" ? "bool" : "text"}` }, [el("code", { text: key }), input]));
  }
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
  return tr;
}

function load(scenario) {
  const cfg = scenario.config || {};
  extras = { ...scenario };
  for (const [key, kind] of CONFIG) {
    const input = $(`f-${key}`);
    const value = TOP.has(key) ? scenario[key] : key === "model" ? cfg.model !== null : cfg[key];
    if (kind === "bool") input.checked = value === undefined ? key !== "enable_prefix_caching" : Boolean(value);
    else if (Array.isArray(kind)) input.value = value === undefined ? kind[0] : String(value);
    else input.value = value === undefined ? "" : String(value);
  }
  const rows = clear($("req-rows"));
  (scenario.requests || []).forEach((r) => rows.append(reqRow(r)));
  scheduleValidate();
}

function collect() {
  const scenario = { ...extras };
  const config = { ...(extras.config || {}) };
  for (const [key, kind] of CONFIG) {
    const input = $(`f-${key}`);
    let value = kind === "bool" ? input.checked : kind === "int" ? num(input) : input.value;
    if (key === "model") { if (!value) config.model = null; else if (config.model === null) delete config.model; continue; }
    if (kind === "int" && value === "") { if (TOP.has(key)) delete scenario[key]; continue; }  // blank: the default
    if (TOP.has(key)) scenario[key] = value; else config[key] = value;
  }
  scenario.config = config;
  scenario.requests = [...$("req-rows").children].map((tr) => {
    const q = (c) => tr.querySelector(c);
    const kind = q(".r-kind").value;
    const raw = q(".r-value").value;
    const req = { id: q(".r-id").value, max_tokens: num(q(".r-max")), arrival_step: num(q(".r-arrival")) };
    if (kind === "prompt") req.prompt = raw;
    else if (kind === "prompt_len") req.prompt_len = num(q(".r-value"));
    else req.prompt_token_ids = raw.split(/[\s,]+/).filter(Boolean).map((x) => (/^-?\d+$/.test(x) ? Number(x) : x));
    return req;
  });
  return scenario;
}

let timer = null;
let seq = 0;
let lastCheck = null;  // the validator's latest answer (its run id lets a long run show progress)
function scheduleValidate() {
  clearTimeout(timer);
  timer = setTimeout(validate, 250);
}

async function validate() {
  const mine = ++seq;
  const r = await postJSON("/api/scenarios/validate", collect());
  if (mine !== seq) return r;  // a newer edit is on its way
  const valid = r.ok && r.data.valid;
  lastCheck = valid ? r.data : null;
  const box = clear($("validation"));
  box.classList.toggle("ok", valid);
  box.classList.toggle("bad", !valid);
  if (valid) box.append(el("span", { text: `✓ ${L("valid")} (${r.data.num_requests} ${L("requests").toLowerCase()})` }));
  else box.append(el("ul", {}, errorLines(r.data).map((l) => el("li", { text: l }))));
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
        ...(p.document ? [` · ${L("follows")} `, el("code", { text: p.document })] : [])]),
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

async function boot() {
  applyI18n(document, state.lang);
  document.querySelectorAll("[data-lang]").forEach((b) => {
    b.setAttribute("aria-pressed", b.dataset.lang === state.lang ? "true" : "false");
    b.onclick = () => { state.lang = b.dataset.lang; writeState(state); window.location.reload(); };
  });
  buildConfigFields();
  $("btn-add-req").onclick = () => { $("req-rows").append(reqRow({ id: String($("req-rows").children.length) })); scheduleValidate(); };
  $("btn-run").onclick = runIt;
  $("btn-download").onclick = download;
  $("upload").onchange = upload;
  await gallery();
  const first = await getJSON("/api/presets/seed-001");
  if (first.ok) load(first.data.scenario);
  document.body.dataset.ready = "1";
}

boot();
