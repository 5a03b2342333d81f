// What the run page fetches of a run besides its first answer: a step's trace (once, kept with the
// run it was fetched for), the run's stage list for its runner, and the overview of a run still
// computing (its steps so far, each pending).

import { errorLines, getJSON, unpackLink } from "./api.js";
import { stagesUrl } from "./boot.js";
import { S } from "./context.js";

// a step's trace, fetched once (a fetch under way is shared, not repeated). It is kept in the cache
// of the run it was fetched for only: S.steps is replaced with S.created (loadRun), so a step that
// lands while or after another run loads is not taken later for that run's step of the same number.
const inflight = new Map();
export async function fetchStep(n) {
  const steps = S.steps;
  if (steps.has(n)) return steps.get(n);
  const run = S.created.run_id, key = `${run}/${n}`;
  if (!inflight.has(key)) {
    inflight.set(key, getJSON(`/api/runs/${run}/steps/${n}`).finally(() => inflight.delete(key)));
  }
  const r = await inflight.get(key);
  if (!r.ok) throw new Error(errorLines(r.data).join("; "));
  if (S.steps === steps) steps.set(n, r.data);
  return r.data;
}

// the run's stage list: the one asked for at load when it was for this run's runner (V1's unless
// the scenario named V2), else the runner's own
export async function stagesOf(started, created) {
  const sc = created.flavor === "vllm" ? await unpackLink(created.link) : null;
  const runner = sc && sc.config ? sc.config.model_runner || "" : started.runner || "";
  if (started.stages && (started.runner || "v1") === (runner || "v1")) return started.stages;
  return getJSON(stagesUrl(created.flavor, runner));
}

// The overview of a run still computing: its scenario as the server normalised it (the created
// link), the steps so far, each still without its summary (kind "pending").
export async function partialOverview(created) {
  const scenario = await unpackLink(created.link);
  if (!scenario) return getJSON(`/api/runs/${created.run_id}`);  // no inflater: wait for the whole run
  return { ok: true, data: { run_id: created.run_id, scenario, num_steps: created.num_steps, truncated: false, device: created.device,
    flavor: created.flavor, link: created.link, upstream: created.upstream || "", complete: false, steps: pendingSteps(1, created.num_steps) } };
}

export function pendingSteps(from, to) {
  const out = [];
  for (let n = from; n <= to; n++) {
    out.push({ step: n, idle: false, kind: "pending", pending: true, num_reqs: 0, num_tokens: 0, new_req_ids: [], resumed_req_ids: [],
               finished_req_ids: [], preempted_req_ids: [] });
  }
  return out;
}
