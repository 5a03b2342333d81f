"""core/vllm_settings.py: the one table of scheduler and cache settings serves both directions, the
scenario -> vLLM configs (the engine vllm) and a recording's header -> the scenario (the import)."""

from __future__ import annotations

from dataclasses import replace

from pagedviz.core.recording import FORMAT_VERSION, HEADER_KEY, Header
from pagedviz.core.scenario_parts import EngineConfig
from pagedviz.core.vllm_settings import SETTINGS, cache_args, engine_fields, scheduler_args

CONFIG = replace(
    EngineConfig(),
    block_size=8,
    max_model_len=96,
    max_num_reqs=3,
    max_num_batched_tokens=40,
    num_kv_blocks=17,
    long_prefill_token_threshold=12,
    enable_chunked_prefill=False,
    enable_prefix_caching=True,
    async_scheduling=False,
    scheduler_reserve_full_isl=False,
    watermark=0.25,
    scheduling_policy="priority",
)


def _header(**settings: object) -> Header:
    """A header as record/ writes one, with the given settings under the header's own keys."""
    return Header.model_validate(
        {
            HEADER_KEY: FORMAT_VERSION,
            "vllm_version": "0.33.0",
            "scheduler": "Scheduler",
            "runner": "v1",
            "kv_cache_groups": [{"kind": "FullAttentionSpec", "block_size": 8, "num_layers": 1}],
            **settings,
        }
    )


def test_vllm_gets_every_setting_under_its_own_name() -> None:
    sched, cache = scheduler_args(CONFIG), cache_args(CONFIG)
    assert sched["max_num_seqs"] == 3 and sched["policy"] == "priority" and sched["watermark"] == 0.25
    assert sched["is_encoder_decoder"] is False and sched["async_scheduling"] is False
    assert cache == {"block_size": 8, "enable_prefix_caching": True, "num_gpu_blocks": 17}
    assert len(sched) - 1 + len(cache) == len(SETTINGS)


def test_a_header_with_the_servers_settings_gives_back_the_scenarios_config() -> None:
    sched, cache = scheduler_args(CONFIG), cache_args(CONFIG)
    vllm_values = {**sched, **cache}
    header = _header(**{s.header: vllm_values[s.vllm] for s in SETTINGS})
    assert engine_fields(header) == {s.field: getattr(CONFIG, s.field) for s in SETTINGS}


def test_an_older_header_without_the_newer_settings_reads_as_the_server_then_ran() -> None:
    required = {s.header: getattr(CONFIG, s.field) for s in SETTINGS if s.missing is None}
    fields = engine_fields(_header(**required))
    assert fields["scheduler_reserve_full_isl"] is False  # admitted by the first chunk
    assert fields["watermark"] == 0.0
    assert fields["scheduling_policy"] == "fcfs"
    assert fields["max_num_reqs"] == 3 and fields["num_kv_blocks"] == 17
