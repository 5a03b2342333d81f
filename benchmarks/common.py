"""What the benchmarks share: the (requests, tokens) sizes and the scenario whose first step
schedules exactly that many requests and tokens (each request prefills tokens/requests tokens)."""

from __future__ import annotations

from pagedviz.core import Limits, Scenario

SIZES = [(8, 256), (64, 2048), (256, 8192), (1024, 16384)]


def bench_scenario(requests: int, tokens: int, device: str = "cpu", model: bool = True) -> Scenario:
    per = tokens // requests
    config: dict[str, object] = {
        "block_size": 16,
        "max_model_len": per * 4,
        "max_num_reqs": requests,
        "max_num_batched_tokens": tokens,
        "num_kv_blocks": requests * (per // 4 + 2) + 1,
        "device": device,
    }
    if not model:
        config["model"] = None
    return Scenario.from_dict(
        {
            "name": f"bench-{requests}x{tokens}",
            "seed": 0,
            "config": config,
            "requests": [{"id": str(i), "prompt_len": per, "max_tokens": 1} for i in range(requests)],
            "max_steps": 4,
        },
        Limits(max_requests=requests, max_step_mflop=1 << 30),  # timing sizes, past the server's bound
    )
