"""The largest value of a config field the server accepts with the scenario's other fields as they
are: the schema publishes each field's own bound, but rules across fields (the step-trace size, the
token_ids_cpu cells, the KV cache size, ...) can refuse less. The editor's form shows these."""

from __future__ import annotations

from typing import Any

from pagedviz.core.fields import fields_of
from pagedviz.core.limits import Limits
from pagedviz.core.scenario import Scenario
from pagedviz.core.scenario_parts import EngineConfig, ScenarioError

# the config fields whose accepted maximum depends on the others (their own bound is the schema's)
CROSS_BOUNDED = ("num_kv_blocks", "max_model_len")


def own_bound(key: str, limits: Limits) -> int:
    """The field's own upper bound, as the schema publishes it: a number, or a `Limits` field."""
    hi = next(f.hi for f in fields_of(EngineConfig) if f.name == key)
    return int(getattr(limits, hi) if isinstance(hi, str) else hi)


def _accepted(base: dict[str, Any], key: str, value: int, limits: Limits) -> bool:
    data = {**base, "config": {**base["config"], key: value}}
    try:
        Scenario.from_dict(data, limits)
    except ScenarioError:
        return False
    return True


def accepted_maxima(scenario: Scenario, limits: Limits) -> dict[str, int]:
    """For each field of CROSS_BOUNDED: the largest value the validator accepts (every rule and
    limit, as a run would be checked), the scenario's other fields as they are. Acceptance only
    shrinks as these values grow past a valid scenario's own, so a bisection finds the edge."""
    base = scenario.to_dict()
    out = {}
    for key in CROSS_BOUNDED:
        lo = int(getattr(scenario.config, key))  # accepted: the scenario is valid
        hi = own_bound(key, limits)
        if _accepted(base, key, hi, limits):
            out[f"config.{key}"] = hi
            continue
        while hi - lo > 1:  # lo accepted, hi refused
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if _accepted(base, key, mid, limits) else (lo, mid)
        out[f"config.{key}"] = lo
    return out
