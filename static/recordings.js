// The landing page's "your own vLLM server" section: the shipped recordings of vLLM 0.33.0's own
// scheduler (GET /api/recordings) and a file picker that imports a recording made with
// pagedviz.record (POST /api/runs/import, the file sent as it is), then opens its run: the server
// answers once every line is checked and the first step is replayed, and the run page shows the
// replay's progress (steps done of the recording's) while the later steps come.

import { errorLines, getJSON } from "./api.js";
import { t } from "./i18n.js";
import { clear, el } from "./views.js";

export async function recordingsSection(list, input, out, lang = "en") {
  const r = await getJSON(`/api/recordings?lang=${lang === "zh" ? "zh" : "en"}`);
  if (r.ok) {
    clear(list);
    for (const x of r.data) {
      list.append(el("li", {}, [el("a", { href: x.url + (lang === "zh" ? "&lang=zh" : ""), text: x.title })]));
    }
  }
  input.onchange = async () => {
    const file = input.files[0];
    if (!file) return;
    const box = clear(out);
    box.classList.remove("bad");
    box.append(el("span", { text: t(lang, "rec_sending").replace("{name}", file.name).replace("{kb}", Math.ceil(file.size / 1024)) }));
    let answer;
    try {
      const resp = await fetch("/api/runs/import", {
        method: "POST", headers: { "Content-Type": "application/x-ndjson", Accept: "application/json" }, body: file,
      });
      answer = { ok: resp.ok, data: await resp.json().catch(() => null) };
    } catch (err) {
      answer = { ok: false, data: { detail: [{ field: "", message: String(err) }] } };
    }
    if (answer.ok && answer.data.cut) {
      // its last line was cut mid-write: every whole line is imported, and the reader is told where it stops
      const url = answer.data.url + (lang === "zh" ? "&lang=zh" : "");
      clear(box).dataset.cut = String(answer.data.cut.line);
      box.append(el("span", { text: `${file.name}: ${answer.data.cut.text[lang] || answer.data.cut.text.en} ` }),
        el("a", { href: url, text: t(lang, "rec_open") }));
      return;
    }
    if (answer.ok) { window.location.href = answer.data.url + (lang === "zh" ? "&lang=zh" : ""); return; }
    clear(box).classList.add("bad");
    // the server's own lines, in English: said so in 中文, and marked as English text
    box.append(el("span", { text: `${file.name}: ${lang === "zh" ? t(lang, "server_said") : ""}` }),
      el("span", { lang: "en", text: errorLines(answer.data).join("; ") }));
  };
}
