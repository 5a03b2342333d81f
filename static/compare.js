// Compare: the page's run (A) beside another (B) -- another flavour of the same requests, or the
// same scenario with settings changed -- aligned by step. `vs` in the URL says what B changes
// ("flavor:nanovllm", "enable_prefix_caching:false,block_size:4"), so a compare view is a link.
// GET /api/compare?a=&b= says, step by step, which entries of which arrays differ, which KV blocks
// differ and which narration sentences only one side says; they are highlighted in the panel's
// arrays, its KV strips and its narration, and A's differing entries in the token table above.

import { errorLines, getJSON, postJSON } from "./api.js";
import { ctl, onView } from "./bus.js";
import { localTitleOf } from "./features.js";
import { renderPanes } from "./comparepanes.js";
import { firstDiffStep, stepDiffers, whatDiffers, whyDiffers } from "./comparewhy.js";
import { narrationOf, sentence } from "./narration.js";
import { t } from "./i18n.js";
import { writeState } from "./urlstate.js";
import { $, L, S, state } from "./context.js";
import { clear, el } from "./views.js";
import { memoryLine } from "./comparememory.js";
import { backToBaseline, modifiedScenario } from "./whatif.js";

const C = { a: null, b: null, spec: "", pairs: [], cmp: null, first: 1, steps: new Map(), going: 0 };
// whether the page's own link named a step (read before the page rewrites its address)
const NAMED_STEP = new URLSearchParams(window.location.search).has("step");
const FLAVORS = ["vllm", "ascend", "nanovllm"];
const BOOL = new Set(["enable_chunked_prefill", "enable_prefix_caching", "async_scheduling"]);
// settings whose values are words, kept as written (the server names a wrong one)
const WORDS = new Set(["flavor", "model_runner", "speculative_method", "free_queue_order", "device", "layer_types"]);

// "flavor:nanovllm,block_size:4" -> [["flavor","nanovllm"],["block_size",4]]; null when malformed
// (a number that is not one, a boolean that is neither true/false nor 1/0)
export function parseSpec(spec) {
  const out = [];
  for (const part of spec.split(",").filter(Boolean)) {
    const m = /^([a-z_]{1,40}):([A-Za-z0-9_.-]{1,40})$/.exec(part.trim());
    if (!m) return null;
    const [, k, v] = m;
    if (WORDS.has(k)) out.push([k, v]);
    else if (BOOL.has(k)) {
      if (!/^(true|false|1|0)$/.test(v)) return null;
      out.push([k, v === "true" || v === "1"]);
    } else {
      const x = Number(v);
      if (!Number.isFinite(x)) return null;
      out.push([k, x]);
    }
  }
  return out.length ? out : null;
}

function applySpec(scenario, pairs) {
  const sc = JSON.parse(JSON.stringify(scenario));
  for (const [k, v] of pairs) {
    if (k === "flavor") sc.flavor = v;
    else if (k === "layer_types") {
      // "layer_types:full_attention": every layer of the model that kind, the same layer count; a
      // window no layer slides over any more is dropped (the server refuses one that applies to none)
      sc.config.layer_types = (sc.config.layer_types || ["full_attention"]).map(() => v);
      if (!sc.config.layer_types.includes("sliding_attention")) delete sc.config.sliding_window;
    } else sc.config[k] = v;
  }
  sc.title = `${scenario.title || scenario.name} · ${pairs.map(([k, v]) => `${k} ${v}`).join(", ")}`.slice(0, 200);
  return sc;
}

async function stepOf(runId, n) {
  const key = `${runId}/${n}`;
  if (!C.steps.has(key)) C.steps.set(key, getJSON(`/api/runs/${runId}/steps/${n}`).then((r) => (r.ok ? r.data : null)));
  return C.steps.get(key);
}

// The classic contrasts, for the landing page: a preset and what B changes.
export const CONTRASTS = [
  { preset: "demo-prefix-cache", vs: "enable_prefix_caching:false", key: "cmp_prefix" },
  { preset: "seed-000", vs: "enable_chunked_prefill:false,max_num_batched_tokens:240", key: "cmp_chunked" },  // vLLM needs budget >= max_model_len without chunking
  { preset: "seed-000", vs: "block_size:256", key: "cmp_block" },
  { preset: "seed-001", vs: "flavor:nanovllm", key: "cmp_nano" },
  { preset: "seed-001", vs: "flavor:ascend", key: "cmp_ascend" },
  { preset: "demo-v2-slots", vs: "model_runner:v1", key: "cmp_runner" },
  { preset: "demo-gpt-oss-sliding-window", vs: "layer_types:full_attention", key: "cmp_sliding" },
];

export function contrastLinks(box, lang) {
  clear(box);
  for (const c of CONTRASTS) {
    const href = `/run?preset=${encodeURIComponent(c.preset)}&vs=${encodeURIComponent(c.vs)}${lang === "zh" ? "&lang=zh" : ""}`;
    box.append(el("li", {}, [el("a", { href, text: t(lang, c.key) }), " ", el("code", { class: "muted", text: `${c.preset} · ${c.vs}` })]));
  }
}

const fmt = (key, vals) => Object.entries(vals).reduce((s, [k, v]) => s.replaceAll(`{${k}}`, String(v)), L(key));

// start comparing with B = A changed by `spec`
export async function compareWith(spec) {
  const pairs = parseSpec(spec);
  const msg = $("cmp-msg");
  clear(msg);
  if (!pairs) { msg.textContent = `vs: ${L("cmp_bad_spec")}`; return; }
  const mine = ++C.going;
  const base = S.overview.scenario;
  const sc = applySpec(base, pairs);
  const check = await postJSON("/api/scenarios/validate", sc);
  if (!check.ok || !check.data.valid) { msg.append(el("ul", {}, errorLines(check.data).map((l) => el("li", { text: `B: ${l}` })))); return; }
  const made = await postJSON("/api/runs", sc);
  if (!made.ok) { msg.textContent = errorLines(made.data).join("; "); return; }
  const cmp = await getJSON(`/api/compare?a=${S.created.run_id}&b=${made.data.run_id}`);
  if (mine !== C.going) return;
  if (!cmp.ok) { msg.textContent = errorLines(cmp.data).join("; "); return; }
  C.a = { run_id: S.created.run_id, scenario: base };
  C.b = { run_id: made.data.run_id, scenario: sc, flavor: sc.flavor };
  C.cmp = cmp.data;
  C.first = firstDiffStep(cmp.data);
  C.spec = spec;
  C.pairs = pairs;
  state.vs = spec;
  writeState(state);
  await render();
}

export function stopCompare() {
  C.going++;
  C.cmp = null;
  state.vs = "";
  writeState(state);
  const panel = $("compare");
  if (panel) panel.hidden = true;
  if ($("cmp-view")) $("cmp-view").hidden = true;
  document.body.classList.remove("comparing");
  markMain(null);
  document.body.dataset.compare = "";
}

// A's differing entries in the token table and the request table
function markMain(entry) {
  document.querySelectorAll(".cmp-diff").forEach((n) => n.classList.remove("cmp-diff"));
  if (!entry || !entry.arrays) return;
  for (const [name, d] of Object.entries(entry.arrays)) {
    if (!d.indices || (d.indices.length && Array.isArray(d.indices[0]))) continue;
    for (const i of d.indices) {
      const cell = document.querySelector(`#token-table tr[data-array="${CSS.escape(name)}"] td[data-t="${i}"]`);
      if (cell) cell.classList.add("cmp-diff");
    }
    const heads = [...document.querySelectorAll("#request-table thead th")];
    const col = heads.findIndex((th) => th.title === name);
    if (col >= 0) for (const r of d.indices) { const td = document.querySelector(`#request-table tbody tr[data-r="${r}"] td:nth-child(${col + 1})`); if (td) td.classList.add("cmp-diff"); }
  }
}

// one array's values, the differing entries marked
function values(arr, diff, side) {
  if (!arr) return el("span", { class: "muted", text: L("cmp_absent") });
  const flat = (i) => (diff && diff.indices ? diff.indices : []).some((x) => (Array.isArray(x) ? false : x === i));
  const cell = (r, c) => (diff && diff.indices ? diff.indices : []).some((x) => Array.isArray(x) && x[0] === r && x[1] === c);
  const shapeDiff = diff && diff.status === "shape";
  if (arr.shape.length === 1) {
    const box = el("span", { class: `cmp-vals${shapeDiff ? " cmp-shape" : ""}`, dataset: { side } }, ["["]);
    arr.data.slice(0, 96).forEach((v, i) => {
      if (i) box.append(", ");
      box.append(el("span", { class: flat(i) ? "diff" : "", dataset: { i }, text: String(v) }));
    });
    box.append(arr.data.length > 96 ? ", …]" : "]");
    return box;
  }
  if (arr.shape.length === 2) {
    const rows = arr.data.slice(0, 16);
    return el("table", { class: `grid-table cmp-grid${shapeDiff ? " cmp-shape" : ""}`, dataset: { side } }, el("tbody", {}, rows.map((row, r) =>
      el("tr", {}, row.slice(0, 32).map((v, c) => el("td", { class: cell(r, c) ? "diff" : "", dataset: { r, c }, text: String(v) }))))));
  }
  return el("span", { text: `${arr.dtype}[${arr.shape.join(" × ")}]` });
}

function kvStrip(kv, diffBlocks, side) {
  const box = el("div", { class: "cmp-kv", dataset: { side } });
  if (!kv || !kv.num_blocks) return box;
  for (let b = 0; b < Math.min(kv.num_blocks, 128); b++) {
    const owners = kv.owners[String(b)] || [];
    box.append(el("span", { class: `kv-cell${owners.length ? " used" : ""}${diffBlocks.has(b) ? " diff" : ""}`, dataset: { block: b },
      title: `block ${b}: ${owners.length ? owners.join("+") : L("free")}, ref ${kv.ref_cnt[b]}`, text: owners.length ? owners.join("+") : "·" }));
  }
  return box;
}

// a side's flavour, and the vllm flavour's model runner (V1 and V2 prepare the same step differently)
function runnerOf(sc) {
  const r = sc.flavor === "vllm" && sc.config ? sc.config.model_runner : null;
  return r ? `${sc.flavor} · ${L("cmp_runner_word")} ${r}` : sc.flavor;
}

// the two batches: their order, where each request sits (its row, and its state slot on a runner
// that has slots), and per array both have, whether each request's own entries are the same once
// the batches are aligned by request (then an entry-by-entry difference is only the order)
function batchPart(b) {
  const box = el("div", { id: "cmp-batch", class: "cmp-batch" });
  if (!b) return box;
  const where = (p) => (p ? `${L("cmp_row")} ${p.row}${p.slot === null || p.slot === undefined ? "" : ` · ${L("cmp_slot")} ${p.slot}`}` : "–");
  const reqs = [...new Set([...b.req_ids[0], ...b.req_ids[1]])];
  const order = (ids) => `[${ids.join(", ")}]`;
  box.append(el("h3", { text: `${L("cmp_batch")} · ${b.same_order ? L("cmp_same_order") : L("cmp_other_order")}` }),
    el("table", { class: "cmp-table", id: "cmp-batch-table" }, [
      el("thead", {}, el("tr", {}, [el("th", { text: L("cmp_request") }), el("th", { text: "A" }), el("th", { text: "B" })])),
      el("tbody", {}, [
        el("tr", { class: b.same_order ? "" : "differs", dataset: { row: "order" } }, [el("th", { scope: "row", text: L("cmp_order") }),
          el("td", { text: order(b.req_ids[0]) }), el("td", { text: order(b.req_ids[1]) })]),
        ...reqs.map((r) => el("tr", { dataset: { req: r } }, [el("th", { scope: "row" }, el("code", { text: r })),
          el("td", { text: where(b.place[0][r]) }), el("td", { text: where(b.place[1][r]) })])),
      ]),
    ]));
  const lines = Object.entries(b.per_request).map(([name, reqs2]) => el("li", { dataset: { array: name }, class: reqs2.length ? "differs" : "" }, [
    el("code", { text: name }), ": ",
    reqs2.length ? `${L("cmp_req_differ")} ${reqs2.join(", ")}` : `${L("cmp_req_same")}${b.same_order ? "" : L("cmp_only_order")}`]));
  if (lines.length) box.append(el("ul", { class: "cmp-per-req", id: "cmp-per-req" }, lines));
  return box;
}

// what each side runs with, for the settings B changes: "A · enable_prefix_caching true"
function sideLabel(x) {
  const sc = x.scenario;
  return C.pairs.map(([k]) => (k === "flavor" ? runnerOf(sc) : k === "model_runner" ? `${L("cmp_runner_word")} ${sc.config[k] || "v2"}`
    : k === "layer_types" ? layersLabel(sc.config) : `${k} ${sc.config[k]}`)).join(" · ");
}

// "layers: sliding window 8, full" -- each layer's attention, in the page's language
function layersLabel(config) {
  const kinds = config.layer_types || ["full_attention"];
  const word = (x) => (x === "sliding_attention" ? `${L("mem_sliding")} ${config.sliding_window}` : L("mem_full"));
  return `${L("mem_layers")}: ${kinds.map(word).join(", ")}`;
}

// the first screen's view: the line that says what differs and why, and the two panes
function renderView(entry, ta, tb, na, nb) {
  const view = $("cmp-view");
  view.hidden = false;
  document.body.classList.add("comparing");
  const n = entry.step;
  $("cmpv-title").textContent = `${L("cmp_view_title")} · ${L("step")} ${n}`;
  const line = clear($("cmp-line"));
  const differs = stepDiffers(entry);
  const lead = n === C.first ? L("cmp_first") : differs ? L("cmp_at") : L("cmp_no_diff");
  line.append(el("strong", { text: lead.replace("{n}", n) }), " ");
  if (differs || n === C.first) line.append(el("span", { class: "cmp-what", text: whatDiffers(entry, ta, tb).join(L("cmp_sep")) }));
  if (n !== C.first) {
    line.append(" ", el("button", { type: "button", class: "small", id: "cmp-go-first", text: L("cmp_go_first").replace("{n}", C.first),
      onclick: () => { ctl.stopPlay(); ctl.showStep(C.first); } }));
  }
  const why = whyDiffers(entry, na, nb, C.pairs, ta, tb);
  const whyBox = clear($("cmp-why"));
  if (why.length && (differs || n === C.first)) whyBox.append(el("strong", { text: L("cmp_why") }), " ", why.join(" "));
  // the stale block-table entries the compare ignores (the server's, core/kernel_reads.py)
  const stale = clear($("cmp-stale"));
  const items = (entry.stale || [[], []]).flatMap((xs, i) => xs.map((x) => fmt("cmp_stale_item", { side: i ? "B" : "A", ...x })));
  stale.hidden = !items.length;
  if (items.length) stale.append(el("span", { text: L("cmp_stale_h") }), " ", el("span", { class: "cmp-stale-list", text: items.join(L("cmp_sep")) }));
  memoryLine($("cmp-memory"), entry, C.cmp, ta, tb);
  renderPanes($("cmp-panes"), { label: sideLabel(C.a), trace: ta, flavor: C.a.scenario.flavor }, { label: sideLabel(C.b), trace: tb, flavor: C.b.scenario.flavor });
}

async function render() {
  if (!C.cmp || !S.created) return;
  const n = state.step;
  const mine = C.going;
  const entry = C.cmp.steps[n - 1] || { in_a: true, in_b: false };
  const [ta, tb, na, nb] = await Promise.all([stepOf(C.a.run_id, n), entry.in_b ? stepOf(C.b.run_id, n) : null,
    narrationOf(C.a.run_id, n), entry.in_b ? narrationOf(C.b.run_id, n) : []]);
  if (mine !== C.going) return;
  const panel = $("compare");
  panel.hidden = false;
  document.body.dataset.compare = String(n);
  $("cmp-title").textContent = `${L("cmp_title")} · ${L("step")} ${n}`;
  const titleA = await localTitleOf(C.a.scenario);
  if (mine !== C.going) return;
  // B is A changed by C.pairs: A's title in the page's language, then the change as settings
  const titleB = L("cmp_b_with").replace("{title}", titleA).replace("{changes}", C.pairs.map(([k, v]) => `${k} = ${v}`).join(", "));
  const sideName = (x, title, tag) => `${tag}: ${title} (${runnerOf(x.scenario)})`;
  $("cmp-heads").textContent = "";
  $("cmp-heads").append(el("span", { class: "cmp-a", text: sideName(C.a, titleA, "A") }),
    el("span", { class: "cmp-b", text: sideName(C.b, titleB, "B") }));
  const tot = C.cmp.totals_delta;
  $("cmp-totals").textContent = `${L("cmp_totals")}: ${["steps", "preemptions", "peak_blocks_used", "peak_internal_fragmentation", "padded_tokens"]
    .map((k) => `${L(`cmp_m_${k}`)} ${tot[k] > 0 ? "+" : ""}${tot[k]}`).join(" · ")}`;
  renderView(entry, ta, tb, na, nb);
  const body = clear($("cmp-body"));
  if (!entry.in_b || !tb) {
    $("cmp-view").hidden = true;
    body.append(el("p", { class: "warn", text: L("cmp_no_step").replace("{n}", n).replace("{m}", C.cmp.num_steps[1]) }));
    markMain(null);
    return;
  }
  body.append(batchPart(entry.batch));
  // arrays
  const names = [...new Set([...Object.keys(ta.arrays), ...Object.keys(tb.arrays)])];
  const table = el("table", { class: "cmp-table", id: "cmp-arrays" }, el("thead", {}, el("tr", {}, [
    el("th", { text: L("predict_array") }), el("th", { text: "A" }), el("th", { text: "B" })])));
  const tbody = el("tbody");
  const differ = entry.arrays || {};
  const order = [...names.filter((x) => differ[x]), ...names.filter((x) => !differ[x])];
  for (const name of order) {
    const d = differ[name];
    const status = d ? (d.status === "shape" ? `${L("cmp_shape")} ${(d.shape_a || []).join("×")} / ${(d.shape_b || []).join("×")}` : `${d.num_diff} ${L("cmp_differ")}`)
      : !ta.arrays[name] || !tb.arrays[name] ? L("cmp_only_one") : L("cmp_same");
    tbody.append(el("tr", { class: d ? "differs" : "", dataset: { array: name } }, [
      el("th", { scope: "row" }, [el("code", { text: name }), el("div", { class: "small-text muted", text: status })]),
      el("td", {}, values(ta.arrays[name], d, "a")), el("td", {}, values(tb.arrays[name], d, "b"))]));
  }
  table.append(tbody);
  body.append(el("h3", { text: L("cmp_arrays") }), el("div", { class: "scroll-x" }, table));
  // KV cache
  const kvd = entry.kv_cache || { ref_cnt: [], owners: [] };
  const blocks = new Set([...kvd.ref_cnt, ...kvd.owners]);
  body.append(el("h3", { text: `${L("kv_cache")} (${blocks.size} ${L("cmp_blocks_differ")})` }),
    el("div", { class: "cmp-two" }, [el("div", {}, [el("strong", { text: "A" }), kvStrip(ta.kv_cache, blocks, "a")]),
      el("div", {}, [el("strong", { text: "B" }), kvStrip(tb.kv_cache, blocks, "b")])]));
  // narration
  const nd = entry.narration || { only_a: [], only_b: [], changed: [] };
  const mark = (items, only) => el("ul", { class: "cmp-narr" }, items.filter((x) => !x.stage).map((it) => el("li", {
    class: only.includes(it.key) ? "only" : nd.changed.includes(it.key) ? "changed" : "", dataset: { key: it.key } }, sentence(it))));
  body.append(el("h3", { text: L("narration") }), el("div", { class: "cmp-two" }, [
    el("div", {}, [el("strong", { text: "A" }), mark(na, nd.only_a)]), el("div", {}, [el("strong", { text: "B" }), mark(nb, nd.only_b)])]));
  markMain(entry);
}

function build() {
  const panel = el("section", { id: "compare", class: "compare", "aria-labelledby": "cmp-title", hidden: true }, [
    el("header", { class: "cmp-header" }, [el("h2", { id: "cmp-title" }),
      el("button", { type: "button", id: "cmp-close", class: "small", dataset: { i18n: "cmp_close" }, text: L("cmp_close"), onclick: stopCompare })]),
    el("p", { id: "cmp-heads", class: "cmp-heads" }),
    el("p", { id: "cmp-totals", class: "muted" }),
    el("div", { id: "cmp-body" }),
  ]);
  $("main").after(panel);
  const view = el("section", { id: "cmp-view", class: "cmp-view", "aria-labelledby": "cmpv-title", hidden: true }, [
    el("header", { class: "cmp-header" }, [el("h2", { id: "cmpv-title" }),
      el("span", { class: "cmp-legend muted", dataset: { i18n: "cmp_legend" }, text: L("cmp_legend") }),
      el("a", { href: "#compare", class: "small", dataset: { i18n: "cmp_details" }, text: L("cmp_details") }),
      el("button", { type: "button", class: "small", dataset: { i18n: "cmp_close" }, text: L("cmp_close"), onclick: stopCompare })]),
    el("p", { id: "cmp-line", class: "cmp-line", "aria-live": "polite" }),
    el("p", { id: "cmp-why", class: "cmp-why" }),
    el("p", { id: "cmp-memory", class: "cmp-memory", hidden: true }),
    el("p", { id: "cmp-stale", class: "cmp-stale muted", hidden: true }),
    el("div", { id: "cmp-panes", class: "cmp-panes" }),
  ]);
  $("stepbar").after(view);
  // the chooser sits with the what-if controls: another flavour, or the settings as they are set
  const chooser = el("div", { class: "cmp-chooser" }, [
    el("h3", { dataset: { i18n: "cmp_with" }, text: L("cmp_with") }),
    el("div", { class: "controls" }, [
      el("select", { id: "cmp-flavor", "aria-label": "flavor" }, FLAVORS.map((f) => el("option", { value: f, text: f }))),
      el("button", { type: "button", id: "cmp-go-flavor", dataset: { i18n: "cmp_flavor" }, text: L("cmp_flavor"),
        onclick: () => compareWith(`flavor:${$("cmp-flavor").value}`) }),
      el("button", { type: "button", id: "cmp-go-settings", dataset: { i18n: "cmp_settings" }, text: L("cmp_settings"), onclick: async () => {
        const { changes } = modifiedScenario();
        if (!changes.length) { $("cmp-msg").textContent = L("cmp_no_change"); return; }
        // the what-if applies its settings in place: the page goes back to the baseline (A), and
        // the settings are run B
        await backToBaseline();
        compareWith(changes.map((c) => c.replace(" ", ":")).join(","));
      } }),
    ]),
    el("div", { id: "cmp-msg", class: "error-text", role: "alert" }),
  ]);
  $("whatif").append(chooser);
}

export function initCompare() {
  build();
  let first = true;
  onView((what) => {
    if (what === "run") {
      if (first && state.vs) {
        first = false;
        // a compare link opens on the first step where the runs differ, unless it names a step
        compareWith(state.vs).then(() => { if (!NAMED_STEP && C.cmp && C.first !== state.step) ctl.showStep(C.first); });
        return;
      }
      first = false;
      if (C.cmp && S.created.run_id !== C.a.run_id) stopCompare();  // another run: the comparison no longer holds
      const cur = S.overview.flavor || S.overview.scenario.flavor;
      const sel = $("cmp-flavor");
      if (sel) sel.value = FLAVORS.find((f) => f !== cur) || FLAVORS[0];
      return;
    }
    if (C.cmp) render();
  });
  // a big batch's rows and columns drawn after the frame are marked as the first ones were
  document.addEventListener("pagedviz:late-cells", () => {
    if (C.cmp && document.body.dataset.compare === String(state.step)) markMain(C.cmp.steps[state.step - 1] || null);
  });
}
