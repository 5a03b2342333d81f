"""The Model Runner V2 group's comparison (tests/fidelity): pagedviz's V2 model against vLLM
0.33.0's own V2 code (pagedviz.core.vllm_engine.v2, the engine `vllm`'s V2 side: the Scheduler
built for V2, V2's RequestState / BlockTables / InputBuffers and the GPUModelRunner methods that
update them and prepare a step's inputs, with V2's Triton kernels run by Triton's interpreter on
the CPU), step by step. The sampled tokens go from pagedviz's trace to vLLM, so both sides see the
same sequences.

Each step compares: the scheduler's scheduled tokens (in order), new (resumed included, in order),
resumed (always none under V2), preempted and finished ids, and new block ids; the state slots
(`req_id_to_index`), the free slots in hand-out order and the slot events; the batch order and
`idx_mapping`; `num_scheduled_tokens`, `query_start_loc` (first R+1), `seq_lens` (R), `positions`,
`input_ids`, `cu_num_logits`, `logits_indices`, `slot_mapping` (first T); the gathered block
table's valid entries (row i: the first cdiv(seq_lens[i], block_size)); the per-slot state of
occupied slots; the attention metadata's counts; vLLM's CUDA-graph dispatch (mode, padded sizes)
and the padded buffers; which requests sample. With async scheduling vLLM's AsyncScheduler runs
under the engine core's batch-queue loop (pagedviz.core.vllm_engine.loop) and each step also
compares the loop's decisions. With n-gram speculative decoding also: the scheduled draft counts
(-1 placeholders), `expanded_idx_mapping`, `expanded_local_pos`, `draft_sampled`, `num_sampled`,
`num_rejected`, the per-slot `draft_tokens` each step verifies, and the drafts V2's speculator
proposes after it.

Callers check first that vLLM and Triton are installed (tests.support.fidelity_env.require_triton):
this module imports vLLM's V2 side, which must be the first to import Triton.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedviz.core import Scenario, make_engine
from pagedviz.core.presets import list_presets, preset_dict
from pagedviz.core.vllm_engine import v2 as vllm_v2_side
from tests.support.vllm_v1 import vllm_new_blocks

# request-level arrays (batch rows) and token-level ones, compared over their real entries
REQ_ARRAYS = ("idx_mapping", "num_scheduled_tokens", "seq_lens")
ROWS_PLUS_ONE = ("query_start_loc", "cu_num_logits")
TOKEN_ARRAYS = ("positions", "input_ids", "slot_mapping")
# per-slot state after finish/add/update, compared on the slots that hold a request (with the
# live entries of their block tables and token ids, and the last sampled token once there is one)
SLOT_SCALARS = ("num_computed_tokens", "prefill_len", "total_len", "num_blocks")


def _slot_events(before: dict[str, int], got: Any) -> list[dict[str, Any]]:
    """The slot frees and adds vLLM's finish_requests / add_requests made this step, in order."""
    out = got.out
    events = [
        {"req_id": r, "slot": before[r], "event": "freed"}
        for r in sorted(set(out.finished_req_ids) | set(out.preempted_req_ids or ()))
        if r in before
    ]
    events += [{"req_id": r, "slot": got.slots[r], "event": "added"} for r in got.new_req_ids]
    return events


def compare_step(t: Any, got: Any, before: dict[str, int]) -> None:
    """Assert that pagedviz's step trace `t` says what vLLM's V2 did (`got`, a V2Step)."""
    where = f"step {t.step}"
    out, s, b = got.out, t.scheduler, t.batch
    assert list(out.num_scheduled_tokens.items()) == list(s["num_scheduled_tokens"].items()), (
        f"{where}: scheduled"
    )
    assert got.new_req_ids == s["new_req_ids"], f"{where}: new_req_ids (resumed travel as new)"
    assert not out.scheduled_cached_reqs.resumed_req_ids and s["resumed_req_ids"] == [], where
    assert sorted(out.preempted_req_ids or ()) == sorted(s["preempted_req_ids"]), f"{where}: preempted"
    assert sorted(out.finished_req_ids) == sorted(s["finished_req_ids"]), f"{where}: finished"
    assert vllm_new_blocks(out) == s["new_block_ids"], f"{where}: new_block_ids"
    assert got.slots == b["slots"], f"{where}: slots (RequestState.req_id_to_index)"
    assert got.free_slots == b["free_slots"], f"{where}: free slots in hand-out order"
    assert _slot_events(before, got) == b["slot_events"], f"{where}: slot events"
    assert got.req_ids == b["req_ids"], f"{where}: batch order"
    ours = t.arrays
    theirs = got.slot_state
    for rid, j in got.slots.items():
        for name in SLOT_SCALARS:
            assert int(theirs[name][j]) == int(ours[name][j]), f"{where}: {name}[{j}] ({rid})"
        nb, n = (
            int(theirs["num_blocks"][j]),
            min(int(theirs["total_len"][j]), t.arrays["all_token_ids"].shape[1]),
        )
        assert theirs["block_tables"][j, :nb].tolist() == ours["block_tables"][j, :nb].tolist(), (
            f"{where}: {rid}"
        )
        assert theirs["all_token_ids"][j, :n].tolist() == ours["all_token_ids"][j, :n].tolist(), (
            f"{where}: {rid}"
        )
        if theirs["total_len"][j] > theirs["prefill_len"][j]:  # sampled since it took the slot
            assert theirs["last_sampled_tokens"][j] == ours["last_sampled_tokens"][j], f"{where}: {rid}"
    if not got.req_ids:
        return
    R, T = len(got.req_ids), int(got.arrays["query_start_loc"][-1])
    for name in REQ_ARRAYS:
        assert got.arrays[name].tolist() == ours[name][:R].tolist(), f"{where}: {name}"
    for name in ROWS_PLUS_ONE:
        assert got.arrays[name].tolist() == ours[name][: R + 1].tolist(), f"{where}: {name}"
    for name in TOKEN_ARRAYS:
        assert got.arrays[name].tolist() == ours[name][:T].tolist(), f"{where}: {name}"
    assert got.arrays["logits_indices"].tolist() == ours["logits_indices"].tolist(), (
        f"{where}: logits_indices"
    )
    table = ours["input_block_tables"]
    for i, row in enumerate(got.block_rows):
        assert row == table[i, : len(row)].tolist(), f"{where}: input_block_tables row {i} ({got.req_ids[i]})"
    assert got.sampled == t.sampled_token_ids, f"{where}: requests that sample"
    if "num_draft_tokens" in ours:
        _compare_spec(t, got, where)
    assert got.scalars == {k: t.scalars[k] for k in got.scalars}, f"{where}: scalars"
    _compare_padding(t, got, where)


SPEC_ARRAYS = ("expanded_idx_mapping", "expanded_local_pos", "draft_sampled", "num_sampled", "num_rejected")


def _compare_spec(t: Any, got: Any, where: str) -> None:
    """V2's drafts: the counts the scheduler sent, the expanded mappings, verification, the slots'
    drafts this step read and what the speculator proposed after it."""
    ours = t.arrays
    sent = {r: list(d) for r, d in got.out.scheduled_spec_decode_tokens.items()}
    assert sent == t.scheduler["scheduled_spec_decode_tokens"], f"{where}: scheduled_spec_decode_tokens"
    for name in SPEC_ARRAYS:
        assert got.arrays[name].tolist() == ours[name].tolist(), f"{where}: {name}"
    drafts = np.asarray(ours["draft_tokens"])
    for rid, j in got.slots.items():
        assert got.slot_state["draft_tokens"][j].tolist() == drafts[j].tolist(), (
            f"{where}: draft_tokens ({rid})"
        )
    proposed = t.forward["proposed_draft_token_ids"]
    for i, rid in enumerate(got.req_ids):
        if rid in proposed:
            assert got.arrays["proposed"][i].tolist() == proposed[rid], f"{where}: proposed drafts ({rid})"


def targets(t: Any) -> dict[str, list[int]] | None:
    """pagedviz's target token at each logits row, by request (speculative decoding only)."""
    if "target_token_ids" not in t.arrays:
        return None
    cu, tok = t.arrays["cu_num_logits"].tolist(), t.arrays["target_token_ids"].tolist()
    return {rid: tok[cu[i] : cu[i + 1]] for i, rid in enumerate(t.batch["req_ids"])}


def _compare_padding(t: Any, got: Any, where: str) -> None:
    """vLLM's CUDA-graph dispatch (mode, padded sizes), and the padded buffers as vLLM pads them."""
    p, entries, sc = got.padded, t.array_entries, t.scalars
    R_pad, T_pad = p["num_reqs_padded"], p["num_tokens_after_padding"]
    theirs = (p["cudagraph_mode"], T_pad, R_pad)
    assert theirs == (sc["cudagraph_mode"], sc["num_tokens_after_padding"], sc["num_reqs_padded"]), where
    for name, n in (("query_start_loc", R_pad + 1), ("seq_lens", R_pad)):
        e = entries[name]
        ours = e.buffer if e.buffer is not None else e.value
        assert p[name].tolist() == ours[:n].tolist(), f"{where}: padded {name}"
    assert p["slot_mapping"].tolist() == t.arrays["slot_mapping"][:T_pad].tolist(), (
        f"{where}: padded slot_mapping"
    )
    R = len(got.req_ids)
    ours_rows = t.arrays["input_block_tables"][R:R_pad]
    assert p["padded_block_rows"][:, : ours_rows.shape[1]].tolist() == ours_rows.tolist(), (
        f"{where}: padded rows"
    )


def run_both(scenario: Scenario) -> int:
    """Step both sides to the end, comparing every step; the number of steps."""
    assert scenario.config.model_runner == "v2", "the V2 group compares pagedviz's V2 model"
    side = vllm_v2_side.VllmV2Side(scenario)
    steps = 0
    for t in make_engine(scenario).run():
        before = dict(side.runner.req_states.req_id_to_index)
        got = side.step(t.sampled_token_ids, targets(t))
        compare_step(t, got, before)
        steps += 1
    assert side.scheduler.get_num_unfinished_requests() == 0, "vLLM has unfinished requests"
    return steps


def run_both_async(scenario: Scenario) -> int:
    """Both sides with async scheduling: vLLM's AsyncScheduler under the engine core's batch queue
    (pagedviz.core.vllm_engine.loop). Per step, the loop's decisions (scheduled, whose output
    update_from_output took, what stayed queued), then for a scheduled batch all run_both compares.
    Both runs end together."""
    assert scenario.config.model_runner == "v2" and scenario.config.async_scheduling
    side = vllm_v2_side.VllmV2Side(scenario)
    engine = make_engine(scenario)
    steps = 0
    for t in engine.run():
        before = dict(side.runner.req_states.req_id_to_index)
        loop, got = side.async_step(t.sampled_token_ids, targets(t))
        where, ec = f"step {t.step}", t.engine_core
        assert ec is not None, where
        assert ec["scheduled"] == (loop.scheduler_output is not None), f"{where}: scheduled"
        assert ec["consumed_step"] == loop.consumed_step, f"{where}: consumed_step"
        assert ec["batch_queue"] == loop.batch_queue, f"{where}: batch_queue"
        if got is not None:
            compare_step(t, got, before)
        steps += 1
    assert not engine.truncated and not side.has_work, "the runs did not end together"
    assert side.scheduler.get_num_unfinished_requests() == 0, "vLLM has unfinished requests"
    return steps


def v2_presets() -> list[str]:
    out = []
    for p in list_presets():
        if p["flavor"] != "vllm":
            continue
        s = Scenario.from_dict(preset_dict(p["id"]))
        if s.config.model_runner == "v2":
            out.append(p["id"])
    return out


def as_compared(d: dict[str, Any]) -> Scenario:
    return Scenario.from_dict({**d, "config": {**d["config"], "model": None, "device": "cpu"}})
