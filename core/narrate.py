"""Narration of one engine step, generated from its StepTrace (and the previous step's).

Each sentence is a structured item the page can render and link:
`{"key": ..., "text": {"en": ..., "zh": ...}, "refs": [{"kind": "request"|"block"|"token"|"row",
"id": ...}], "stage": name | None}`. Step-level sentences (stage None) say what the scheduler did
and why: admissions, chunking and the token budget, preemptions (the pool ran out; the victim is
the last running request, or under the priority policy the lowest priority), parallel sampling's
children (narrate_family.py: shared only through prefix-cache hits, no copy-on-write), finishes
and frees, prefix-cache hits, condense moves, CUDA-graph padding, idle steps, speculative tokens
when the trace has them. Stage sentences substitute this step's numbers into the stage's formula
(`slot_mapping[3] = 7 * 2 + 1 = 15`); `explain()` does the
same for any one entry, which is what a predict-then-reveal check shows for a wrong answer.

The sentences live by theme: narrate_facts.py (the vocabulary and `Facts`), narrate_sched.py and
narrate_batch.py (step-level sentences), narrate_stages.py (one sentence a stage),
narrate_explain.py (`explain()`, one entry), and narrate_v2*.py for Model Runner V2.

Nothing here is written per preset: the facts come from the trace contract (docs/arrays.md), so the
three flavours narrate alike. Arrays a flavour or an engine version lacks are skipped, not assumed.
"""

from __future__ import annotations

from pagedviz.core.narrate_batch import _idle, _last, _moves, _padding, _pool, _sampling, _spec
from pagedviz.core.narrate_explain import explain
from pagedviz.core.narrate_facts import Facts, Item
from pagedviz.core.narrate_family import _siblings
from pagedviz.core.narrate_groups import group_moves, window_drops
from pagedviz.core.narrate_sched import (
    _admissions,
    _budget,
    _chunks,
    _engine_core,
    _finishes,
    _growth,
    _preemptions,
    _waiting,
)
from pagedviz.core.narrate_stages import _stage_sentence
from pagedviz.core.narrate_v2 import narrate_v2
from pagedviz.core.scenario import EngineConfig
from pagedviz.core.trace import StepTrace

__all__ = ["explain", "narrate"]


def narrate(
    t: StepTrace, prev: StepTrace | None = None, config: EngineConfig | None = None, last: bool = False
) -> list[Item]:
    """The step's sentences, then one per stage. `prev` (the step before) names what was freed
    and who was running; `config` adds the token budget and the reasons requests wait; `last`
    (the run ends with this step) says that the requests sampling now finish."""
    f = Facts(t)
    if f.v2:  # Model Runner V2 narrates its state slots (core/narrate_v2.py)
        return narrate_v2(f, prev, config, last)
    items = _finishes(f, prev)
    if t.idle:
        return items + (_engine_core(f) or _idle(f)) + _waiting(f, config)
    items += _engine_core(f)
    items += _preemptions(f, prev)
    items += _admissions(f)
    items += _siblings(f)
    items += _chunks(f, config)
    items += window_drops(f)
    items += _growth(f)
    items += group_moves(f, prev)
    items += _budget(f, config)
    items += _waiting(f, config)
    items += _moves(f)
    items += _padding(f)
    items += _spec(f)
    items += _sampling(f)
    if last:
        items += _last(f)
    items += _pool(f)
    stage_names = [s.name for s in t.stages]
    if not f.nano and "update_states" not in stage_names:
        stage_names.insert(0, "update_states")
    writes = {s.name: s.writes for s in t.stages}
    for name in stage_names:
        item = _stage_sentence(f, name, writes.get(name, []))
        if item is not None:
            items.append(item)
    return items
