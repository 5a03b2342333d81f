"""The most expensive scenarios the default limits allow, one per cost the limits bound (for the
memory test and benchmarks/hostile.py). Each is found by searching the largest size that the
cost model (core.limits.cost_problems) still lets through, so they follow the limits."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pagedviz.core import Limits, Scenario, ScenarioError


def largest(make: Callable[[int], dict[str, Any]], lo: int, hi: int, limits: Limits) -> dict[str, Any]:
    """make(n) for the largest n in [lo, hi] whose scenario the limits allow."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        try:
            Scenario.from_dict(make(mid), limits)
            lo = mid
        except ScenarioError:
            hi = mid - 1
    Scenario.from_dict(make(lo), limits)  # raises if even the smallest is refused
    return make(lo)


def one_long_prompt(model: dict[str, Any] | None, flavor: str = "vllm") -> Callable[[int], dict[str, Any]]:
    def make(n: int) -> dict[str, Any]:
        return {
            "name": f"long-{n}",
            "flavor": flavor,
            "config": {
                "block_size": 16,
                "max_model_len": n + 8,
                "max_num_reqs": 1,
                "max_num_batched_tokens": min(n + 8, 16384),
                "num_kv_blocks": (n + 8) // 16 + 2,
                "model": model,
            },
            "requests": [{"id": "0", "prompt_len": n, "max_tokens": 8}],
            "max_steps": 16,
        }

    return make


def wide_batch(n: int) -> dict[str, Any]:
    """256 requests whose rows fill token_ids_cpu: the trace of each step is as large as allowed."""
    return {
        "name": f"wide-{n}",
        "config": {
            "block_size": 16,
            "max_model_len": n,
            "max_num_reqs": 256,
            "max_num_batched_tokens": 16384,
            "num_kv_blocks": 256 * (n // 16 + 1) + 1,
            "model": None,
        },
        "requests": [{"id": str(i), "prompt_len": 8, "max_tokens": min(n - 8, 700)} for i in range(256)],
        "max_steps": 4096,
    }


def big_pool(n: int) -> dict[str, Any]:
    """A pool as large as allowed: each step snapshots its free queue and reference counts."""
    return {
        "name": f"pool-{n}",
        "config": {"block_size": 16, "max_model_len": 4096, "num_kv_blocks": n, "model": None},
        "requests": [{"id": str(i), "prompt_len": 16, "max_tokens": 4000} for i in range(8)],
        "max_steps": 4096,
    }


def worst_scenarios(limits: Limits | None = None) -> dict[str, dict[str, Any]]:
    limits = limits or Limits()
    big_model = {"num_layers": 8, "num_heads": 8, "num_kv_heads": 8, "head_size": 32}
    return {
        "attention (default model)": largest(one_long_prompt({}), 64, 1 << 16, limits),
        "attention (8 layers x 8 heads)": largest(one_long_prompt(big_model), 64, 1 << 16, limits),
        "ascend mask (no model)": largest(one_long_prompt(None, "ascend"), 64, 1 << 16, limits),
        "token_ids_cpu (256 rows)": largest(wide_batch, 16, 1 << 16, limits),
        "KV pool (no model)": largest(big_pool, 1024, limits.max_num_kv_blocks, limits),
    }


# what every refusal of a size (a 413) says governs its bound: the variable that raises it, or none
GOVERNED = re.compile(r"PAGEDVIZ_[A-Z_]+ raises it|a fixed bound of the engine")
# the words of a message that states a bound (a 413 may also list problems that are not sizes)
STATES_A_BOUND = re.compile(r"<=|\bat most\b|\blimit\b|\bover\b|too large|\balone\b")


def assert_refusal_names_its_governor(response: Any) -> None:
    """A 413 has problems each with a field, and each one that states a bound names the
    PAGEDVIZ_* variable that raises it or says it is a fixed bound of the engine."""
    assert response.status_code == 413, response.text
    detail = response.json()["detail"]
    bounds = [d for d in detail if STATES_A_BOUND.search(d["message"])]
    assert bounds, detail
    for d in detail:
        assert d["field"], detail
    for d in bounds:
        assert GOVERNED.search(d["message"]), d
