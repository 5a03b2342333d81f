"""core/replay_seek.py (issue 40): any step of a recording computed from a checkpoint rolled
forward with cheap steps equals that step of a full replay (its trace whole, but the stage
timings), V1 and V2, sync and async, speculative decoding, hybrid groups, redacted; and the cheap
steps' overview lines are the full traces' step_summary."""

from __future__ import annotations

import io
import json
import pickle
import zlib
from pathlib import Path
from typing import Any

import pytest

from pagedviz.app.summaries import step_summary
from pagedviz.core import Scenario
from pagedviz.core.presets import preset_dict
from pagedviz.core.recording import read_recording
from pagedviz.core.recordings import example_bytes
from pagedviz.core.replay import import_recording, scenario_of
from pagedviz.core.replay_scheduler import ReplayError
from pagedviz.core.replay_seek import Checkpoint, FileSource, Seeker, cheap_step, checkpoint, fresh
from tests.support.recording_cases import write_recording


def _with_header(body: bytes, **changes: object) -> bytes:
    lines = body.splitlines(keepends=True)
    h = json.loads(lines[0])
    h.update(changes)
    return json.dumps(h).encode() + b"\n" + b"".join(lines[1:])


def _redacted(body: bytes) -> bytes:
    """The recording as PAGEDVIZ_RECORD_REDACT=1 writes it: every token list as its length."""
    lines = body.splitlines(keepends=True)
    h = json.loads(lines[0])
    h["redacted"] = True
    out = [json.dumps(h).encode() + b"\n"]
    for raw in lines[1:]:
        d = json.loads(raw)
        for a in [*d.get("arrivals", []), *d.get("new", [])]:
            a["prompt_token_ids"] = len(a["prompt_token_ids"])
        d["sampled"] = {k: len(v) for k, v in (d.get("sampled") or {}).items()}
        out.append(json.dumps(d).encode() + b"\n")
    return b"".join(out)


def _spec(tmp_path: Path) -> bytes:
    d = preset_dict("demo-ngram-spec-decode")
    path = tmp_path / "spec.jsonl"
    write_recording(Scenario.from_dict(d), path)
    return path.read_bytes()


PREEMPTION = example_bytes("real-vllm-preemption")
HYBRID = example_bytes("real-vllm-hybrid")
CASES: dict[str, Any] = {
    "v1": lambda _: PREEMPTION,
    "v2": lambda _: _with_header(PREEMPTION, runner="v2"),
    "v1 async": lambda _: _with_header(PREEMPTION, async_scheduling=True),
    "v2 async": lambda _: _with_header(PREEMPTION, runner="v2", async_scheduling=True),
    "hybrid v1": lambda _: HYBRID,
    "hybrid v2": lambda _: _with_header(HYBRID, runner="v2"),
    "redacted": lambda _: _redacted(PREEMPTION),
    "spec decode": _spec,
}


def _plain(t: Any) -> str:
    d = t.to_dict()
    d.pop("timing_us")  # the stage timings: measured, never equal twice
    return json.dumps(d, sort_keys=True, default=str)


@pytest.mark.parametrize("case", list(CASES))
def test_every_step_read_by_seek_is_that_step_of_a_full_replay(case: str, tmp_path: Path) -> None:
    body = CASES[case](tmp_path)
    header, steps = read_recording(body.splitlines(keepends=True))
    full = import_recording(header, steps).traces
    scenario = scenario_of(header, steps)
    source = FileSource(io.BytesIO(body))
    # the cheap steps' overview lines are the full traces' own
    e, _ = fresh(header, scenario, source, len(steps))
    assert [cheap_step(e)[0] for _ in steps] == [step_summary(t) for t in full]
    kept: dict[int, Checkpoint] = {}

    def nearest(n: int) -> Checkpoint | None:
        return max((c for c in kept.values() if c.n <= n), key=lambda c: c.n, default=None)

    seeker = Seeker(header, scenario, source, len(steps), 3, nearest, lambda c: kept.setdefault(c.n, c))
    # the last step first (from the start: checkpoints kept on the way), then every step (from them)
    order = [len(steps), *range(1, len(steps) + 1)]
    for n in order:
        assert _plain(seeker.step(n)) == _plain(full[n - 1]), f"step {n}"
    assert sorted(kept) == list(range(3, len(steps), 3))
    assert all(c.offset is not None for c in kept.values())


def test_a_step_outside_the_recording_is_refused_naming_it() -> None:
    header, steps = read_recording(PREEMPTION.splitlines(keepends=True))
    seeker = Seeker(header, scenario_of(header, steps), FileSource(io.BytesIO(PREEMPTION)), len(steps), 4)
    for n in (0, len(steps) + 1):
        with pytest.raises(ReplayError, match=f"step {n} is outside 1..{len(steps)}"):
            seeker.step(n)


def test_a_checkpoint_of_another_format_is_passed_over_and_the_step_rolled_from_the_start() -> None:
    header, steps = read_recording(PREEMPTION.splitlines(keepends=True))
    full = import_recording(header, steps).traces
    scenario = scenario_of(header, steps)
    source = FileSource(io.BytesIO(PREEMPTION))
    e, lines = fresh(header, scenario, source, len(steps))
    for _ in range(3):
        cheap_step(e)
    good = checkpoint(e, lines)
    # a checkpoint as an earlier pagedviz kept it: its state without the format's number
    old_state = pickle.loads(zlib.decompress(good.body))[1:]
    old = Checkpoint(good.n, good.offset, zlib.compress(pickle.dumps(old_state)))
    kept: list[Checkpoint] = []
    seeker = Seeker(header, scenario, source, len(steps), 2, lambda n: old, kept.append)
    assert _plain(seeker.step(5)) == _plain(full[4])
    assert [c.n for c in kept] == [2, 4]  # rolled from the start, keeping this format's
    again = Seeker(header, scenario, source, len(steps), 2, lambda n: kept[-1])
    assert _plain(again.step(5)) == _plain(full[4])
