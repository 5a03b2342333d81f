// Which cells of Model Runner V2's slot-indexed tables a kernel reads (core/kernel_reads.py says
// the same on the server): a slot's row of block_tables up to its num_blocks, all_token_ids up to
// its total_len, only for slots a request holds; the gathered input_block_tables row r up to
// num_blocks[idx_mapping[r]]. Past them a reused slot keeps what an earlier holder left: stale,
// and never read (attention reads cdiv(seq_len, block_size) entries). The main view strikes those
// cells out (v2tables.js) and the compare ignores them (comparepanes.js): one rule for both.
// Each function takes a step's trace and returns (row, col) => whether the cell is read, or null
// where the trace has no state slots (V1, nano-vllm, Ascend: every cell of their tables is read,
// their padding is 0 or -1).

const data = (t, name) => (t && t.arrays[name] ? t.arrays[name].data : null);

// slot -> the request holding it after this step's frees and adds
export function slotHolders(t) {
  return new Map(Object.entries((t && t.batch.slots) || {}).map(([rid, j]) => [Number(j), String(rid)]));
}

// the gathered table's rows (batch order)
export function gatheredReads(t) {
  const nb = data(t, "num_blocks"), idx = data(t, "idx_mapping");
  if (!nb || !idx || !data(t, "input_block_tables")) return null;
  const rows = (t.batch.req_ids || []).length;
  return (r, c) => r < rows && c < (nb[idx[r]] || 0);
}

// a slot-indexed table ("block_tables" up to num_blocks, "all_token_ids" up to total_len)
export function slotReads(t, name) {
  const len = data(t, name === "all_token_ids" ? "total_len" : "num_blocks");
  if (!len || !data(t, name)) return null;
  const held = slotHolders(t);
  return (j, c) => held.has(j) && c < (len[j] || 0);
}
