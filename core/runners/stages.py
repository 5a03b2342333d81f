"""What every runner shares: the `@stage` marker that makes a method one stage of
`prepare_inputs` (its reads, writes, formula and why), the level of each traced array, and the
engine's own source of a stage for the page."""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StageSpec:
    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    formula: str
    why: str = ""
    # the stage runs only for runners where this holds (e.g. speculative decoding is on)
    when: Callable[[Any], bool] | None = None
    # arrays the stage leaves as views of persistent buffers (the next step overwrites them)
    views: tuple[str, ...] = ()


def stage(
    name: str,
    reads: str,
    writes: str,
    formula: str,
    why: str = "",
    when: Callable[[Any], bool] | None = None,
    views: str = "",
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Mark a runner method as a stage of prepare_inputs (reads/writes/views are space-separated;
    `views`: what it leaves as views of persistent buffers, which a trace must copy)."""

    def mark(fn: Callable[..., None]) -> Callable[..., None]:
        spec = StageSpec(
            name, tuple(reads.split()), tuple(writes.split()), formula, why, when, tuple(views.split())
        )
        fn.stage_spec = spec  # type: ignore[attr-defined]
        return fn

    return mark


LEVELS: dict[str, str] = {
    "num_scheduled_tokens": "request",
    "num_computed_tokens_cpu": "request",
    "num_tokens": "request",
    "cu_num_tokens": "request",
    "query_start_loc": "request",
    "seq_lens": "request",
    "logits_indices": "request",
    "discard_request_mask": "request",
    "cu_seqlens_q": "request",
    "cu_seqlens_k": "request",
    "context_lens": "request",
    "req_indices": "token",
    "arange": "token",
    "positions": "token",
    "token_indices": "token",
    "input_ids": "token",
    "block_table_indices": "token",
    "block_numbers": "token",
    "block_offsets": "token",
    "slot_mapping": "token",
    "token_ids_cpu": "system",
    "block_table": "system",
    "attn_mask": "system",
    "block_tables": "system",
    # what-if (counterfactual) token_indices for the max_model_len question of document 000
    "token_indices_whatif": "token",
    "input_ids_whatif": "token",
    "whatif_wrong": "token",
    # M-RoPE: [3, T] as vLLM keeps it (one column per token), so a table rather than a token row
    "mrope_positions": "system",
    # async scheduling: the previous step's rows and the scatter into input_ids
    "prev_sampled_token_ids": "prev_request",
    "prev_positions": "request",
    "sample_flattened_indices": "common",
    "prev_common_req_indices": "common",
    # speculative decoding: request level, then one entry per logits row ("logits")
    "num_draft_tokens": "request",
    "cu_num_draft_tokens": "request",
    "num_sampled_tokens": "request",
    "cu_num_sampled_tokens": "request",
    "target_logits_indices": "logits",
    "bonus_logits_indices": "request",
    "draft_token_ids": "logits",
}


def stage_source(runner_cls: type[Any], name: str) -> str:
    """The engine's own source of one stage, read from the running code."""
    if name == "update_states":
        return textwrap.dedent(inspect.getsource(runner_cls.update_states))
    for _, fn in inspect.getmembers(runner_cls, inspect.isfunction):
        spec = getattr(fn, "stage_spec", None)
        if spec is not None and spec.name == name:
            return textwrap.dedent(inspect.getsource(fn))
    raise KeyError(name)
