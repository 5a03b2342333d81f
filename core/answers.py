"""Predict, then reveal: check a student's values for chosen entries of one step's array.

Each entry comes back right or wrong; a wrong one carries the expected value, a hint that points
at the rule without the value (for a page that lets the student try again before it reveals),
and its explanation: the cause told from the trace where there is one (core/answers_why.py: the
free queue's order, a preemption), else the array's formula with this entry's numbers
(core/narrate_explain.py). `values=None` asks to be shown the answers ("Just show me"): every entry
comes back with its value and explanation. Input errors name their field (CheckError), as
scenario errors do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pagedviz.core.answers_why import hint, rule, why
from pagedviz.core.trace import StepTrace

MAX_ENTRIES = 4096


class CheckError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, int | float) and math.isfinite(v):
        return float(v)
    return None


def check_entries(
    t: StepTrace, array: Any, indices: Any, values: Any, history: Sequence[StepTrace] = ()
) -> dict[str, Any]:
    """`indices` count into the flattened array; `values` are the student's, one per index.
    `history`: the run's steps (a cause may lie in an earlier one: a preemption). A wrong answer
    gets the array's `rule` once and each wrong entry its own `hint`."""
    if not isinstance(array, str) or array not in t.array_entries:
        known = ", ".join(sorted(t.array_entries)) or "none (idle step)"
        raise CheckError("array", f"step {t.step} has no array {str(array)[:60]!r}; it has {known}")
    flat = t.array_entries[array].value.reshape(-1)
    if not isinstance(indices, list) or not indices:
        raise CheckError("indices", "give a non-empty list of entry indices")
    if len(indices) > MAX_ENTRIES:
        raise CheckError("indices", f"at most {MAX_ENTRIES} entries at a time")
    show = values is None
    if show:
        values = [None] * len(indices)
    if not isinstance(values, list) or len(values) != len(indices):
        raise CheckError(
            "values", f"give one value per index ({len(indices)}), or null to be shown the answers"
        )
    for k, i in enumerate(indices):
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < flat.size:
            raise CheckError(f"indices[{k}]", f"must be an integer in 0..{flat.size - 1} (got {str(i)[:20]})")
    entries = []
    for k, (i, given) in enumerate(zip(indices, values)):
        g = _number(given)
        if g is None and not show:
            raise CheckError(f"values[{k}]", f"must be a number (got {str(given)[:20]})")
        expected = flat[i].item()
        right = g is not None and g == float(expected)
        entries.append(
            {
                "index": i,
                "given": given,
                "expected": expected,
                "correct": right,
                "hint": None if right else hint(t, array, i),
                "explanation": None if right else why(t, array, i, history),
            }
        )
    n_right = sum(e["correct"] for e in entries)
    return {
        "array": array,
        "step": t.step,
        "num_correct": n_right,
        "total": len(entries),
        "all_correct": n_right == len(entries),
        "rule": None if n_right == len(entries) else rule(t, array),
        "entries": entries,
    }
