"""A step's line in a run's overview (StepSummary): its kind, batch, tokens, admissions and the
KV blocks in use. Shared by the overview of a computed run and the summaries an import stores."""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedviz.core.trace import StepTrace


def blocks_in_use(t: StepTrace) -> int:
    """KV blocks some request holds after the step: the pool's ref counts above zero."""
    ref = t.kv_cache.get("ref_cnt") if t.kv_cache else None
    return int(np.count_nonzero(np.asarray(ref) > 0)) if ref is not None else 0


def pool_blocks(t: StepTrace) -> int:
    """The pool's usable blocks, as vLLM counts them (the null block left out): the trace's
    `kv_cache.num_usable_blocks` (core/kv_cache.py `usable_blocks`)."""
    return int(t.kv_cache.get("num_usable_blocks", 0)) if t.kv_cache else 0


def cached_at_admission(t: StepTrace) -> dict[str, int]:
    """Each request admitted this step (new or resumed) with its tokens computed before the step,
    which at admission are the prefix-cache hit."""
    computed = t.arrays.get("num_computed_tokens_cpu")
    if t.idle or computed is None:
        return {}
    sched = t.scheduler
    admitted = {str(r) for r in [*sched.get("new_req_ids", []), *sched.get("resumed_req_ids", [])]}
    return {str(rid): int(computed[r]) for r, rid in enumerate(t.batch["req_ids"]) if str(rid) in admitted}


def step_kind(t: StepTrace) -> str:
    if t.idle:
        return "idle"
    a = t.arrays
    if "num_tokens" in a:
        decode = (a["num_scheduled_tokens"] == 1) & (a["num_computed_tokens_cpu"] == a["num_tokens"] - 1)
    else:  # nanovllm
        decode = np.full(len(t.batch["req_ids"]), not t.scalars.get("is_prefill"))
    return "decode" if decode.all() else "prefill" if not decode.any() else "mixed"


def step_summary(t: StepTrace) -> dict[str, Any]:
    """The step's StepSummary fields."""
    return {
        "step": t.step,
        "idle": t.idle,
        "kind": step_kind(t),
        "num_reqs": len(t.batch["req_ids"]),
        "num_tokens": int(t.scheduler.get("total_num_scheduled_tokens", 0)),
        "new_req_ids": t.scheduler.get("new_req_ids", []),
        "resumed_req_ids": t.scheduler.get("resumed_req_ids", []),
        "finished_req_ids": t.scheduler.get("finished_req_ids", []),
        "preempted_req_ids": t.scheduler.get("preempted_req_ids", []),
        "kv_blocks_in_use": blocks_in_use(t),
        "kv_pool_blocks": pool_blocks(t),
        "num_cached_tokens": cached_at_admission(t),
    }
