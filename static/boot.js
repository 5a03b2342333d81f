// The run's first requests, started as early as the page can: this module and its two small
// imports load as their own async script, so the scenario is posted while the rest of the page's
// modules are still arriving (run.js takes the answer from here). The same function starts a run
// loaded in place later (a lesson's section, a what-if).

import { getJSON, postJSON, unpackLink } from "./api.js";
import { readState } from "./urlstate.js";

// {scenario, request, runner, stages, error}: the scenario (null where only the server can read the link),
// the pending POST /api/runs?wait=first (or GET from-link), and the flavour's stage list
export async function startRun(st) {
  let scenario = null, request;
  if (st.run || st.example) {
    // a recording's run: the server replayed it (its overview answers like POST /api/runs)
    request = st.example ? postJSON(`/api/runs/import?example=${encodeURIComponent(st.example)}`, "")
      : getJSON(`/api/runs/${encodeURIComponent(st.run)}`);
    return { scenario, request, runner: "", stages: null };
  }
  if (st.s) {
    scenario = await unpackLink(st.s);
    request = scenario ? postJSON("/api/runs?wait=first", scenario) : getJSON(`/api/runs/from-link?s=${encodeURIComponent(st.s)}`);
  } else {
    const preset = await getJSON(`/api/presets/${encodeURIComponent(st.preset || "seed-001")}`);
    if (!preset.ok) return { error: preset.data };
    scenario = preset.data.scenario;
    request = postJSON("/api/runs?wait=first", scenario);
  }
  // a scenario without a flavour is vLLM's (the scenario format's default)
  const flavor = scenario ? (typeof scenario.flavor === "string" ? scenario.flavor : "vllm") : "";
  // vLLM's runner as the scenario names it (the server's default, V2, is asked for once the run says so)
  const given = scenario && scenario.config && scenario.config.model_runner;
  const runner = flavor === "vllm" && (given === "v1" || given === "v2") ? given : "";
  return { scenario, request, runner, stages: flavor ? getJSON(stagesUrl(flavor, runner)) : null };
}

// the stage list of a flavour (and of vLLM's runner, where one is named)
export function stagesUrl(flavor, runner) {
  return `/api/stages?flavor=${encodeURIComponent(flavor)}${runner ? `&runner=${encodeURIComponent(runner)}` : ""}`;
}

const early = window.location.pathname === "/run" ? { search: window.location.search, run: startRun(readState()) } : { run: null };

// the run started at load, once, and only while the address is still the one it was started for
export function takeEarlyRun() {
  if (!early.run || window.location.search !== early.search) return null;
  const run = early.run;
  early.run = null;
  return run;
}
