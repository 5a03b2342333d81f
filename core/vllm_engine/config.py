"""vLLM's own configs for a scenario: `scheduler_config` builds the `VllmConfig` (its
`SchedulerConfig`, `CacheConfig` and the stand-in model config) that the V1 side (v1.py) and Model
Runner V2's worker (v2_worker.py, v2.py) build vLLM's scheduler from. Which scenario field is which
vLLM setting is core/vllm_settings.py's table, the one the import reads a recording's header with.

Imported after vLLM's process-wide settings are made (env.prepare(); for V2, after v2_worker.py
has imported V2's modules under Triton's interpreter), as v1.py and v2_worker.py import it.
"""

from __future__ import annotations

from pagedviz.core.vllm_engine import env as vllm_env

vllm_env.prepare()  # before vLLM: Triton usable, V1 pinned by default (env.py)
from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, SpeculativeConfig, VllmConfig  # noqa: E402

from pagedviz.core.scenario import Scenario  # noqa: E402
from pagedviz.core.vllm_settings import cache_args, scheduler_args  # noqa: E402


def scheduler_config(scenario: Scenario, runner: str = "v1") -> VllmConfig:
    """vLLM's configs for the scenario; SchedulerConfig validates as vLLM does. With
    `async_scheduling` the engine core builds an AsyncScheduler and a batch queue of 2.

    `runner`: "v1", or "v2" for Model Runner V2's worker, which also gets the n-gram drafter's
    `SpeculativeConfig` when the scenario drafts (the engine vllm drafts on V2 only:
    core/vllm_engine/__init__.py's `problems`). Which runner vLLM picks is read from
    `VLLM_USE_V2_MODEL_RUNNER` while the config is built: V2's callers build it with that set."""
    cfg = scenario.config
    sched = SchedulerConfig(**scheduler_args(cfg))
    cache_kw = cache_args(cfg)
    num_gpu_blocks = cache_kw.pop("num_gpu_blocks")
    cache = CacheConfig(**cache_kw)
    cache.num_gpu_blocks = num_gpu_blocks
    vc = VllmConfig(scheduler_config=sched, cache_config=cache, device_config=DeviceConfig(device="cpu"))
    object.__setattr__(vc, "model_config", vllm_env.TinyModelConfig(cfg.max_model_len, cfg.vocab_size))
    # vLLM's CPU platform turns async scheduling off (platforms/cpu.py, check_and_update_config:
    # "not required on CPU"); a GPU server keeps what the scenario asks for, and with it
    # `max_concurrent_batches` 2: `max_in_flight_tokens` (what a sliding-window group's admission
    # cap and the pool check count) is two budgets, as pagedviz models it (core/kv_planning.py)
    vc.scheduler_config.async_scheduling = bool(cfg.async_scheduling)
    if runner == "v2" and cfg.num_speculative_tokens:
        # after the model config: SpeculativeConfig reads nothing of it for n-gram
        spec = SpeculativeConfig(
            method="ngram",
            num_speculative_tokens=cfg.num_speculative_tokens,
            prompt_lookup_min=cfg.prompt_lookup_min,
            prompt_lookup_max=cfg.prompt_lookup_max,
        )
        object.__setattr__(vc, "speculative_config", spec)
    return vc
