"""vLLM 0.33.0's KV cache groups for a scenario, planned by vLLM's own functions, for both sides
(v1.py, v2_worker.py).

The scenario's `config.layer_types` (Hugging Face's names: "full_attention" / "sliding_attention";
null: every layer of the model full attention, one group, today's default) become one KV cache
spec per layer, named `layer.<index>`: a `FullAttentionSpec`, or a `SlidingWindowSpec` with
`config.sliding_window` tokens, all with the same page (1 KV head of size 8, float32, the
scenario's block size: no KV tensors exist on vLLM's side, the page only has to be equal).
vLLM's planner groups them:
`get_global_kv_cache_groups` (group order, layers per group) with the hybrid KV cache manager on,
then `get_kv_cache_configs` for a pool of exactly `num_kv_blocks` blocks, which also runs vLLM's
check that the pool holds one `max_model_len` sequence across the groups (its refusal is vLLM's
`ValueError`, message and all).

The hybrid manager: `scheduler_config.disable_hybrid_kv_cache_manager = False` is set before the
groups are planned, as a GPU server runs it (with it on, vLLM keeps a sliding-window layer's
`SlidingWindowSpec`; off, `unify_hybrid_kv_cache_specs` turns every layer into full attention,
one group). vLLM 0.33's CPU platform says it supports the manager, and `VllmConfig` leaves it on
when nothing turns it off; it is set here anyway, so the plan never depends on the platform.

What is stubbed: the KV cache layout (`cache_config.kv_cache_layout`), which the engine core
resolves from the attention backends once a model is loaded. It is set to "NHD" (layer-outermost,
FlashAttention's). With equal page sizes the planner reads it only to decide that no block-outer
packing is needed, so the groups do not depend on it.
"""

from __future__ import annotations

from typing import Any

from pagedviz.core.vllm_engine import env as vllm_env

vllm_env.prepare()  # before vLLM: Triton usable, V1 pinned by default (env.py)
import torch  # noqa: E402
from vllm.config import VllmConfig  # noqa: E402
from vllm.v1.core.kv_cache_planning import (  # noqa: E402
    get_global_kv_cache_groups,
    get_kv_cache_configs,
)
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheSpec,
    SlidingWindowSpec,
)

FULL, SLIDING = "full_attention", "sliding_attention"


def layer_types(cfg: Any) -> list[str]:
    """The scenario's layer kinds (every layer of the model full attention when it names none)."""
    if cfg.layer_types:
        return list(cfg.layer_types)
    return [FULL] * (cfg.model.num_layers if cfg.model is not None else 1)


def layer_specs(cfg: Any) -> dict[str, KVCacheSpec]:
    """One KV cache spec per layer, in layer order, all with the same page size."""
    page = {"block_size": cfg.block_size, "num_kv_heads": 1, "head_size": 8, "dtype": torch.float32}
    specs: dict[str, KVCacheSpec] = {}
    for i, kind in enumerate(layer_types(cfg)):
        if kind == SLIDING:
            specs[f"layer.{i}"] = SlidingWindowSpec(**page, sliding_window=int(cfg.sliding_window))
        elif kind == FULL:
            specs[f"layer.{i}"] = FullAttentionSpec(**page)
        else:
            raise ValueError(f"config.layer_types[{i}]: {kind!r} is neither {FULL!r} nor {SLIDING!r}")
    return specs


def plan(vc: VllmConfig, cfg: Any) -> KVCacheConfig:
    """vLLM's KVCacheConfig for the scenario: its groups, in vLLM's order, over `num_kv_blocks`
    blocks (module docstring). Sets the hybrid manager on and the layout on `vc`."""
    vc.scheduler_config.disable_hybrid_kv_cache_manager = False
    if vc.cache_config.kv_cache_layout is None:
        vc.cache_config.kv_cache_layout = "NHD"
    specs = layer_specs(cfg)
    groups = get_global_kv_cache_groups(vc, [specs])
    # vLLM's own knob for a pool of a given size (`--num-gpu-blocks-override`): the planner then
    # sizes the memory from it, whatever the memory passed
    vc.cache_config.num_gpu_blocks_override = cfg.num_kv_blocks
    (config,) = get_kv_cache_configs(vc, [specs], [0], groups)
    assert config.num_blocks == cfg.num_kv_blocks, (config.num_blocks, cfg.num_kv_blocks)
    return config


def describe(config: KVCacheConfig) -> list[dict[str, Any]]:
    """vLLM's groups as core/kv_groups.py names them: kind, layer indices, window (None: full)."""
    out: list[dict[str, Any]] = []
    for g in config.kv_cache_groups:
        spec = g.kv_cache_spec
        window = int(spec.sliding_window) if isinstance(spec, SlidingWindowSpec) else None
        out.append(
            {
                "kind": FULL if window is None else SLIDING,
                "layers": [int(name.split(".")[1]) for name in g.layer_names],
                "sliding_window": window,
            }
        )
    return out


def group_block_sizes(config: KVCacheConfig) -> list[int]:
    return [g.kv_cache_spec.block_size for g in config.kv_cache_groups]


def sliding_window_reach(config: KVCacheConfig) -> list[int]:
    """Per group, the tokens below a request's first scheduled position its attention still reads
    (`SlidingWindowSpec.num_retained_tokens`; 0 for full attention), as V2's runner passes them to
    `BlockTables` (gpu/model_runner.py, initialize_kv_cache)."""
    return [
        g.kv_cache_spec.num_retained_tokens if isinstance(g.kv_cache_spec, SlidingWindowSpec) else 0
        for g in config.kv_cache_groups
    ]

