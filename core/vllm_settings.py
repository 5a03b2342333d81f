"""The one correspondence between a scenario's `EngineConfig` and vLLM 0.33's scheduler and cache
settings, both ways. No vLLM needed here.

- To vLLM: `scheduler_args` / `cache_args` are the keyword arguments of vLLM's `SchedulerConfig`
  and `CacheConfig` for a scenario, plus `num_gpu_blocks` (set on the CacheConfig after it is
  built, as vLLM's engine sets it once the KV cache is sized). core/vllm_engine/config.py builds
  vLLM's `VllmConfig` from them (`scheduler_config`), for the live engine's V1 side and V2's
  worker alike.
- From a recording: `engine_fields(header)` reads the same settings back from a recording's header
  (record/ writes them from the server's `VllmConfig`), for the import (core/replay.py).

Each row of `SETTINGS` names one setting three times: the EngineConfig field, vLLM's argument (of
SchedulerConfig or CacheConfig) and the recording header's key, with the value a header without
that key (an older recording) stands for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pagedviz.core.scenario_parts import EngineConfig


@dataclass(frozen=True)
class Setting:
    """One scheduler or cache setting: its names in the scenario, in vLLM and in a recording."""

    field: str  # EngineConfig's field
    where: str  # "scheduler" (SchedulerConfig) or "cache" (CacheConfig, num_gpu_blocks set after)
    vllm: str  # vLLM's argument or attribute
    header: str  # the recording header's key
    missing: Any = None  # what a header without the key stands for (None: the key is required)


SETTINGS: tuple[Setting, ...] = (
    Setting("max_model_len", "scheduler", "max_model_len", "max_model_len"),
    Setting("max_num_batched_tokens", "scheduler", "max_num_batched_tokens", "max_num_batched_tokens"),
    Setting("max_num_reqs", "scheduler", "max_num_seqs", "max_num_seqs"),
    Setting("enable_chunked_prefill", "scheduler", "enable_chunked_prefill", "enable_chunked_prefill"),
    Setting(
        "long_prefill_token_threshold",
        "scheduler",
        "long_prefill_token_threshold",
        "long_prefill_token_threshold",
    ),
    # written by recorders since vLLM 0.33; an older recording's server admitted by the first chunk
    Setting(
        "scheduler_reserve_full_isl",
        "scheduler",
        "scheduler_reserve_full_isl",
        "scheduler_reserve_full_isl",
        False,
    ),
    Setting("watermark", "scheduler", "watermark", "watermark", 0.0),
    Setting("async_scheduling", "scheduler", "async_scheduling", "async_scheduling"),
    # written only where it is not fcfs
    Setting("scheduling_policy", "scheduler", "policy", "scheduling_policy", "fcfs"),
    Setting("block_size", "cache", "block_size", "block_size"),
    Setting("enable_prefix_caching", "cache", "enable_prefix_caching", "enable_prefix_caching"),
    Setting("num_kv_blocks", "cache", "num_gpu_blocks", "num_kv_blocks"),
)
# how a value read off a header is taken (the optional keys: a hand-written header may hold an int)
_FROM_HEADER = {"watermark": float, "scheduler_reserve_full_isl": bool}


def scheduler_args(cfg: EngineConfig) -> dict[str, Any]:
    """vLLM's `SchedulerConfig` arguments for the scenario's config (a decoder-only model)."""
    args: dict[str, Any] = {"is_encoder_decoder": False}
    for s in SETTINGS:
        if s.where == "scheduler":
            args[s.vllm] = getattr(cfg, s.field)
    args["async_scheduling"] = bool(cfg.async_scheduling)
    return args


def cache_args(cfg: EngineConfig) -> dict[str, Any]:
    """vLLM's `CacheConfig` arguments for the scenario's config, with `num_gpu_blocks` (set on the
    CacheConfig after it is built: it is not an argument of its constructor)."""
    return {s.vllm: getattr(cfg, s.field) for s in SETTINGS if s.where == "cache"}


def engine_fields(header: Any) -> dict[str, Any]:
    """The EngineConfig fields of these settings, read off a recording's header (core/recording.py's
    `Header`, whose extra keys are attributes): the server's own configuration. A scheduling policy
    is `fcfs` where the header names none."""
    out: dict[str, Any] = {}
    for s in SETTINGS:
        value = getattr(header, s.header, s.missing)
        out[s.field] = _FROM_HEADER[s.field](value) if s.field in _FROM_HEADER else value
    out["scheduling_policy"] = str(out["scheduling_policy"] or "fcfs")
    return out
