// The page's state, declared once: every field round-trips through the URL, so a copied link
// reopens exactly this view (scenario, step, stage, language, presentation mode, the selected
// request, position or block, the array in focus) on any server.

export const FIELDS = [
  { key: "s", type: "str", def: "" },        // the scenario, packed (zlib + base64url)
  { key: "preset", type: "str", def: "" },   // or a preset id
  { key: "run", type: "str", def: "" },      // or an imported recording's run id (POST /api/runs/import)
  { key: "example", type: "str", def: "" },  // or a shipped recording, imported by name
  { key: "step", type: "int", def: 1 },
  { key: "stage", type: "str", def: "" },
  { key: "lang", type: "str", def: "en" },
  { key: "present", type: "bool", def: false },
  { key: "tok", type: "int", def: -1 },      // a selected token by its index (older links; read once)
  { key: "req", type: "str", def: "" },      // the selected request, by id: it survives step changes
  { key: "pos", type: "int", def: -1 },      // with a position: that token of the request
  { key: "block", type: "int", def: -1 },    // or a selected physical block
  { key: "slot", type: "int", def: -1 },     // or a selected KV slot (its writer and readers)
  { key: "array", type: "str", def: "" },    // an array to point at (its row is marked and shown)
  { key: "lesson", type: "str", def: "" },   // a shipped lesson's id (lesson.js)
  { key: "l", type: "str", def: "" },        // or a lecturer's lesson, packed
  { key: "sec", type: "int", def: 0 },       // the lesson's section on show
  { key: "vs", type: "str", def: "" },       // compare with: changes to the scenario (compare.js)
  { key: "note", type: "str", def: "" },     // a note to scroll to and light: note-<n>, narr-<key>, ...
  { key: "embed", type: "str", def: "" },    // one figure alone, for an iframe in slides (embed.js)
  { key: "delta", type: "bool", def: true }, // the request table shows the previous step's values
];

export function readState(search = window.location.search) {
  const params = new URLSearchParams(search);
  const state = {};
  for (const f of FIELDS) {
    const raw = params.get(f.key);
    if (raw === null) { state[f.key] = f.def; continue; }
    if (f.type === "int") { const n = parseInt(raw, 10); state[f.key] = Number.isFinite(n) ? n : f.def; }
    else if (f.type === "bool") state[f.key] = raw === "1" || raw === "true";
    else state[f.key] = raw;
  }
  // a link that does not say its language opens in the one the reader chose last
  const asked = params.get("lang");
  if (asked === null) state.lang = storedLang() || state.lang;
  if (state.lang !== "zh") state.lang = "en";
  if (asked !== null) rememberLang(state.lang);  // a link that says its language is a choice too
  return state;
}

// The reader's language, remembered across pages and links (localStorage; a browser that refuses
// storage simply forgets it).
const LANG_KEY = "pagedviz-lang";
function storedLang() {
  try { return window.localStorage.getItem(LANG_KEY); } catch (_) { return null; }
}
function rememberLang(lang) {
  try { if (storedLang() !== lang) window.localStorage.setItem(LANG_KEY, lang); } catch (_) { /* not remembered */ }
}

// Keys the page keeps out of the address for now (a checkpoint withholds what would tell its
// answer until Check: predict.js's withheldKeys); they are written again at the next write.
// Every address the page writes or links to goes through toSearch.
let withheld = () => [];
export function withholdKeys(fn) { withheld = fn; }

function addressed(state) {
  const keys = withheld();
  if (!keys.length) return state;
  const out = { ...state };
  for (const f of FIELDS) if (keys.includes(f.key)) out[f.key] = f.def;
  return out;
}

export function toSearch(state) {
  const params = new URLSearchParams();
  const shown = addressed(state);
  for (const f of FIELDS) {
    const v = shown[f.key];
    if (v === f.def || v === undefined || v === null) continue;
    params.set(f.key, f.type === "bool" ? (v ? "1" : "0") : String(v));
  }
  return "?" + params.toString();
}

// Browsers drop history.replaceState calls made too often (Chromium: about 200 in 10 s), and
// keyboard users tabbing through the token table select a cell per Tab. The URL is written at
// once while calls are few; past that, the last state is written once the burst has settled, so
// the address bar always ends on the state shown. A view that has settled by the reader's own
// step (a lesson's section opened: {settled: true}) is written at once all the same, while the
// window holds fewer than URL_WRITES_MAX (well under the browser's limit): its address must not
// lag behind it, still naming the section before.
const URL_WRITES_PER_WINDOW = 60;
const URL_WRITES_MAX = 150;
const URL_WINDOW_MS = 10_000;
let urlWrites = [];
let pendingUrl = null;
let pendingTimer = null;

function replaceUrl(url) {
  if (url === window.location.pathname + window.location.search) return;
  urlWrites.push(performance.now());
  window.history.replaceState(null, "", url);
}

export function writeState(state, { settled = false } = {}) {
  rememberLang(state.lang);
  const url = window.location.pathname + toSearch(state);
  const now = performance.now();
  urlWrites = urlWrites.filter((t) => now - t < URL_WINDOW_MS);
  if (settled && urlWrites.length < URL_WRITES_MAX) {
    clearTimeout(pendingTimer);
    pendingTimer = null;
    replaceUrl(url);
  } else if (urlWrites.length < URL_WRITES_PER_WINDOW && pendingTimer === null) {
    replaceUrl(url);
  } else {
    pendingUrl = url;
    clearTimeout(pendingTimer);
    pendingTimer = setTimeout(() => { pendingTimer = null; replaceUrl(pendingUrl); }, 250);
  }
  return url;
}
