// A scenario's JSON editor checked as you type: a pause in typing (DEBOUNCE_MS) checks the text,
// malformed JSON here (its line and column, no request), a scenario against the server's own
// validator (POST /api/scenarios/validate); the answer stands beside the editor and goes once the
// text is valid. The run page's "Edit scenario" uses it.

import { errorLines, postJSON } from "./api.js";
import { t } from "./i18n.js";
import { clear, el } from "./views.js";

export const DEBOUNCE_MS = 400;

// Where JSON.parse stopped, as {line, col} of the text (1-based). V8 and Firefox name it in most
// messages ("at position 42 (line 3 column 5)", "at line 3 column 5"); where they do not ("Unexpected
// token 'x', ... is not valid JSON"), the shortest prefix of the text that fails before its own end
// ends just past the bad character; an unexpected end is at the end.
export function jsonErrorAt(text, message) {
  const lc = /line (\d+) column (\d+)/.exec(message);
  if (lc) return { line: Number(lc[1]), col: Number(lc[2]) };
  const pos = /position (\d+)/.exec(message);
  let at = pos ? Number(pos[1]) : /end of (JSON )?(input|data)/i.test(message) ? text.trimEnd().length : null;
  if (at === null) {
    let lo = 0, hi = text.length;  // failsBefore(hi) holds: the whole text fails before its end
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      if (failsBefore(text.slice(0, mid))) hi = mid; else lo = mid;
    }
    at = hi - 1;
  }
  const before = text.slice(0, at);
  return { line: before.split("\n").length, col: at - before.lastIndexOf("\n") };
}

// whether parsing `prefix` fails at a character of its own (not only at its end)
function failsBefore(prefix) {
  try { JSON.parse(prefix); return false; } catch (err) {
    const msg = String(err.message || "");
    const pos = /position (\d+)/.exec(msg);
    if (pos) return Number(pos[1]) < prefix.length;
    return !/end of (JSON )?(input|data)/i.test(msg);
  }
}

// The browser's reason without its own position words (the line and column are said once, ours).
function reason(message) {
  return message.replace(/^JSON\.parse: /, "").replace(/, ".*" is not valid JSON$/s, "").replace(/\s*(in JSON )?at (position \d+|line \d+ column \d+)( of the JSON data)?.*$/s, "").trim();
}

// Check `textarea`'s text as it is typed and show the answer in `box` (beside it). `lang()` is the
// page's language now. Returns {check}: check at once (the Run button waits for it), resolving to
// whether the scenario is valid.
export function liveJsonEditor(textarea, box, lang) {
  let timer = null;
  let seq = 0;
  const L = (k) => t(lang(), k);

  function show(kind, lines) {
    clear(box);
    box.dataset.state = kind;  // ok | bad | empty
    box.classList.toggle("ok", kind === "ok");
    box.classList.toggle("bad", kind === "bad");
    if (kind === "bad") {
      textarea.setAttribute("aria-invalid", "true");
      box.append(el("ul", {}, lines.map((l) => el("li", { text: l }))));
    } else {
      textarea.removeAttribute("aria-invalid");
      if (lines.length) box.append(el("span", { text: lines[0] }));
    }
  }

  async function check() {
    clearTimeout(timer);
    const mine = ++seq;
    const text = textarea.value;
    if (!text.trim()) { show("empty", []); return false; }
    try {
      JSON.parse(text);
    } catch (err) {
      const msg = String(err && err.message ? err.message : err);
      const at = jsonErrorAt(text, msg);
      show("bad", [L("json_bad").replace("{line}", at.line).replace("{col}", at.col).replace("{why}", reason(msg))]);
      return false;
    }
    const r = await postJSON("/api/scenarios/validate", text);
    if (mine !== seq) return false;  // a newer edit is being checked
    const valid = Boolean(r.ok && r.data && r.data.valid);
    if (valid) show("ok", [L("editor_valid").replace("{n}", r.data.num_requests)]);
    else show("bad", errorLines(r.data));
    return valid;
  }

  textarea.setAttribute("aria-describedby", box.id);
  textarea.addEventListener("input", () => {
    clearTimeout(timer);
    seq++;  // an answer on its way is for older text
    timer = setTimeout(check, DEBOUNCE_MS);
  });
  return { check };
}
