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

The sentences live by theme: narrate_common.py (the shared vocabulary: `Item`, `Text`, `en_zh`,
`sentence`, lists and counts), narrate_facts.py (`Facts`, what a trace says), narrate_sched.py and
narrate_batch.py (step-level sentences), narrate_stages.py (one sentence a stage),
narrate_explain.py (`explain()`, one entry, with narrate_v1_explain.py's formulas), and
narrate_v2*.py for Model Runner V2.

Nothing here is written per preset: the facts come from the trace contract (docs/arrays.md), so the
three flavours narrate alike. Arrays a flavour or an engine version lacks are skipped, not assumed.
"""

from __future__ import annotations

from pagedviz.core.narrate_batch import (
    idle_items,
    last_step_items,
    move_items,
    padding_items,
    pool_items,
    sampling_items,
    spec_items,
)
from pagedviz.core.narrate_causes import waiting_items
from pagedviz.core.narrate_common import Item
from pagedviz.core.narrate_explain import explain
from pagedviz.core.narrate_facts import Facts
from pagedviz.core.narrate_family import sibling_items
from pagedviz.core.narrate_groups import group_moves, window_drops
from pagedviz.core.narrate_sched import (
    admission_items,
    budget_items,
    chunk_items,
    engine_core_items,
    finish_items,
    growth_items,
    preemption_items,
)
from pagedviz.core.narrate_stages import stage_sentence
from pagedviz.core.narrate_v2 import narrate_v2
from pagedviz.core.scenario_parts import EngineConfig
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
    items = finish_items(f, prev)
    if t.idle:
        return items + (engine_core_items(f) or idle_items(f)) + waiting_items(f, config)
    items += engine_core_items(f)
    items += preemption_items(f, prev)
    items += admission_items(f)
    items += sibling_items(f)
    items += chunk_items(f, config)
    items += window_drops(f)
    items += growth_items(f)
    items += group_moves(f, prev)
    items += budget_items(f, config)
    items += waiting_items(f, config)
    items += move_items(f)
    items += padding_items(f)
    items += spec_items(f)
    items += sampling_items(f)
    if last:
        items += last_step_items(f)
    items += pool_items(f)
    stage_names = [s.name for s in t.stages]
    if not f.nano and "update_states" not in stage_names:
        stage_names.insert(0, "update_states")
    writes = {s.name: s.writes for s in t.stages}
    for name in stage_names:
        item = stage_sentence(f, name, writes.get(name, []))
        if item is not None:
            items.append(item)
    return items
