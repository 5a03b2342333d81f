"""core/replay.py on the shipped recording (no vLLM): the replay is the recording's schedule, and
the comparison with pagedviz's own scheduler finds the first step where a recording parts from it."""

from __future__ import annotations

import json
from collections.abc import Callable

from pagedviz.core.recording import read_recording
from pagedviz.core.replay import import_recording

from recording_cases import LINES, NUM_STEPS


def _edited(step: int, edit: Callable[[dict], None]) -> list[bytes]:
    lines = list(LINES)
    d = json.loads(lines[step])
    edit(d)
    lines[step] = json.dumps(d).encode() + b"\n"
    return lines


def test_the_shipped_recording_agrees_with_pagedviz_to_its_last_step() -> None:
    imported = import_recording(*read_recording(LINES))
    assert len(imported.traces) == NUM_STEPS
    assert imported.agreement.diverges_at is None and imported.agreement.agrees_up_to == NUM_STEPS
    assert imported.scenario.notes[0] == imported.agreement.text


def test_a_recording_whose_server_chose_other_blocks_diverges_at_that_step() -> None:
    def swap(d: dict) -> None:
        d["new"][0]["block_ids"][0].reverse()

    imported = import_recording(*read_recording(_edited(1, swap)))
    a = imported.agreement
    assert a.diverges_at == 1 and a.agrees_up_to == 0
    assert a.difference.startswith("new_block_ids:")
    # the replay shows the recorded blocks, not pagedviz's choice
    first = imported.traces[0].scheduler["new_block_ids"]
    assert first[json.loads(LINES[1])["new"][0]["id"]] == json.loads(LINES[1])["new"][0]["block_ids"][0][::-1]


def test_a_later_difference_is_named_with_its_step() -> None:
    k = NUM_STEPS - 1

    def more(d: dict) -> None:
        # a preemption pagedviz did not make
        d["preempted"] = sorted({*d["preempted"], "zz"})

    a = import_recording(*read_recording(_edited(k, more))).agreement
    assert a.diverges_at == k and a.agrees_up_to == k - 1 and "preempted_req_ids" in a.difference
