"""How long validating a scenario takes (`Scenario.from_dict`, what every POST /api/runs and
/api/scenarios/validate does before any work): every preset, a large scenario (256 requests given as
token ids) and a scenario refused for a type error and an unknown field. Prints the time per
call (CPU time, the best of several rounds, so that other load on the machine counts less), in
microseconds. Run:

    .venv/bin/python benchmarks/validation.py --rounds 7
"""

from __future__ import annotations

import argparse
import contextlib
import time
import timeit
from typing import Any

from pagedviz.core import Limits, Scenario, ScenarioError
from pagedviz.core.presets import list_presets, preset_dict


def large() -> dict[str, Any]:
    """256 requests of 64 token ids each: the largest list the server's default limits take."""
    return {
        "name": "large",
        "config": {
            "max_model_len": 128,
            "max_num_reqs": 256,
            "max_num_batched_tokens": 2048,
            "num_kv_blocks": 4096,
            "model": None,
        },
        "requests": [
            {"id": f"r{i}", "prompt_token_ids": [(i + j) % 500 + 3 for j in range(64)], "max_tokens": 8}
            for i in range(256)
        ],
    }


def refused() -> dict[str, Any]:
    """seed-001 with a type error and a misspelt field."""
    d = preset_dict("seed-001")
    d["config"]["block_size"] = "16"
    d["config"]["block_sise"] = 16
    return d


def validate(d: dict[str, Any], limits: Limits) -> None:
    """One validation; a refusal is one too (its time is what is measured)."""
    with contextlib.suppress(ScenarioError):
        Scenario.from_dict(d, limits)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    limits = Limits()
    cases = {
        "all presets (each)": [preset_dict(p["id"]) for p in list_presets()],
        "256 requests x 64 ids": [large()],
        "refused (type, unknown)": [refused()],
    }
    Scenario.from_dict(large(), limits)  # it is valid: the timing is of the whole validation
    for name, docs in cases.items():
        for d in docs:  # warm: models built, modules imported
            validate(d, limits)
        number = max(1, 200 // len(docs))
        times = timeit.repeat(
            lambda docs=docs: [validate(d, limits) for d in docs],
            number=number,
            repeat=args.rounds,
            timer=time.process_time,
        )
        per_call = min(times) / (number * len(docs)) * 1e6
        print(f"{name:28s} {per_call:9.1f} us per call")


if __name__ == "__main__":
    main()
