"""What a plotting function is handed, made into steps and (where known) their scenario: a preset
id, a Scenario (or its JSON dict), a run (the step traces `make_engine(scenario).run()` yields), or
one StepTrace. A preset or a scenario is run once and kept (the engine is deterministic)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pagedviz.core import Scenario, StepTrace, load_preset, make_engine
from pagedviz.core.parallel_sampling import scheduled_specs


@dataclass(frozen=True)
class Source:
    steps: tuple[StepTrace, ...]
    scenario: Scenario | None

    def step(self, n: int) -> StepTrace:
        """Step n (1-based, as the page and the API number them)."""
        for t in self.steps:
            if t.step == n:
                return t
        raise ValueError(f"n: the run has steps 1..{len(self.steps)} (got {n!r:.40})")

    def prev(self, t: StepTrace) -> StepTrace | None:
        i = self.steps.index(t)
        return self.steps[i - 1] if i > 0 else None

    def req_ids(self) -> list[str]:
        """Requests in the scenario's order (their identity colours); without a scenario, in the
        order the steps first name them."""
        if self.scenario is not None:
            return [r.id for r in scheduled_specs(self.scenario.requests)]  # n > 1: the children
        seen: dict[str, None] = {}
        for t in self.steps:
            for rid in (
                *t.scheduler.get("waiting_req_ids", []),
                *t.scheduler.get("num_scheduled_tokens", {}),
            ):
                seen.setdefault(str(rid), None)
            for owners in t.kv_cache.get("owners", {}).values():
                for rid in owners:
                    seen.setdefault(str(rid), None)
        return list(seen)


@lru_cache(maxsize=16)
def _run_of(scenario_json: str) -> tuple[StepTrace, ...]:
    return tuple(make_engine(Scenario.from_dict(json.loads(scenario_json))).run())


def scenario_of(src: Any) -> Scenario:
    if isinstance(src, Scenario):
        return src
    if isinstance(src, str):
        try:
            return load_preset(src)
        except KeyError:
            from pagedviz.core import list_presets

            ids = ", ".join(p["id"] for p in list_presets())
            raise ValueError(f"source: no preset {src!r:.60}; presets: {ids}") from None
    if isinstance(src, Mapping):
        return Scenario.from_dict(dict(src))
    raise TypeError(f"source: expected a preset id, a Scenario or its dict (got {type(src).__name__})")


def resolve(src: Any, scenario: Any = None) -> Source:
    """The steps of `src` and the scenario they came from (None for a bare run without one)."""
    sc = scenario_of(scenario) if scenario is not None else None
    if isinstance(src, StepTrace):
        return Source((src,), sc)
    if isinstance(src, (str, Scenario, Mapping)):
        sc = scenario_of(src)
        return Source(_run_of(json.dumps(sc.to_dict(), sort_keys=True)), sc)
    if isinstance(src, Iterable):
        steps = tuple(src)
        if not steps or not all(isinstance(t, StepTrace) for t in steps):
            raise TypeError(
                "source: a run is a non-empty sequence of StepTrace (make_engine(scenario).run())"
            )
        return Source(steps, sc)
    raise TypeError(
        f"source: expected a preset id, a Scenario, its dict, a run or a StepTrace (got {type(src).__name__})"
    )


def one_step(
    src: Any, n: int | None, scenario: Any = None, prev: StepTrace | None = None
) -> tuple[StepTrace, StepTrace | None, Source]:
    """(the step, the step before it or None, the source): a StepTrace as it is (with `prev` as
    given), else step `n` of the run (1 when not given)."""
    s = resolve(src, scenario)
    if isinstance(src, StepTrace):
        return src, prev, s
    t = s.step(1 if n is None else n)
    return t, (prev if prev is not None else s.prev(t)), s
