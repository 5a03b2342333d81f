"""Scenario builders shared by the test tiers: a small V1 scenario, running it, a run long enough for
progress tests."""

from __future__ import annotations

from typing import Any

from pagedviz.core import Scenario, make_engine


def make_scenario(requests: list[dict[str, Any]], flavor: str = "vllm", **config: Any) -> Scenario:
    """A small scenario on the V1 runner with synchronous scheduling, the rules most tests pin (the
    Model Runner V2 and async scheduling tests name their settings)."""
    base: dict[str, Any] = {
        "model_runner": "v1",
        "async_scheduling": False,
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
    return list(make_engine(scenario).run())


# a run that takes a couple of seconds on a small CPU (240 steps with the model on, about 8 ms a
# step on a 2-core machine): for progress tests, which need it still computing after step 1
LONG_RUN: dict[str, Any] = {
    "name": "long",
    "max_steps": 240,
    "config": {
        # pinned, so that its length in steps and seconds stays what the progress tests assume
        "model_runner": "v1",
        "async_scheduling": False,
        "block_size": 16,
        "max_model_len": 512,
        "max_num_reqs": 8,
        "max_num_batched_tokens": 512,
        "num_kv_blocks": 256,
    },
    "requests": [{"id": str(i), "prompt_len": 32, "max_tokens": 300} for i in range(8)],
}
