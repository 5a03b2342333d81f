"""Recordings for `pagedviz import` and POST /api/runs/import (issue 30): bad ones, each case's
bytes and the line its error must name, built from the shipped example (core/recordings/); and
synthetic long ones (`write_recording`: pagedviz's own scheduler written in the recorder's format,
also used by benchmarks/import_memory.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pagedviz.core import Limits, Scenario, make_engine
from pagedviz.core.recording import FORMAT_VERSION, HEADER_KEY
from pagedviz.core.recordings import example_bytes

EXAMPLE = example_bytes("real-vllm-preemption")
LINES = EXAMPLE.splitlines(keepends=True)
NUM_STEPS = len(LINES) - 1


def _header(**changes: object) -> bytes:
    h = json.loads(LINES[0])
    h.update(changes)
    return json.dumps(h).encode() + b"\n"


# a recording whose last line was cut mid-write (a server killed while writing line 5): the
# header and steps 1-3 are whole
CUT = b"".join(LINES[:4]) + LINES[4][: len(LINES[4]) // 2]
CUT_SAYS = "the last line (5) was cut: the recording stops at step 3"


def cases(line_limit: int) -> dict[str, tuple[bytes, str]]:
    """name -> (body, what the one-line error says); `line_limit`: the per-line limit in bytes."""
    big = json.loads(LINES[1])
    big["arrivals"] = [{"id": "x", "prompt_token_ids": [1] * (line_limit // 2), "max_tokens": 1}]
    return {
        "a line cut in the middle of the file": (
            b"".join(LINES[:4]) + LINES[4][: len(LINES[4]) // 2] + b"\n" + b"".join(LINES[5:]),
            "line 5: not JSON at column",
        ),
        "a line that is not JSON": (
            b"".join(LINES[:3]) + b"{not json\n" + b"".join(LINES[4:]),
            "line 4: not JSON",
        ),
        "a header alone": (LINES[0], "line 1: a header alone"),
        "an unknown header version": (
            _header(pagedviz_recording=99) + b"".join(LINES[1:]),
            "line 1: unknown header version 99",
        ),
        "a line over the per-line limit": (
            LINES[0] + json.dumps(big).encode() + b"\n" + b"".join(LINES[2:]),
            "line 2: longer than the per-line limit",
        ),
        "a step that is not an object": (LINES[0] + b"[1, 2]\n", "line 2: a JSON object was expected"),
        "a step with a field of the wrong type": (
            LINES[0] + LINES[1].replace(b'"num_free_blocks":', b'"num_free_blocks":"x","_":'),
            "line 2: ",
        ),
        "an empty file": (b"", "line 1: empty recording"),
        "a runner pagedviz does not know": (
            _header(runner="v3") + b"".join(LINES[1:]),
            "line 1: header: runner",
        ),
    }


def scenario(steps: int, every: int, max_tokens: int) -> Scenario:
    n = max(1, steps // every)
    reqs = [
        {"id": f"r{i}", "prompt_len": 64, "max_tokens": max_tokens, "arrival_step": 1 + i * every}
        for i in range(n)
    ]
    cfg = {
        "block_size": 16,
        "max_model_len": 64 + max_tokens,
        "max_num_reqs": 8,
        "max_num_batched_tokens": 512,
        "num_kv_blocks": 8 * ((64 + max_tokens) // 16 + 1) + 8,
        "model": None,
        "device": "cpu",
        "model_runner": "v1",
        "async_scheduling": False,
        "cudagraph_capture_sizes": None,
    }
    d = {"name": "import-bench", "config": cfg, "requests": reqs, "max_steps": steps}
    return Scenario.from_dict(d, Limits(max_requests=n + 1, max_steps=steps, max_total_tokens=1 << 30))


def write_recording(sc: Scenario, path: Path) -> int:
    """pagedviz's run of `sc` (synchronous, V1), one recorder line per step; the number of steps.
    With speculative decoding, each step's drafts and each request's generated tokens."""
    cfg = sc.config
    engine = make_engine(sc, capture=False)
    outs: list[Any] = []
    free: list[int] = []
    schedule = engine.scheduler.schedule

    def keep_last(step: int) -> Any:  # the step's SchedulerOutput, the only one kept
        outs[:] = [schedule(step)]
        # the free count right after schedule(), as the recorder reads get_num_free_blocks()
        free[:] = [len(engine.scheduler.kv.pool.free_queue)]
        return outs[0]

    engine.scheduler.schedule = keep_last  # type: ignore[method-assign]
    arrivals: dict[int, list[Any]] = {}
    for r in sc.requests:
        arrivals.setdefault(r.arrival_step, []).append(r)
    header = {
        HEADER_KEY: FORMAT_VERSION,
        "vllm_version": "0.33.0",
        "scheduler": "pagedviz (synthetic)",
        "runner": "v1",
        "async_scheduling": False,
        "block_size": cfg.block_size,
        "max_model_len": cfg.max_model_len,
        "max_num_batched_tokens": cfg.max_num_batched_tokens,
        "max_num_seqs": cfg.max_num_reqs,
        "num_kv_blocks": cfg.num_kv_blocks,
        "enable_chunked_prefill": True,
        "enable_prefix_caching": False,
        "long_prefill_token_threshold": 0,
        "kv_cache_groups": [{"kind": "FullAttentionSpec", "block_size": cfg.block_size, "num_layers": 1}],
        "vocab_size": cfg.vocab_size,
        "speculative": {
            "method": cfg.speculative_method,
            "num_speculative_tokens": cfg.num_speculative_tokens,
        }
        if cfg.num_speculative_tokens
        else None,
        "scheduler_reserve_full_isl": cfg.scheduler_reserve_full_isl,
        "watermark": cfg.watermark,
    }
    n = 0
    with open(path, "w") as f:
        f.write(json.dumps(header) + "\n")
        for t in engine.run():
            out = outs[-1]
            n = t.step
            line = {
                "step": t.step,
                "arrivals": [
                    {"id": r.id, "prompt_token_ids": list(r.prompt_token_ids), "max_tokens": r.max_tokens}
                    for r in arrivals.get(t.step, [])
                ],
                "new": [
                    {
                        "id": s.req_id,
                        "prompt_token_ids": s.token_ids[: s.num_prompt_tokens].tolist(),
                        "block_ids": [list(s.block_ids)],
                        "num_computed_tokens": s.num_computed_tokens,
                    }
                    for s in out.scheduled
                    if s.kind == "new"
                ],
                "cached": [
                    {
                        "id": s.req_id,
                        "resumed": s.kind == "resumed",
                        "new_block_ids": [list(s.new_block_ids)],
                        "num_computed_tokens": s.num_computed_tokens,
                        "num_output_tokens": len(s.token_ids) - s.num_prompt_tokens,
                    }
                    for s in out.scheduled
                    if s.kind != "new"
                ],
                "num_scheduled_tokens": out.num_scheduled_tokens,
                "spec_tokens": {s.req_id: list(s.spec_token_ids) for s in out.scheduled if s.spec_token_ids},
                "preempted": sorted(out.preempted_req_ids),
                "finished": sorted(out.finished_req_ids),
                "num_free_blocks": free[0],
                # with drafts, each request's accepted drafts and one more token
                "sampled": t.forward.get("generated_token_ids")
                or {k: [int(v)] for k, v in t.sampled_token_ids.items()},
            }
            f.write(json.dumps(line) + "\n")
    return n


def gemma_like(body: bytes) -> bytes:
    """The shipped hybrid recording as a server of a 62-layer model with Gemma 3's groups (five
    sliding layers per full one: six sliding groups of 10 or 9 layers, then the full one), each
    sliding group's blocks the recording's sliding ones: more layers than a scenario holds."""
    lines = [json.loads(x) for x in body.splitlines()]
    full, sliding = lines[0]["kv_cache_groups"]
    layers = {k: [i for i in range(62) if (i % 6 == 5) == (k == "full")] for k in ("full", "sliding")}
    groups = [
        {
            **sliding,
            "num_layers": len(layers["sliding"][g::6]),
            "layer_names": [f"model.layers.{i}.self_attn.attn" for i in layers["sliding"][g::6]],
        }
        for g in range(6)
    ]
    groups.append(
        {
            **full,
            "num_layers": 10,
            "layer_names": [f"model.layers.{i}.self_attn.attn" for i in layers["full"]],
        }
    )
    lines[0]["kv_cache_groups"] = groups

    def seven(per_group: list) -> list:
        return [per_group[1]] * 6 + [per_group[0]]

    for s in lines[1:]:
        for n in s["new"]:
            n["block_ids"] = seven(n["block_ids"])
        for c in s["cached"]:
            if c["new_block_ids"]:
                c["new_block_ids"] = seven(c["new_block_ids"])
            if c.get("null_head"):
                c["null_head"] = seven(c["null_head"])
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines)
