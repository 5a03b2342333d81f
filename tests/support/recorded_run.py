"""pagedviz's own run of a recording: its scheduler and runner on the recorded arrivals, fed every
request's recorded tokens (the agreement's engine, core/replay_agreement.py), for comparing with the
import's replay of the recorded block ids."""

from __future__ import annotations

from typing import Any

from pagedviz.core.replay import scenario_of
from pagedviz.core.replay_agreement import _RecordedTokens
from pagedviz.core.trace import StepTrace


def own_scheduled_traces(header: Any, steps: list[Any]) -> list[StepTrace]:
    """The steps that scheduled tokens, of pagedviz's own run with all recorded tokens known."""
    own = _RecordedTokens(scenario_of(header, steps, for_agreement=True))
    own.outputs = {}
    own.cursor = {}
    for s in steps:
        for rid, toks in (s.sampled or {}).items():
            own.outputs.setdefault(rid, []).extend(toks)
    return [t for t in own.run() if t.scheduler.get("num_scheduled_tokens")]
