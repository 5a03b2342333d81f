"""Write a long recording of vLLM 0.33.0's OWN scheduler (issue 40's measurement): vLLM's
`Scheduler` under `pagedviz.record.RecordingScheduler`, driven without a GPU as the fidelity tier
drives it (tests/support/vllm_record.py): pagedviz's engine samples the tokens (its synthetic
sampler), vLLM's scheduler schedules, the recorder writes each schedule() with its output.

A stream of `--requests` requests (prompts of 32-288 tokens, 16-80 output tokens, a request
arriving every `--every` steps, at most `--max-num-seqs` running), about four steps a request
with the defaults: 3,000 requests make about 12,000 steps. Needs vLLM 0.33.0 installed
(scripts/fidelity-deps.sh). Run:

    .venv/bin/python benchmarks/vllm_recording.py --requests 3000 --out /tmp/vllm-12k.jsonl
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pagedviz.core import Scenario, make_engine  # noqa: E402
from pagedviz.core.limits import Limits  # noqa: E402


def scenario(requests: int, every: float, seed: int = 0) -> Scenario:
    import numpy as np

    rng = np.random.default_rng(seed)
    reqs = [
        {
            "id": f"r{i}",
            "prompt_len": int(rng.integers(32, 289)),
            "max_tokens": int(rng.integers(16, 81)),
            "arrival_step": 1 + int(i * every),
        }
        for i in range(requests)
    ]
    cfg = {
        "block_size": 16,
        "max_model_len": 512,
        "max_num_reqs": 32,
        "max_num_batched_tokens": 1024,
        "num_kv_blocks": 512,
        "model": None,
        "device": "cpu",
        "model_runner": "v1",
        "async_scheduling": False,
        "cudagraph_capture_sizes": None,
    }
    d = {"name": "vllm-recording", "config": cfg, "requests": reqs, "max_steps": 10 * requests + 100}
    return Scenario.from_dict(
        d, Limits(max_requests=requests + 1, max_steps=10 * requests + 100, max_total_tokens=1 << 40)
    )


def write(sc: Scenario, out: Path) -> int:
    """Drive vLLM's scheduler under the recorder on `sc`; the number of steps recorded."""
    os.environ["PAGEDVIZ_RECORD"] = str(out)
    from pagedviz.core.vllm_engine import v1 as vllm_side
    from pagedviz.record import RecordingScheduler

    side = vllm_side.VllmSide(sc)
    side.config.scheduler_config.async_scheduling = False
    side.scheduler = RecordingScheduler(
        vllm_config=side.config,
        kv_cache_config=vllm_side.kv_cache_config(sc),
        structured_output_manager=vllm_side.StructuredOutputManager(side.config),
        block_size=sc.config.block_size,
    )
    n = 0
    for t in make_engine(sc, capture=False).run():
        side.step(t.sampled_token_ids)
        n = t.step
    side.scheduler.shutdown()
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--every", type=float, default=4.0, help="a request arrives every this many steps")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    start = time.monotonic()
    n = write(scenario(args.requests, args.every), args.out)
    size = args.out.stat().st_size / (1 << 20)
    took = time.monotonic() - start
    print(f"{n} steps of vLLM's scheduler, {args.requests} requests, {size:.1f} MB, {took:.0f} s")


if __name__ == "__main__":
    main()
