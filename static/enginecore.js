// The engine core's batch queue on the step bar (async scheduling, trace.engine_core): whose
// output this step's update_from_output took ("update_from_output ← step k"), the steps still in
// flight, and the requests that finished in that update. Synchronous runs have no record: the box
// stays hidden. Text only through el() (textContent), so request ids are never parsed as markup.
import { $, L, S } from "./context.js";
import { el } from "./views.js";

export function renderEngineCore() {
  const box = $("engine-core");
  if (!box) return;
  const ec = S.trace && S.trace.engine_core;
  if (!ec) {
    if (!box.hidden) { box.hidden = true; box.replaceChildren(); }
    return;
  }
  const k = ec.consumed_step;
  const parts = [
    k === null || k === undefined
      ? el("span", { class: "badge ec-consumed ec-wait", id: "ec-consumed", title: L("ec_wait_tip"), text: L("ec_waits") })
      : el("span", { class: "badge ec-consumed", id: "ec-consumed", title: L("ec_tip").replaceAll("{k}", k),
        text: L("ec_consumed").replace("{k}", k) }),
    el("span", { class: "badge ec-queue", id: "ec-queue",
      text: `${L("ec_queue")}: [${ec.batch_queue.join(", ")}] / ${ec.batch_queue_size}` }),
  ];
  if (!ec.scheduled) parts.push(el("span", { class: "badge ec-drain", text: L("ec_drain") }));
  if (ec.finished_req_ids && ec.finished_req_ids.length) {
    parts.push(el("span", { class: "badge ec-finished", text: `${L("ec_finished")}: ${ec.finished_req_ids.join(", ")}` }));
  }
  box.replaceChildren(...parts);
  box.hidden = false;
}
