"""Bad recordings for `pagedviz import` and POST /api/runs/import (issue 30): each case's bytes and
the line its error must name. Built from the shipped example (core/recordings/)."""

from __future__ import annotations

import json

from pagedviz.core.recordings import example_bytes

EXAMPLE = example_bytes("real-vllm-preemption")
LINES = EXAMPLE.splitlines(keepends=True)
NUM_STEPS = len(LINES) - 1


def _header(**changes: object) -> bytes:
    h = json.loads(LINES[0])
    h.update(changes)
    return json.dumps(h).encode() + b"\n"


def cases(line_limit: int) -> dict[str, tuple[bytes, str]]:
    """name -> (body, what the one-line error says); `line_limit`: the per-line limit in bytes."""
    big = json.loads(LINES[1])
    big["arrivals"] = [{"id": "x", "prompt_token_ids": [1] * (line_limit // 2), "max_tokens": 1}]
    return {
        "truncated file": (b"".join(LINES[:4]) + LINES[4][: len(LINES[4]) // 2], "line 5: truncated"),
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
