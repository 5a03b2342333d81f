"""core/replay.py on the shipped recording (no vLLM): the replay is the recording's schedule, and
the comparison with pagedviz's own scheduler finds the first step where a recording parts from it.
A speculative-decoding recording (pagedviz's own run in the recorder's format) replays its drafts
and accepts what the server accepted; the combinations it cannot replay are refused naming why."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pagedviz.core import Scenario, make_engine
from pagedviz.core.presets import preset_dict
from pagedviz.core.recording import read_recording
from pagedviz.core.replay import ReplayError, import_recording
from tests.support.recording_cases import LINES, NUM_STEPS, write_recording


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


def _spec_recording(tmp_path: Path, preset: str, **config: object) -> tuple[Scenario, list[bytes]]:
    d = preset_dict(preset)
    d["config"] = {**d["config"], **config}
    sc = Scenario.from_dict(d)
    path = tmp_path / "spec.jsonl"
    write_recording(sc, path)
    return sc, path.read_bytes().splitlines(keepends=True)


def test_a_spec_decode_recording_replays_its_drafts_and_accepts_what_the_server_accepted(
    tmp_path: Path,
) -> None:
    sc, lines = _spec_recording(tmp_path, "demo-ngram-spec-decode")
    imported = import_recording(*read_recording(lines))
    own = list(make_engine(sc).run())
    assert len(imported.traces) == len(own)
    assert any(t.scheduler.get("scheduled_spec_decode_tokens") for t in own)
    for a, b in zip(own, imported.traces):
        assert a.scheduler["scheduled_spec_decode_tokens"] == b.scheduler["scheduled_spec_decode_tokens"]
        for name in (
            "draft_token_ids",
            "logits_indices",
            "num_accepted_tokens",
            "num_rejected_tokens",
            "slot_mapping",
        ):
            if name in a.arrays:
                assert a.arrays[name].tolist() == b.arrays[name].tolist(), f"step {a.step}: {name}"
        assert a.forward.get("generated_token_ids") == b.forward.get("generated_token_ids")
        assert a.forward.get("proposed_draft_token_ids") == b.forward.get("proposed_draft_token_ids")
    assert "not compared: speculative decoding" in imported.agreement.text
    assert any("target_token_ids" in n for n in imported.notes)


@pytest.mark.parametrize(
    "header,says",
    [
        ({"async_scheduling": True}, "speculative decoding with async scheduling is not replayed"),
        ({"runner": "v2"}, "speculative decoding on Model Runner V2 is not replayed"),
    ],
)
def test_a_spec_decode_recording_pagedviz_cannot_replay_is_refused_naming_why(
    tmp_path: Path, header: dict[str, object], says: str
) -> None:
    _, lines = _spec_recording(tmp_path, "demo-ngram-spec-decode")
    h = json.loads(lines[0])
    h.update(header)
    with pytest.raises(ReplayError, match=f"line 1: {says}"):
        import_recording(*read_recording([json.dumps(h).encode() + b"\n", *lines[1:]]))
