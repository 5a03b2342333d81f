"""vLLM's arrays into a pagedviz trace (the engine `vllm`, live.py): each array vLLM's runner made
replaces the trace's over its real entries (rows, and columns for a table; a padded array's real
part), and where pagedviz's replay had computed something else the step notes the array's first
difference. V1: `_prepare_inputs`' arrays, the block table's rows, the live part of each row of
`token_ids_cpu` (compared only: vLLM leaves stale ids past a request's tokens, where pagedviz writes
zeros). V2: the per-slot state of the occupied slots, the input buffers, the gathered block table's
live entries, the CUDA-graph dispatch and the attention metadata's counts.

With several KV cache groups (a hybrid model) each group's block table, slot_mapping (and V2's
per-slot `num_blocks`) are taken too: group 0 under vLLM's name, group g >= 1 under the name with
`_g<g>` after it (`block_table_g1`, `slot_mapping_g1`, `input_block_tables_g1`, `num_blocks_g1`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedviz.core.trace import StepTrace

# V1: the arrays of vLLM's `_prepare_inputs` (v1.py, `_Runner.step`), request or token level
V1_ARRAYS = (
    "num_scheduled_tokens",
    "num_computed_tokens_cpu",
    "req_indices",
    "positions",
    "input_ids",
    "query_start_loc",
    "seq_lens",
    "discard_request_mask",
    "logits_indices",
    "slot_mapping",
)
# V2: the input buffers of vLLM's `prepare_inputs` / `prepare_attn` (v2.py, `V2Step.arrays`)
V2_ARRAYS = (
    "idx_mapping",
    "num_scheduled_tokens",
    "query_start_loc",
    "seq_lens",
    "positions",
    "input_ids",
    "cu_num_logits",
    "logits_indices",
    "slot_mapping",
)
# V2's per-slot state after its state updates (compared and taken on the occupied slots)
V2_SLOT_ARRAYS = ("num_computed_tokens", "prefill_len", "total_len", "num_blocks")
# V2 with drafts: the expanded mappings and V2's rejection sampler (v2.py, `_verify_and_propose`)
V2_SPEC_ARRAYS = (
    "expanded_idx_mapping",
    "expanded_local_pos",
    "draft_sampled",
    "num_sampled",
    "num_rejected",
)


def group_name(name: str, group: int) -> str:
    """An array of KV cache group `group` in the trace: vLLM's name for group 0, with the group's
    index after it for the others (`block_table_g1`, `slot_mapping_g1`): one key per group, as
    JSON keeps it."""
    return name if group == 0 else f"{name}_g{group}"


def num_groups(arrays: dict[str, Any], name: str) -> int:
    """How many KV cache groups `arrays` holds `name` for (group 0 under `name` itself)."""
    g = 0
    while group_name(name, g) in arrays:
        g += 1
    return g


def _first_difference(ours: np.ndarray, theirs: np.ndarray) -> str:
    if ours.shape != theirs.shape:
        return f"shape {list(theirs.shape)} (vLLM) vs {list(ours.shape)} (pagedviz)"
    where = np.argwhere(ours != theirs)[0]
    at = tuple(int(i) for i in where)
    return f"at {list(at) if len(at) > 1 else at[0]}: vLLM {theirs[at].item()}, pagedviz {ours[at].item()}"


def take(trace: StepTrace, name: str, theirs: np.ndarray, taken: list[str], diffs: dict[str, str]) -> None:
    """Put vLLM's `theirs` into the trace's array `name` over its leading entries (rows, and
    columns for a table), noting the first difference from what pagedviz computed."""
    entry = trace.array_entries.get(name)
    if entry is None:
        diffs[name] = "vLLM computed it, pagedviz's trace has no such array"
        return
    data = np.array(entry.data, copy=True)
    theirs = np.asarray(theirs)
    if data.ndim != theirs.ndim or data.ndim > 2:
        diffs[name] = _first_difference(data, theirs)
        return
    region = tuple(slice(0, min(a, b)) for a, b in zip(data.shape, theirs.shape))
    longer = theirs.shape[0] > data.shape[0]
    shorter = data.ndim == 1 and theirs.shape[0] < data.shape[0]
    if (longer or shorter) and theirs.shape[0] != entry.valid:  # (not a padded array's real part)
        diffs[name] = _first_difference(data, theirs)
    ours = data[region]
    want = theirs[region].astype(data.dtype)
    if not np.array_equal(ours, want):
        diffs.setdefault(name, _first_difference(ours, want))
    data[region] = want
    entry.data = data
    if entry.buffer is not None and data.ndim == 1:
        buffer = entry.buffer.copy()
        n = min(len(buffer), len(want))
        buffer[:n] = want[:n]
        entry.buffer = buffer
    taken.append(name)


def take_v1(trace: StepTrace, arrays: dict[str, np.ndarray], taken: list[str], diffs: dict[str, str]) -> None:
    device_ids = "input_ids_device" in trace.array_entries  # async scheduling (V1)
    for name in V1_ARRAYS:
        if name not in arrays:
            continue
        if name == "input_ids" and device_ids:
            _take_device_ids(trace, arrays[name], taken, diffs)
        else:
            take(trace, name, arrays[name], taken, diffs)
    for g in range(num_groups(arrays, "block_table")):  # MultiGroupBlockTable, group by group
        if g:
            name = group_name("slot_mapping", g)
            if name in arrays:
                take(trace, name, arrays[name], taken, diffs)
        if trace.batch.get("req_ids"):
            rows = len(trace.batch["req_ids"])
            name = group_name("block_table", g)
            take(trace, name, arrays[name][:rows], taken, diffs)
    rows_vllm = [str(r) for r in arrays.get("req_ids", [])]
    if rows_vllm != list(trace.batch.get("req_ids", [])):
        diffs["req_ids"] = f"vLLM's batch rows {rows_vllm}, pagedviz's {trace.batch.get('req_ids')}"
    entry = trace.array_entries.get("token_ids_cpu")
    if "token_ids_cpu" in arrays and entry is not None and "num_tokens" in trace.array_entries:
        # the live part of each row (vLLM leaves stale ids past a request's tokens and in
        # vacated rows, where pagedviz writes zeros)
        data = np.array(entry.data, copy=True)
        for row, k in enumerate(trace.arrays["num_tokens"].tolist()):
            theirs = arrays["token_ids_cpu"][row, :k]
            if data[row, :k].tolist() != theirs.tolist():
                diffs.setdefault("token_ids_cpu", f"row {row}: {_first_difference(data[row, :k], theirs)}")
            data[row, :k] = theirs
        entry.data = data
        taken.append("token_ids_cpu")


def _take_device_ids(trace: StepTrace, theirs: np.ndarray, taken: list[str], diffs: dict[str, str]) -> None:
    """V1 with async scheduling: vLLM's runner runs each batch at once, synchronously, so its
    input ids hold the sampled tokens the device fills in (`input_ids_device`), not the CPU's
    placeholders (which stay pagedviz's). One case it cannot show: a request preempted after it
    sampled, across a step with no forward, gets that stale sample scattered into its recompute
    chunk's last position on the device (`_prepare_input_ids`); pagedviz models the scatter, so
    the sample positions of multi-token rows keep pagedviz's ids."""
    a = trace.arrays
    theirs = np.asarray(theirs).copy()
    flat = a.get("sample_flattened_indices")
    if flat is not None and len(flat):
        rows_of = np.searchsorted(a["query_start_loc"], flat, side="right") - 1
        chunk = flat[a["num_scheduled_tokens"][rows_of] > 1]
        theirs[chunk] = a["input_ids_device"][chunk]
    take(trace, "input_ids_device", theirs, taken, diffs)


def take_v2(trace: StepTrace, got: Any, taken: list[str], diffs: dict[str, str]) -> None:
    if got is None:
        return
    b = trace.batch
    if got.slots != b.get("slots"):
        diffs["slots"] = f"vLLM's RequestState slots {got.slots}, pagedviz's {b.get('slots')}"
    if got.free_slots != b.get("free_slots"):
        diffs["free_slots"] = f"vLLM's free slots {got.free_slots}, pagedviz's {b.get('free_slots')}"
    slot_names = list(V2_SLOT_ARRAYS)
    G = num_groups(got.slot_state, "num_blocks")
    slot_names += [group_name("num_blocks", g) for g in range(1, G)]
    for name in slot_names:
        entry = trace.array_entries.get(name)
        if entry is None:
            continue
        data = np.array(entry.data, copy=True)
        for rid, j in got.slots.items():
            theirs = int(got.slot_state[name][j])
            if int(data[j]) != theirs:
                diffs.setdefault(name, f"slot {j} ({rid}): vLLM {theirs}, pagedviz {int(data[j])}")
            data[j] = theirs
        entry.data = data
        taken.append(name)
    if not got.req_ids:
        return
    if got.req_ids != b.get("req_ids"):
        diffs["req_ids"] = f"vLLM's batch order {got.req_ids}, pagedviz's {b.get('req_ids')}"
    names = list(V2_ARRAYS) + [group_name("slot_mapping", g) for g in range(1, G)]
    for name in names:
        theirs = got.arrays[name]
        if name.startswith("slot_mapping") and len(got.padded.get(name, ())) > len(theirs):
            theirs = got.padded[name]  # up to the CUDA-graph size, -1 past the tokens
        take(trace, name, theirs, taken, diffs)
    for g, block_rows in enumerate(got.group_block_rows or [got.block_rows]):
        name = group_name("input_block_tables", g)
        table = trace.array_entries.get(name)
        if table is None:
            if g:
                diffs[name] = "vLLM computed it, pagedviz's trace has no such array"
            continue
        data = np.array(table.data, copy=True)
        for i, row in enumerate(block_rows):
            if data[i, : len(row)].tolist() != row:
                diffs.setdefault(name, f"row {i}: vLLM {row}, pagedviz {data[i, : len(row)].tolist()}")
            data[i, : len(row)] = row
        table.data = data
        taken.append(name)
    mode = got.padded.get("cudagraph_mode")
    ours = (trace.scalars.get("cudagraph_mode"), trace.scalars.get("num_tokens_after_padding"))
    if mode is not None and (mode, got.padded["num_tokens_after_padding"]) != ours:
        n = got.padded["num_tokens_after_padding"]
        diffs["cudagraph_mode"] = f"vLLM dispatches {mode} with {n} tokens, pagedviz {ours}"
    for key, value in got.scalars.items():
        if trace.scalars.get(key) != value:
            diffs.setdefault(key, f"vLLM {value}, pagedviz {trace.scalars.get(key)}")
        trace.scalars[key] = value
    if "num_sampled" in got.arrays:
        _take_v2_drafts(trace, got, taken, diffs)


def _take_v2_drafts(trace: StepTrace, got: Any, taken: list[str], diffs: dict[str, str]) -> None:
    """V2's drafts: the expanded mappings and verification, the slots' drafts this step read, and
    what V2's n-gram speculator proposed after it (pagedviz's `proposed_draft_token_ids`)."""
    for name in V2_SPEC_ARRAYS:
        take(trace, name, got.arrays[name], taken, diffs)
    entry = trace.array_entries.get("draft_tokens")
    if entry is not None:
        data = np.array(entry.data, copy=True)
        for rid, j in got.slots.items():
            theirs = got.slot_state["draft_tokens"][j]
            if data[j].tolist() != theirs.tolist():
                diffs.setdefault(
                    "draft_tokens", f"slot {j} ({rid}): vLLM {theirs.tolist()}, pagedviz {data[j].tolist()}"
                )
            data[j] = theirs
        entry.data = data
        taken.append("draft_tokens")
    proposed = trace.forward.get("proposed_draft_token_ids", {})
    for i, rid in enumerate(got.req_ids):
        theirs = got.arrays["proposed"][i].tolist()
        if rid in proposed and proposed[rid] != theirs:
            diffs.setdefault("proposed_draft_token_ids", f"{rid}: vLLM {theirs}, pagedviz {proposed[rid]}")
            proposed[rid] = theirs
