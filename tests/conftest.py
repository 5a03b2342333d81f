"""Shared helpers for the test suite."""

from __future__ import annotations

from typing import Any

from core import Engine, Scenario


def make_scenario(requests: list[dict[str, Any]], flavor: str = "vllm", **config: Any) -> Scenario:
    base: dict[str, Any] = {
        "block_size": 2,
        "max_model_len": 8,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 16,
        "num_kv_blocks": 6,
        "model": None,
    }
    base.update(config)
    return Scenario.from_dict(
        {"name": "test", "flavor": flavor, "config": base, "requests": requests, "max_steps": 512}
    )


def run_all(scenario: Scenario) -> list:
    return list(Engine(scenario).run())
