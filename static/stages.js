// The stages panel: the step's pipeline stages in order, the chosen stage's explanation, formula and
// engine source, a link to the upstream function it mirrors, the values it writes, and its formula
// again with the selected token's (or request's) own numbers substituted in. The whole slot formula,
// slot = block_table[req, pos // block_size] * block_size + pos % block_size, stays pinned above
// the detail, each term in its array's colour and linked to that array in the other views.

import { formulaText, stageText } from "./i18n.js";
import { UPSTREAM_V2, substitutedV2 } from "./stages_v2.js";
import { $, A, L, S, blockSize, btName, isV2, reqOfTokens, runnerOf, slotOfRow, stageFlavor, stageIndex, stageNames, state, tokenCount } from "./context.js";
import { clear, el, fmtList, needsBuild, setText } from "./views.js";

// Where each stage lives upstream, at the version or commit the flavour mirrors (read from that
// source: vLLM 0.33.0 computes block numbers, offsets and slots in one Triton kernel).
const VLLM = "https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/v1/worker/";
const RUNNER = [`${VLLM}gpu_model_runner.py`, "GPUModelRunner._prepare_inputs", 1924];
const SLOTS = [`${VLLM}block_table.py`, "ComputeSlotMappingKernel.kernel (BlockTable.compute_slot_mapping)", 320];
const NANO = "https://github.com/GeeeekExplorer/nano-vllm/blob/bb823b3/nanovllm/engine/model_runner.py";
const ASCEND = "https://github.com/vllm-project/vllm-ascend/blob/182b75ea84/vllm_ascend/worker/model_runner_v1.py";
export const UPSTREAM = {
  update_states: [`${VLLM}gpu_model_runner.py`, "GPUModelRunner._update_states (InputBatch.condense)", 1176],
  req_indices: RUNNER, positions: RUNNER, token_indices: RUNNER, input_ids: RUNNER, query_start_loc: RUNNER,
  seq_lens: RUNNER, logits_indices: RUNNER,
  cu_num_tokens: [`${VLLM}gpu_model_runner.py`, "GPUModelRunner._get_cumsum_and_arange", 1699],
  block_table_indices: SLOTS, block_numbers: SLOTS, block_offsets: SLOTS, slot_mapping: SLOTS,
  attn_metadata: [`${VLLM}gpu_model_runner.py`, "GPUModelRunner._build_attention_metadata", 2253],
  "ascend:attn_mask": [ASCEND, "NPUModelRunner._build_attn_state (vllm-ascend 182b75ea84)"],
  "nanovllm:positions": [NANO, "ModelRunner.prepare_prefill / prepare_decode (nano-vllm bb823b3)"],
  "nanovllm:input_ids": [NANO, "ModelRunner.prepare_prefill / prepare_decode (nano-vllm bb823b3)"],
  "nanovllm:cu_seqlens_q": [NANO, "ModelRunner.prepare_prefill (nano-vllm bb823b3)"],
  "nanovllm:cu_seqlens_k": [NANO, "ModelRunner.prepare_prefill (nano-vllm bb823b3)"],
  "nanovllm:slot_mapping": [NANO, "ModelRunner.prepare_prefill / prepare_decode (nano-vllm bb823b3)"],
  "nanovllm:block_tables": [NANO, "ModelRunner.prepare_block_tables (nano-vllm bb823b3)"],
  "nanovllm:last_indices": [NANO, "ModelRunner.prepare_sample / prepare_prefill (nano-vllm bb823b3)"],
};

// (flavor "v2": Model Runner V2's stages, which never fall back to V1's)
export function upstreamOf(name, flavor) {
  if (flavor === "v2") return UPSTREAM_V2[name] || null;
  if (flavor === "nanovllm") return UPSTREAM[`nanovllm:${name}`] || null;
  return UPSTREAM[`${flavor}:${name}`] || UPSTREAM[name] || null;
}

// the link shown, naming vLLM's runner where the flavour is vLLM's: a step change keeps it
function renderUpstream(name) {
  if (!needsBuild($("stage-upstream"), [name, stageFlavor(), state.lang])) return;
  const box = clear($("stage-upstream"));
  const up = upstreamOf(name, stageFlavor());
  if (!up) return;
  const [file, fn, line] = up;
  const href = line ? `${file}#L${line}` : file;
  const shortFile = file.replace(/^https:\/\/github\.com\/[^/]+\/[^/]+\/blob\/[^/]+\//, "");
  const runner = runnerOf();
  box.append(`${L("mirrors_upstream")} `, el("a", { href, target: "_blank", rel: "noopener", text: `${shortFile} · ${fn}` }),
    ...(runner ? [el("span", { class: "upstream-runner", text: ` · ${L(`runner_${runner}`)}` })] : []));  // append(null) would write "null"
}

// The whole slot formula, its terms coloured like their arrays (positions, block_table, block_size,
// slot_mapping; the colours are style.css's --t-* and mark the same arrays' rows and cards) and
// tagged with the array each stands for; with a selected token, its numbers too.
export function renderSlotFormula() {
  const box = $("slot-formula");
  if (!box) return;
  clear(box);
  const bt = S.trace ? btName() : "block_table";
  const term = (array, text) => el("span", { class: `term t-${array}`, dataset: { array }, text });
  box.append(term("slot_mapping", "slot"), " = ", term("block_table", `${bt}[`), term("req", isV2() ? "idx_mapping[row]" : "req"), ", ",
    term("positions", "pos"), " // ", term("block_size", "block_size"), term("block_table", "]"), " * ",
    term("block_size", "block_size"), " + ", term("positions", "pos"), " % ", term("block_size", "block_size"));
  // with nothing selected, the normal view takes the step's last token as its example (not in a
  // lesson, whose checkpoints choose what the page may show; presentation keeps its one screen)
  const T = S.trace ? tokenCount() : 0;
  const example = !state.present && !document.body.classList.contains("with-lesson") && T > 0 ? { kind: "token", index: T - 1 } : null;
  const sel = S.hover || S.sel || example;
  if (!sel || sel.kind !== "token" || !S.trace || S.trace.idle || !A("slot_mapping")) return;
  const i = sel.index, r = reqOfTokens()[i], pos = A("positions")[i], bs = blockSize(), slot = A("slot_mapping")[i];
  if (sel === example) box.append(el("br"), el("span", { class: "muted formula-example", text: `${L("token")} ${i} (${L("req")} ${S.trace.batch.req_ids[r]}):` }));
  const blk = Math.floor(slot / bs);
  // V2: the row is the request's state slot, idx_mapping[batch row]
  box.append(el("br"), term("slot_mapping", `${slot}`), " = ", term("block_table", `${bt}[`), term("req", String(slotOfRow(r))), ", ",
    term("positions", String(pos)), " // ", term("block_size", String(bs)), term("block_table", "]"), " * ",
    term("block_size", String(bs)), " + ", term("positions", String(pos)), " % ", term("block_size", String(bs)),
    " = ", term("block_table", String(blk)), ` * ${bs} + ${pos % bs}`);
}

// the stage list; onPick(name) chooses a stage. The list is built once per run's stages and
// language; a step or stage change only moves its mark (a button keeps its focus when pressed).
export function renderStages(onPick) {
  const list = $("stage-list");
  const names = stageNames();
  if (needsBuild(list, [names, state.lang, stageFlavor()])) {
    clear(list);
    names.forEach((name, i) => {
      const [title] = stageText(state.lang, name, stageFlavor());
      list.append(el("li", {}, el("button", { class: "stage-btn", dataset: { stage: name }, onclick: () => onPick(name) },
        [el("span", { class: "stage-num", text: i + 1 }), el("span", { class: "stage-title", text: title }),
         el("code", { class: "stage-code", text: name })])));
    });
  }
  for (const b of list.querySelectorAll(".stage-btn")) {
    const active = b.dataset.stage === state.stage;
    if (b.classList.contains("active") === active) continue;
    b.classList.toggle("active", active);
    if (active) b.setAttribute("aria-current", "step");
    else b.removeAttribute("aria-current");
  }
}

export function renderStageDetail() {
  const name = state.stage;
  const info = S.trace.stages.find((s) => s.name === name) || { reads: [], writes: [], formula: "" };
  const src = S.stages.find((s) => s.name === name);
  const [title, expl] = stageText(state.lang, name, stageFlavor());
  setText($("stage-title"), `${stageIndex(name) + 1}. ${title}`);
  setText($("stage-expl"), expl || info.why || "");
  setText($("stage-formula"), formulaText(state.lang, info.formula));
  setText($("stage-source"), src ? src.source : "");
  renderUpstream(name);
  const vals = clear($("stage-values"));
  for (const w of info.writes) {
    const arr = S.trace.arrays[w];
    if (arr && arr.level !== "system" && arr.shape.length === 1) {
      vals.append(el("div", { class: "value-line", dataset: { array: w } }, [el("code", { text: w }), " = ", fmtList(arr.data, 64)]));
    } else if (arr) {
      vals.append(el("div", { class: "value-line", dataset: { array: w } }, [el("code", { text: w }), ` : ${arr.dtype}[${arr.shape.join(" × ")}]`]));
    } else if (S.trace.scalars[w] !== undefined) {
      vals.append(el("div", { class: "value-line", dataset: { array: w } }, [el("code", { text: w }), ` = ${S.trace.scalars[w]}`]));
    }
  }
  renderSubstituted();
}

// The stage's formula with the selected token's (or request's) own numbers.
function substituted() {
  const sel = S.hover || S.sel;
  if (!sel || S.trace.idle) return "";
  const a = (n) => A(n);
  const bs = blockSize();
  const M = S.overview.scenario.config.max_model_len;
  const K = Math.ceil(M / bs);
  const name = state.stage;
  if (isV2()) return substitutedV2(name, sel);
  if (sel.kind === "token") {
    const i = sel.index;
    const r = reqOfTokens()[i];
    const pos = a("positions") ? a("positions")[i] : null;
    switch (name) {
      case "req_indices": return `req_indices[${i}] = ${r}   (query_start_loc[${r}] = ${a("query_start_loc")[r]} ≤ ${i} < query_start_loc[${r + 1}] = ${a("query_start_loc")[r + 1]})`;
      case "cu_num_tokens": { const cu = a("cu_num_tokens"), n = a("num_scheduled_tokens");
        return `arange[${i}] = ${i} - (cu_num_tokens[${r}] - num_scheduled_tokens[${r}]) = ${i} - (${cu[r]} - ${n[r]}) = ${a("arange")[i]}`; }
      case "positions": if (a("arange")) return `positions[${i}] = num_computed_tokens_cpu[req_indices[${i}]] + arange[${i}] = ${a("num_computed_tokens_cpu")[r]} + ${a("arange")[i]} = ${pos}`;
        return `positions[${i}] = ${pos}   (${L("req")} ${S.trace.batch.req_ids[r]})`;
      case "token_indices": return `token_indices[${i}] = positions[${i}] + req_indices[${i}] * M = ${pos} + ${r} * ${M} = ${a("token_indices")[i]}`;
      case "token_indices_whatif": return `token_indices_whatif[${i}] = ${pos} + ${r} * K * block_size = ${pos} + ${r} * ${K * bs} = ${a("token_indices_whatif")[i]}` +
        ` (token_indices[${i}] = ${a("token_indices")[i]}): input_ids_whatif[${i}] = ${a("input_ids_whatif")[i]}${a("whatif_wrong")[i] ? " ✗" : " ✓"}`;
      case "mrope_positions": { const m = a("mrope_positions"); return `mrope_positions[:, ${i}] = (t ${m[0][i]}, h ${m[1][i]}, w ${m[2][i]})   positions[${i}] = ${pos}`; }
      case "input_ids": if (a("token_indices")) return `input_ids[${i}] = token_ids_cpu.flatten()[${a("token_indices")[i]}] = token_ids_cpu[${r}][${pos}] = ${a("input_ids")[i]}`;
        return `input_ids[${i}] = ${a("input_ids")[i]}`;
      case "block_table_indices": return `block_table_indices[${i}] = req_indices[${i}] * K + positions[${i}] // block_size = ${r} * ${K} + ${pos} // ${bs} = ${a("block_table_indices")[i]}`;
      case "block_numbers": return `block_numbers[${i}] = block_table.flatten()[${a("block_table_indices")[i]}] = block_table[${r}][${Math.floor(pos / bs)}] = ${a("block_numbers")[i]}`;
      case "block_offsets": return `block_offsets[${i}] = positions[${i}] % block_size = ${pos} % ${bs} = ${a("block_offsets")[i]}`;
      case "slot_mapping": if (a("block_numbers")) return `slot_mapping[${i}] = block_numbers[${i}] * ${bs} + block_offsets[${i}] = ${a("block_numbers")[i]} * ${bs} + ${a("block_offsets")[i]} = ${a("slot_mapping")[i]}`;
        // nano-vllm: a prefill without a cache hit passes no block_tables; the block is read off the slot
        return `slot_mapping[${i}] = seq.block_table[${pos} // ${bs}] * ${bs} + ${pos} % ${bs} = ${Math.floor(a("slot_mapping")[i] / bs)} * ${bs} + ${pos % bs} = ${a("slot_mapping")[i]}`;
      case "attn_mask": { const m = a("attn_mask"); if (!m) return "";
        const row = m.length === tokenCount() ? i : pos; const S2 = m[0].length;
        return `attn_mask[${row}] = causal row of position ${pos}: columns 0..${Math.min(pos, S2 - 1)} visible, ${pos + 1 < S2 ? `${pos + 1}..${S2 - 1} masked` : "none masked"}`; }
      default: return subRequest(name, r);
    }
  }
  if (sel.kind === "request") return subRequest(name, sel.index);
  return "";
}

function subRequest(name, r) {
  const a = (n) => A(n);
  if (r === undefined || r === null) return "";
  switch (name) {
    case "query_start_loc": return `query_start_loc[${r + 1}] = cu_num_tokens[${r}] = ${a("query_start_loc")[r + 1]}   (query_start_loc[0] = 0)`;
    case "seq_lens": return `seq_lens[${r}] = num_computed_tokens_cpu[${r}] + num_scheduled_tokens[${r}] = ${a("num_computed_tokens_cpu")[r]} + ${a("num_scheduled_tokens")[r]} = ${a("seq_lens")[r]}`;
    case "logits_indices": return `logits_indices[${r}] = query_start_loc[${r + 1}] - 1 = ${a("query_start_loc")[r + 1]} - 1 = ${a("logits_indices")[r]};  discard_request_mask[${r}] = seq_lens[${r}] < num_tokens[${r}] = ${a("seq_lens")[r]} < ${a("num_tokens")[r]} = ${a("discard_request_mask")[r]}`;
    case "update_states": if (!a("num_computed_tokens_cpu")) return "";
      return `${L("row")} ${r} ← ${L("req")} ${S.trace.batch.req_ids[r]}: num_computed_tokens_cpu[${r}] = ${a("num_computed_tokens_cpu")[r]}, num_scheduled_tokens[${r}] = ${a("num_scheduled_tokens")[r]}`;
    case "attn_metadata": return `max_query_len = max(num_scheduled_tokens) = ${S.trace.scalars.max_query_len};  max_seq_len = max(seq_lens) = ${S.trace.scalars.max_seq_len}`;
    default: return "";
  }
}

export function renderSubstituted() {
  setText($("stage-sub"), substituted() || L("none_selected"));
  renderSlotFormula();
}
