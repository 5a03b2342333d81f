"""A recording's arrivals (core/recording.py) as a pagedviz scenario's requests (core/replay.py):
each request's prompt, max_tokens, arrival step and, where the recorder wrote one, its priority;
and parallel sampling's children put back together under their parent.

vLLM's engine splits a request with n > 1 into n children before its scheduler sees them
(`ParentRequest.get_child_info`: ids `{index}_{request_id}`, the parent's prompt, max_tokens,
priority and arrival, added in index order), so a recording holds the children. For the scenario
the page shows, a run of arrivals `0_X`, `1_X`, ... `{n-1}_X` in one step, one after another, with
one prompt, max_tokens and priority, and no request named X, is request X with `n`. The scenario
pagedviz's own scheduler runs for the agreement keeps the children apart (each one's output length
as recorded: children stop at different lengths on a real server), which the scheduler sees alike.

A scenario model without the fields (`RequestSpec.n`, `.priority`, `EngineConfig.scheduling_policy`)
leaves them out, and `unmodelled()` says what the recording has that it could not carry.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from pagedviz.core.recording import Arrival, Header
from pagedviz.core.replay_scheduler import prompt_ids
from pagedviz.core.scenario_parts import EngineConfig, RequestSpec

_CHILD = re.compile(r"^(0|[1-9]\d*)_(.+)$")
_SPEC_FIELDS = {f.name for f in dataclasses.fields(RequestSpec)}
_CONFIG_FIELDS = {f.name for f in dataclasses.fields(EngineConfig)}


def policy(header: Header) -> str:
    """The recorded server's scheduling policy (fcfs where the header does not say)."""
    return str((header.model_extra or {}).get("scheduling_policy") or "fcfs")


def unmodelled(header: Header, arrivals: list[Arrival]) -> list[str]:
    """What the recording has that this pagedviz's scenario cannot carry (notes)."""
    out = []
    if policy(header) != "fcfs" and "scheduling_policy" not in _CONFIG_FIELDS:
        out.append(f"the server's scheduling policy {policy(header)!r} is not modelled by this pagedviz")
    if any(a.priority for a in arrivals) and "priority" not in _SPEC_FIELDS:
        out.append("the requests' priorities are not modelled by this pagedviz")
    return out


def _spec(rid: str, ids: tuple[int, ...], max_tokens: int, step: int, priority: int) -> RequestSpec:
    extra: dict[str, Any] = {"priority": priority} if priority and "priority" in _SPEC_FIELDS else {}
    return RequestSpec(rid, ids, max_tokens, step, **extra)


def request_specs(
    arrivals: list[tuple[Arrival, int, int]], vocab: int, families: bool
) -> tuple[RequestSpec, ...]:
    """The scenario's requests from (arrival, step, max_tokens) in arrival order; `families`: the
    children of a request with n > 1 as that request (where the scenario model has `n`)."""
    specs = [
        _spec(a.id, tuple(int(t) for t in prompt_ids(a.id, a.prompt_token_ids, vocab)), m, step, a.priority)
        for a, step, m in arrivals
    ]
    if not families or "n" not in _SPEC_FIELDS:
        return tuple(specs)
    return tuple(_families(specs))


def _families(specs: list[RequestSpec]) -> list[RequestSpec]:
    ids = {s.id for s in specs}
    out: list[RequestSpec] = []
    i = 0
    while i < len(specs):
        s = specs[i]
        m = _CHILD.match(s.id)
        if m is None or m.group(1) != "0" or m.group(2) in ids:
            out.append(s)
            i += 1
            continue
        base = m.group(2)
        n = 1
        while i + n < len(specs):
            c = specs[i + n]
            same = (c.prompt_token_ids, c.max_tokens, c.arrival_step, getattr(c, "priority", 0))
            if c.id != f"{n}_{base}" or same != (
                s.prompt_token_ids,
                s.max_tokens,
                s.arrival_step,
                getattr(s, "priority", 0),
            ):
                break
            n += 1
        if n == 1:
            out.append(s)
        else:
            out.append(dataclasses.replace(s, id=base, **{"n": n}))
        i += n
    return out
