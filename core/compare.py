"""Two runs side by side, aligned by step number: which arrays differ and where, how the KV
cache differs (ref counts, owners, the free queue), the metric deltas (b minus a) and the
narration sentences only one side says. The two runs may be different flavours of the same
requests or one scenario with a setting changed; arrays only one flavour has are listed as such.

Two runs may order their batches differently (Model Runner V2 sorts its batch every step, V1
keeps its persistent rows) and name their request-level state differently (V2's state slots
against V1's rows). Each step's `batch` entry therefore says each side's batch order, where each
request sits on each side (its batch row, and its state slot where the runner has slots), and,
request by request, whether the per-token and per-request arrays both runs have hold the same
values once aligned by request: the same slot_mapping in another order is not a difference of
where the KV goes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pagedviz.core.kernel_reads import read_mask, stale_entries
from pagedviz.core.metrics import STEP_FIELDS, run_metrics
from pagedviz.core.narrate import narrate
from pagedviz.core.scenario_parts import EngineConfig
from pagedviz.core.trace import StepTrace

MAX_INDICES = 256  # differing entries listed per array; `num_diff` counts them all
# arrays compared request by request (token-level ones sliced by query_start_loc)
ALIGNED_TOKEN = ("positions", "input_ids", "slot_mapping")
ALIGNED_REQUEST = ("num_scheduled_tokens", "seq_lens")


def _diff_array(
    x: np.ndarray, y: np.ndarray, read_x: np.ndarray | None = None, read_y: np.ndarray | None = None
) -> dict[str, Any] | None:
    """None when equal; else where they differ (flat index for 1-D, [row, col] for tables). With
    `read_x` / `read_y` (core/kernel_reads.py), an entry neither side's kernels read is stale on
    both and not a difference."""
    if x.shape == y.shape:
        if np.array_equal(x, y):
            return None
        status, region = "differ", tuple(slice(0, n) for n in x.shape)
    else:
        if x.ndim != y.ndim:
            return {"status": "shape", "shape_a": list(x.shape), "shape_b": list(y.shape), "num_diff": None}
        status = "shape"
        region = tuple(slice(0, min(p, q)) for p, q in zip(x.shape, y.shape))
    differs = x[region] != y[region]
    if read_x is not None or read_y is not None:
        read = np.zeros(differs.shape, dtype=bool)
        for m in (read_x, read_y):
            read |= np.ones(differs.shape, dtype=bool) if m is None else m[region]
        differs &= read
        if status == "differ" and not differs.any():
            return None
    where = np.argwhere(differs)
    out: dict[str, Any] = {"status": status, "num_diff": int(len(where))}
    idx = where[:MAX_INDICES]
    out["indices"] = idx[:, 0].tolist() if x.ndim == 1 else idx.tolist()
    if status == "shape":
        out["shape_a"], out["shape_b"] = list(x.shape), list(y.shape)
    return out


def _diff_kv(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    ra = np.asarray(a.get("ref_cnt", []), dtype=np.int64)
    rb = np.asarray(b.get("ref_cnt", []), dtype=np.int64)
    n = min(len(ra), len(rb))
    oa, ob = a.get("owners", {}), b.get("owners", {})
    blocks = sorted({int(k) for k in (*oa, *ob)})
    return {
        "ref_cnt": np.flatnonzero(ra[:n] != rb[:n]).tolist(),
        "owners": [blk for blk in blocks if oa.get(str(blk), []) != ob.get(str(blk), [])],
        "free_block_queue_same": list(a.get("free_block_queue", [])) == list(b.get("free_block_queue", [])),
        "num_blocks": [int(a.get("num_blocks", 0)), int(b.get("num_blocks", 0))],
    }


def _per_request(t: StepTrace) -> dict[str, dict[str, np.ndarray]]:
    """Each request's own entries of the aligned arrays: {name: {req_id: values}}."""
    req_ids = list(t.batch.get("req_ids") or [])
    xs = t.arrays
    out: dict[str, dict[str, np.ndarray]] = {}
    qsl = xs.get("query_start_loc")
    for name in ALIGNED_TOKEN:
        x = xs.get(name)
        if x is None or qsl is None or x.ndim != 1 or len(qsl) < len(req_ids) + 1:
            continue
        out[name] = {r: x[int(qsl[i]) : int(qsl[i + 1])] for i, r in enumerate(req_ids)}
    for name in ALIGNED_REQUEST:
        x = xs.get(name)
        if x is None or x.ndim != 1 or len(x) < len(req_ids):
            continue
        out[name] = {r: x[i : i + 1] for i, r in enumerate(req_ids)}
    return out


def _diff_batch(ta: StepTrace, tb: StepTrace) -> dict[str, Any]:
    """The two batches side by side: order, each request's row (and slot), and, per aligned
    array, the requests whose own entries differ (None: only one side can say)."""
    ra, rb = list(ta.batch.get("req_ids") or []), list(tb.batch.get("req_ids") or [])
    sa, sb = ta.batch.get("slots") or {}, tb.batch.get("slots") or {}

    def place(order: list[str], slots: dict[str, int]) -> dict[str, dict[str, int | None]]:
        return {r: {"row": i, "slot": slots.get(r)} for i, r in enumerate(order)}

    pa, pb = _per_request(ta), _per_request(tb)
    both = set(ra) & set(rb)
    per_request: dict[str, list[str] | None] = {}
    for name in (*ALIGNED_TOKEN, *ALIGNED_REQUEST):
        if name not in pa or name not in pb:
            continue
        per_request[name] = [r for r in ra if r in both and not np.array_equal(pa[name][r], pb[name][r])]
    return {
        "req_ids": [ra, rb],
        "same_order": ra == rb,
        "same_requests": sorted(ra) == sorted(rb),
        "place": [place(ra, sa), place(rb, sb)],
        "has_slots": [bool(sa), bool(sb)],
        "per_request": per_request,
    }


def compare_runs(
    a: Sequence[StepTrace],
    b: Sequence[StepTrace],
    config_a: EngineConfig | None = None,
    config_b: EngineConfig | None = None,
) -> dict[str, Any]:
    """Step k of a against step k of b, for every step either run has."""
    ma, mb = run_metrics(a), run_metrics(b)
    steps = []
    for k in range(max(len(a), len(b))):
        ta, tb = (a[k] if k < len(a) else None), (b[k] if k < len(b) else None)
        entry: dict[str, Any] = {"step": k + 1, "in_a": ta is not None, "in_b": tb is not None}
        if ta is not None and tb is not None:
            xa, xb = ta.arrays, tb.arrays
            differ = {}
            for name in sorted(set(xa) & set(xb)):
                d = _diff_array(xa[name], xb[name], read_mask(ta, name), read_mask(tb, name))
                if d is not None:
                    differ[name] = d
            entry["arrays"] = differ
            entry["same_arrays"] = sorted(set(xa) & set(xb) - set(differ))
            entry["only_a"], entry["only_b"] = sorted(set(xa) - set(xb)), sorted(set(xb) - set(xa))
            entry["scalars"] = {
                s: [ta.scalars.get(s), tb.scalars.get(s)]
                for s in sorted(set(ta.scalars) | set(tb.scalars))
                if ta.scalars.get(s) != tb.scalars.get(s)
            }
            # the kernel's block-table entries the compare ignores: stale, never read
            entry["stale"] = [stale_entries(ta), stale_entries(tb)]
            entry["kv_cache"] = _diff_kv(ta.kv_cache, tb.kv_cache)
            entry["batch"] = _diff_batch(ta, tb)
            sa, sb = ma["steps"][k], mb["steps"][k]
            entry["metrics_delta"] = {f: sb[f] - sa[f] for f in STEP_FIELDS}
            # the KV each side holds after the step (full attention vs a sliding window: the
            # blocks, and the blocks counted once per layer they hold, core/metrics.py)
            entry["memory"] = {k: [sa[k], sb[k]] for k in ("blocks_used", "layer_blocks_used")}
            na = {it["key"]: it["text"]["en"] for it in narrate(ta, a[k - 1] if k else None, config_a)}
            nb = {it["key"]: it["text"]["en"] for it in narrate(tb, b[k - 1] if k else None, config_b)}
            entry["narration"] = {
                "only_a": [key for key in na if key not in nb],
                "only_b": [key for key in nb if key not in na],
                "changed": [key for key in na if key in nb and na[key] != nb[key]],
            }
        steps.append(entry)
    totals_delta = {
        k: round(mb["totals"][k] - ma["totals"][k], 3)
        for k in ma["totals"]
        if isinstance(ma["totals"][k], int | float)
    }
    return {
        "num_steps": [len(a), len(b)],
        "totals": [ma["totals"], mb["totals"]],
        "totals_delta": totals_delta,
        "steps": steps,
    }
