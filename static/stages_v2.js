// Model Runner V2's stages on the stages panel: where each lives upstream (vLLM 0.33.0's
// vllm/v1/worker/gpu/, the def line of the function it mirrors) and its formula with the selected
// token's or request's own numbers. V2 stage names that V1 has too (query_start_loc, seq_lens,
// positions) are looked up here, never in V1's map: the two runners compute them differently.

import { A, L, S, blockSize, reqOfTokens } from "./context.js";

const GPU = "https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/v1/worker/gpu/";
const PREPARE = [`${GPU}model_runner.py`, "GPUModelRunner.prepare_inputs", 1388];
const POS_SEQ = [`${GPU}input_batch.py`, "prepare_pos_seq_lens", 393];
export const UPSTREAM_V2 = {
  finish_and_add: [`${GPU}model_runner.py`, "GPUModelRunner.finish_requests / add_requests / update_requests", 1188],
  idx_mapping: [`${GPU}model_runner.py`, "GPUModelRunner.gather_batch_req_state (sort_batch_req_ids)", 1306],
  cudagraph_dispatch: [`${GPU}cudagraph_utils.py`, "CudaGraphManager.dispatch", 523],
  query_start_loc: PREPARE,
  seq_lens: POS_SEQ,
  positions: POS_SEQ,
  prefill_inputs: [`${GPU}input_batch.py`, "prepare_prefill_inputs", 329],
  combine_sampled_and_draft_tokens: [`${GPU}input_batch.py`, "combine_sampled_and_draft_tokens", 475],
  gather_block_tables: [`${GPU}block_table.py`, "BlockTables.gather_block_tables", 160],
  slot_mappings: [`${GPU}block_table.py`, "BlockTables.compute_slot_mappings", 229],
  attn_metadata: PREPARE,
};

// a slot-level array's value for batch row r: array[idx_mapping[r]]
function atSlot(name, r) {
  const a = A(name), m = A("idx_mapping");
  return a && m ? a[m[r]] : undefined;
}

function v2Token(name, i) {
  const r = reqOfTokens()[i], j = A("idx_mapping")[r], pos = A("positions")[i];
  const q = A("query_start_loc"), bs = blockSize();
  switch (name) {
    case "positions": return `positions[${i}] = num_computed_tokens[idx_mapping[${r}]] + (${i} - query_start_loc[${r}]) = num_computed_tokens[${j}] + ${i - q[r]} = ${atSlot("num_computed_tokens", r)} + ${i - q[r]} = ${pos}`;
    case "prefill_inputs": {
      const prefill = atSlot("prefill_len", r);
      if (pos < prefill) return `input_ids[${i}] = all_token_ids[idx_mapping[${r}], ${pos}] = all_token_ids[${j}, ${pos}] = ${A("input_ids")[i]}`;
      return `${pos} ≥ prefill_len[${j}] = ${prefill}: ${L("v2_decode_next_stage")}`;
    }
    case "combine_sampled_and_draft_tokens": {
      const prefill = atSlot("prefill_len", r);
      const last = q[r + 1] - 1 === i;
      if (last && A("seq_lens")[r] > prefill) return `input_ids[${i}] = last_sampled_tokens[idx_mapping[${r}]] = last_sampled_tokens[${j}] = ${A("input_ids")[i]}`;
      return v2Request(name, r);
    }
    case "slot_mappings": {
      const slot = A("slot_mapping")[i], blk = Math.floor(slot / bs);
      return `slot_mapping[${i}] = block_tables[idx_mapping[${r}], ${pos} // ${bs}] * ${bs} + ${pos} % ${bs} = block_tables[${j}, ${Math.floor(pos / bs)}] * ${bs} + ${pos % bs} = ${blk} * ${bs} + ${pos % bs} = ${slot}`;
    }
    default: return v2Request(name, r);
  }
}

function v2Request(name, r) {
  const m = A("idx_mapping"), n = A("num_scheduled_tokens"), q = A("query_start_loc");
  if (!m || r === undefined || r === null || r >= m.length) return "";
  const j = m[r], rid = S.trace.batch.req_ids[r];
  switch (name) {
    case "finish_and_add": {
      const added = (S.trace.batch.slot_events || []).some((e) => e.event === "added" && String(e.req_id) === String(rid));
      return `${L("req")} ${rid} → ${L("v2_slot")} ${j}${added ? ` (${L("v2_added")}: free_indices.pop())` : ` (${L("v2_kept")})`}`;
    }
    case "idx_mapping": return `idx_mapping[${r}] = req_id_to_index[${rid}] = ${j};  num_scheduled_tokens[${r}] = ${n[r]}`;
    case "query_start_loc": return `query_start_loc[${r + 1}] = query_start_loc[${r}] + num_scheduled_tokens[${r}] = ${q[r]} + ${n[r]} = ${q[r + 1]}`;
    case "seq_lens": return `seq_lens[${r}] = num_computed_tokens[idx_mapping[${r}]] + num_scheduled_tokens[${r}] = num_computed_tokens[${j}] + ${n[r]} = ${atSlot("num_computed_tokens", r)} + ${n[r]} = ${A("seq_lens")[r]}`;
    case "combine_sampled_and_draft_tokens": return `logits_indices[${r}] = query_start_loc[${r + 1}] - 1 = ${q[r + 1]} - 1 = ${A("logits_indices")[r]}`;
    case "gather_block_tables": {
      const nb = atSlot("num_blocks", r), row = A("input_block_tables") ? A("input_block_tables")[r] : [];
      return `input_block_tables[${r}, :${nb}] = block_tables[idx_mapping[${r}], :num_blocks[${j}]] = block_tables[${j}, :${nb}] = [${row.slice(0, nb).join(", ")}]`;
    }
    case "attn_metadata": return `max_query_len = max(num_scheduled_tokens) = ${S.trace.scalars.max_query_len};  max_seq_len = ${S.trace.scalars.max_seq_len}`;
    default: return "";
  }
}

// the formula of a V2 stage with the selection's numbers ("" where there is no selection)
export function substitutedV2(name, sel) {
  if (!sel || S.trace.idle || !A("idx_mapping")) return "";
  if (sel.kind === "token") return v2Token(name, sel.index);
  if (sel.kind === "request") return v2Request(name, sel.index);
  return "";
}
