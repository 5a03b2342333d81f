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
