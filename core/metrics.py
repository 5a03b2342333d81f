"""Run metrics for what-if and compare: per step and totals, from the traces alone.

Per step: blocks used (blocks with a reference), blocks free (the free queue's length: vLLM's
`get_num_free_blocks()`, the null block never in it), slots allocated (blocks used times
block size), tokens held in those blocks, internal fragmentation (slots allocated minus tokens
held: the empty tail of each request's last block), blocks shared through the prefix cache,
preemptions, tokens scheduled, padded tokens (CUDA-graph padding) and requests in the batch.

KV held in one-layer blocks (`layer_blocks_used`): a block serves every layer of the KV cache group
whose table holds it, so blocks of runs with different KV cache groups are compared by the layers
each one holds: with one group, blocks used times the model's layers; with several (a sliding window
beside full attention), each block times its group's layers (`kv_cache.block_group`,
`kv_cache.kv_cache_groups`). It is what "full attention vs sliding window, same requests" compares:
vLLM sizes a block of a hybrid model to one group's layers and shares the pool among the groups.

Tokens held are counted per block, so a block shared by several requests counts once: each
request holding `L` tokens of KV fills its j-th block with `min(block_size, L - j * block_size)`
tokens. `L` is the request's `seq_lens` in a step that schedules it and carries over from its
last scheduled step otherwise (a running request the budget skipped keeps its blocks).

Totals: `num_blocks` is the physical pool, `num_usable_blocks` the pool as vLLM counts it (less the
null block); blocks used plus blocks free is always `num_usable_blocks`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pagedviz.core.narrate_facts import Facts
from pagedviz.core.trace import StepTrace

STEP_FIELDS = (
    "blocks_used",
    "layer_blocks_used",
    "blocks_free",
    "slots_allocated",
    "tokens_held",
    "internal_fragmentation",
    "shared_blocks",
    "preemptions",
    "tokens_scheduled",
    "padded_tokens",
    "num_reqs",
)


def layer_blocks(kv: dict[str, Any]) -> int:
    """Blocks in use, each counted once per layer it holds K and V for: the layers of the group
    that holds it (several KV cache groups) or every layer (one group)."""
    owners = kv.get("owners", {})
    groups = kv.get("kv_cache_groups") or []
    if not groups:
        return len(owners) * int(kv.get("num_layers", 1) or 1)
    per_group = [len(g.get("layers") or []) or 1 for g in groups]
    where = kv.get("block_group") or {}
    return sum(per_group[int(where[b])] if b in where else 1 for b in owners)


def step_metrics(steps: Sequence[StepTrace]) -> list[dict[str, Any]]:
    """One dict per step, in step order (STEP_FIELDS plus `step` and `idle`)."""
    held: dict[str, int] = {}  # tokens of KV each running request holds
    out = []
    for t in steps:
        f = Facts(t)
        for rid in t.scheduler.get("preempted_req_ids", []):
            held.pop(str(rid), None)
        for r, rid in enumerate(f.rows):
            if rid in f.nst and r < len(f.seq_lens):
                held[rid] = int(f.seq_lens[r])
        kv = t.kv_cache
        bs = int(kv.get("block_size", 1))
        owners: dict[str, list[str]] = kv.get("owners", {})
        per_req: dict[str, list[int]] = {}
        for blk, reqs in owners.items():
            for rid in reqs:
                per_req.setdefault(rid, []).append(int(blk))
        fill: dict[int, int] = {}
        for rid, blocks in per_req.items():
            length = held.get(rid, len(blocks) * bs)
            for j, b in enumerate(blocks):
                fill[b] = max(fill.get(b, 0), min(bs, max(length - j * bs, 0)))
        used = len(owners)
        tokens_held = sum(fill.values())
        T = f.T
        out.append(
            {
                "step": t.step,
                "idle": t.idle,
                "blocks_used": used,
                "layer_blocks_used": layer_blocks(kv),
                "blocks_free": len(kv.get("free_block_queue", [])),
                "slots_allocated": used * bs,
                "tokens_held": tokens_held,
                "internal_fragmentation": used * bs - tokens_held,
                "shared_blocks": sum(1 for reqs in owners.values() if len(reqs) > 1),
                "preemptions": len(t.scheduler.get("preempted_req_ids", [])),
                "tokens_scheduled": T,
                "padded_tokens": max(int(t.scalars.get("num_input_tokens", T)) - T, 0),
                "num_reqs": len(f.rows),
            }
        )
        for rid in t.scheduler.get("finished_req_ids", []):
            held.pop(str(rid), None)
    return out


def run_metrics(steps: Sequence[StepTrace]) -> dict[str, Any]:
    """{"steps": [...per step...], "totals": {...}} for one run."""
    per = step_metrics(steps)
    busy = [m for m in per if not m["idle"]]

    def peak(k: str) -> int:
        return max((m[k] for m in per), default=0)

    def mean(k: str) -> float:
        return round(sum(m[k] for m in busy) / len(busy), 3) if busy else 0.0

    kv = steps[0].kv_cache if steps else {}
    totals = {
        "steps": len(per),
        "idle_steps": len(per) - len(busy),
        "tokens_scheduled": sum(m["tokens_scheduled"] for m in per),
        "padded_tokens": sum(m["padded_tokens"] for m in per),
        "preemptions": sum(m["preemptions"] for m in per),
        "peak_blocks_used": peak("blocks_used"),
        "peak_layer_blocks_used": peak("layer_blocks_used"),
        "mean_blocks_used": mean("blocks_used"),
        "peak_internal_fragmentation": peak("internal_fragmentation"),
        "mean_internal_fragmentation": mean("internal_fragmentation"),
        "peak_shared_blocks": peak("shared_blocks"),
        "num_blocks": int(kv.get("num_blocks", 0)),
        "num_usable_blocks": int(kv.get("num_usable_blocks", 0)),
        "block_size": int(kv.get("block_size", 0)),
    }
    return {"steps": per, "totals": totals}
