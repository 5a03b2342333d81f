"""What one scenario may cost: the server's limits (`Limits`, each a PAGEDVIZ_* setting) and the
cost model that checks a validated scenario against them before any work starts."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pagedviz.core.scenario_parts import EngineConfig, RequestSpec


class CostedScenario(Protocol):
    """What the cost model reads of a scenario (a core/scenario.py Scenario): its flavour, its
    engine config and its requests."""

    @property
    def flavor(self) -> str: ...

    @property
    def config(self) -> EngineConfig: ...

    @property
    def requests(self) -> tuple[RequestSpec, ...]: ...


class SettingError(ValueError):
    """A PAGEDVIZ_* setting in the environment is not a positive integer; names the variable."""


def env_int(name: str, default: int) -> int:
    """The positive integer in environment variable `name`, or `default` when it is unset."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    if not raw.strip().isdigit() or int(raw) < 1:
        raise SettingError(f"{name} must be a positive integer (got {raw!r:.40})")
    return int(raw)


@dataclass(frozen=True)
class Limits:
    """What one scenario may cost, checked before any work starts (`cost_problems`). Each is raised
    or lowered with PAGEDVIZ_<NAME> in the environment (README: the limits table)."""

    max_requests: int = 256
    max_cells: int = 4_000_000  # cells of token_ids_cpu (max_num_reqs * max_model_len)
    max_total_tokens: int = 200_000  # prompt + output tokens over all requests
    max_steps: int = 4096
    max_num_kv_blocks: int = 1_000_000
    max_block_size: int = 4096
    max_model_cells: int = 1 << 24  # parameters of the tiny model
    max_kv_cache_elems: int = 1 << 26  # elements of the KV cache tensors, all layers together
    max_tokens_per_step: int = 16384  # max_num_batched_tokens and every CUDA-graph capture size
    max_context_tokens: int = 65536  # tokens one step's forward attends over (with a model)
    max_attention_scores: int = 1 << 24  # num_heads * longest sequence^2 (dense check, with a model)
    max_mask_cells: int = 1 << 22  # cells of the ascend attention mask of one step
    max_vocab_size: int = 65536
    max_step_mflop: int = 2_000  # estimated forward work of one step, millions of flops
    max_step_trace_kb: int = 32 << 10  # estimated bytes one step's trace holds

    @classmethod
    def from_env(cls) -> Limits:
        """Defaults overridden by PAGEDVIZ_<NAME>; a bad value raises SettingError naming it."""
        d = cls()
        return cls(**{n: env_int(f"PAGEDVIZ_{n.upper()}", getattr(d, n)) for n in cls.__dataclass_fields__})


# what a refusal (a 413) says governs its bound: the setting that raises it, or that none does
FIXED_BOUND = "a fixed bound of the engine"


def raised_by(limit: str) -> str:
    """The clause naming the PAGEDVIZ_* variable that raises the `Limits` field `limit`."""
    return f"PAGEDVIZ_{limit.upper()} raises it"


# the dense reference recomputes whole sequences; past this many tokens of context in a step it is skipped
DENSE_CHECK_MAX_TOKENS = 16384


def step_costs(s: CostedScenario) -> dict[str, int]:
    """Upper bounds of what one step of `s` can cost, from its config and requests alone.

    L is the longest sequence (prompt + max_tokens), T the padded tokens of a step, rows the
    requests a step can hold. Paged attention scores one request's queries against its context
    (<= T * L per head); the dense check recomputes whole sequences (<= L * L per head, over at
    most DENSE_CHECK_MAX_TOKENS tokens of context in a step); the ascend mask is causal over L.
    """
    c, m = s.config, s.config.model
    lens = [len(r.prompt_token_ids) + r.max_tokens for r in s.requests]
    # a request with n > 1 runs as n children (core/parallel_sampling.py)
    L, total = max(lens), sum(k * r.n for k, r in zip(lens, s.requests))
    rows = min(c.max_num_reqs, sum(r.n for r in s.requests))
    T = max(c.max_num_batched_tokens, max(c.cudagraph_capture_sizes or (0,)))
    context = min(rows * L, total)
    mask = L * max(L, min(T, total)) if s.flavor == "ascend" else 0
    blocks_per_req = math.ceil(c.max_model_len / c.block_size)
    trace = 8 * 16 * T + rows * 4 * (c.max_model_len + blocks_per_req) + mask + 3 * 40 * c.num_kv_blocks
    costs = {"tokens": T, "context": context, "mask": mask, "trace": trace, "scores": 0, "flop": 0}
    if m is not None:
        h, d = m.num_heads, m.head_size
        per_layer = (m.num_params() - 2 * m.vocab_size * m.hidden_size) // m.num_layers
        fwd = min(T, total) + min(context, DENSE_CHECK_MAX_TOKENS)
        costs["scores"] = h * L * L
        costs["flop"] = (
            m.num_layers * (2 * per_layer + 4 * h * d * L) * fwd + 2 * m.hidden_size * m.vocab_size * rows
        )
        costs["kv"] = m.num_layers * 2 * c.num_kv_blocks * c.block_size * m.num_kv_heads * d
    return costs


def cost_problems(s: CostedScenario, limits: Limits) -> list[tuple[str, str]]:
    """Each size over its limit, as (field, message naming the limit and the setting that raises it)."""
    k = step_costs(s)
    m = s.config.model
    checks = [
        (
            "config.cudagraph_capture_sizes",
            max(s.config.cudagraph_capture_sizes or (0,)),
            "max_tokens_per_step",
            "the largest capture size",
        ),
        ("config", k["mask"], "max_mask_cells", "cells of the ascend attention mask of one step"),
        ("config", k["trace"] >> 10, "max_step_trace_kb", "KiB of trace one step may hold"),
    ]
    if m is not None:
        checks += [
            ("config.model.vocab_size", m.vocab_size, "max_vocab_size", "vocab_size"),
            (
                "config.model",
                k["context"],
                "max_context_tokens",
                "tokens of context one step may attend over",
            ),
            (
                "config.model",
                k["scores"],
                "max_attention_scores",
                "attention scores of the longest sequence (num_heads x length^2)",
            ),
            (
                "config.model",
                k["flop"] // 1_000_000,
                "max_step_mflop",
                "million flops one step's forward may take",
            ),
            ("config.num_kv_blocks", k["kv"], "max_kv_cache_elems", "elements of the KV cache (all layers)"),
        ]
    out = []
    for loc, value, name, what in checks:
        limit = getattr(limits, name)
        if value > limit:
            hint = ' or set "model": null' if m is not None and loc.startswith("config.model") else ""
            out.append(
                (loc, f"{what}: {value} is over the limit {limit} (PAGEDVIZ_{name.upper()} raises it){hint}")
            )
    return out
