// Thin fetch helpers over the REST API: every call resolves to {ok, status, data}.

async function asResult(resp) {
  let data = null;
  try { data = await resp.json(); } catch (_) { data = null; }
  return { ok: resp.ok, status: resp.status, data };
}

export async function getJSON(url) {
  return asResult(await fetch(url, { headers: { Accept: "application/json" } }));
}

export async function postJSON(url, body) {
  return asResult(await fetch(url, {
    method: "POST", headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  }));
}

// The API's error body as readable lines: "field: message".
export function errorLines(data) {
  if (!data || !Array.isArray(data.detail)) return ["unexpected response from the server"];
  return data.detail.map((d) => (d.field ? `${d.field}: ${d.message}` : d.message));
}

// While `work` (a request that computes a run) is pending, ask the server how far the run has come
// and hand each answer to `onProgress`: the first ask after `delayMs`, then every `everyMs`.
// `runId` may be a promise of the id, or a function that returns one (called only when the first
// ask is due), or null when there is none to ask about.
export async function withProgress(runId, work, onProgress, { delayMs = 400, everyMs = 500 } = {}) {
  let done = false;
  const poll = async () => {
    runId = await (typeof runId === "function" ? runId() : runId);
    while (!done && runId) {
      // a poll that got no answer is only a progress line missed: the next one asks again
      const p = await getJSON(`/api/runs/${encodeURIComponent(runId)}/progress`).catch(() => ({ ok: false }));
      if (!done && p.ok && p.data.state === "computing") onProgress(p.data);
      await new Promise((resolve) => setTimeout(resolve, everyMs));
    }
  };
  const timer = setTimeout(poll, delayMs);
  try { return await work; } finally { done = true; clearTimeout(timer); }
}

// The scenario inside a packed link (zlib + base64url), or null where the browser cannot inflate.
export async function unpackLink(packed) {
  if (typeof DecompressionStream === "undefined") return null;
  try {
    const b64 = packed.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((packed.length + 3) % 4);
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return JSON.parse(await new Response(stream).text());
  } catch (_) {
    return null;  // the server says what is wrong with the link
  }
}
