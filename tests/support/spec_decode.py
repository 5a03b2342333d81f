"""Model Runner V2 with n-gram speculative decoding: the scenario builder and the three requests that
tests/engine/test_v2_spec_decode.py checks the runner with and test_narrate_v2.py narrates."""

from __future__ import annotations

from typing import Any

from pagedviz.core import Scenario

SEED = 0
VOCAB = 512

# a repeats itself (the drafter finds matches), b is long, c arrives a step late
REQS: list[dict[str, Any]] = [
    {"id": "a", "prompt_token_ids": [5, 6, 7, 5, 6, 7, 5, 6], "max_tokens": 9},
    {"id": "b", "prompt_len": 20, "max_tokens": 5},
    {"id": "c", "prompt_len": 3, "max_tokens": 4, "arrival_step": 2},
]


def spec_scenario(requests: list[dict[str, Any]], **config: Any) -> Scenario:
    """A `vllm`-flavour scenario proposing 3 n-gram drafts per step, `config` on top of the base."""
    base = {
        "num_speculative_tokens": 3,
        "prompt_lookup_min": 1,
        "prompt_lookup_max": 3,
        "block_size": 4,
        "max_model_len": 64,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 32,
        "num_kv_blocks": 80,
        "vocab_size": VOCAB,
        "model": None,
        "async_scheduling": False,  # the synchronous steps; async has tests of its own
    }
    return Scenario.from_dict(
        {"flavor": "vllm", "seed": SEED, "config": {**base, **config}, "requests": requests}
    )
