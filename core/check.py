"""Predict, then reveal: check a student's values for chosen entries of one step's array.

Each entry comes back right or wrong; a wrong one carries the expected value and its
explanation, the array's formula with this entry's numbers substituted (core/narrate.explain).
Input errors name their field (CheckError), as scenario errors do.
"""

from __future__ import annotations

import math
from typing import Any

from pagedviz.core.narrate_explain import explain
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


def check_entries(t: StepTrace, array: Any, indices: Any, values: Any) -> dict[str, Any]:
    """`indices` count into the flattened array; `values` are the student's, one per index."""
    if not isinstance(array, str) or array not in t.array_entries:
        known = ", ".join(sorted(t.array_entries)) or "none (idle step)"
        raise CheckError("array", f"step {t.step} has no array {str(array)[:60]!r}; it has {known}")
    flat = t.array_entries[array].value.reshape(-1)
    if not isinstance(indices, list) or not indices:
        raise CheckError("indices", "give a non-empty list of entry indices")
    if len(indices) > MAX_ENTRIES:
        raise CheckError("indices", f"at most {MAX_ENTRIES} entries at a time")
    if not isinstance(values, list) or len(values) != len(indices):
        raise CheckError("values", f"give one value per index ({len(indices)})")
    for k, i in enumerate(indices):
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < flat.size:
            raise CheckError(f"indices[{k}]", f"must be an integer in 0..{flat.size - 1} (got {str(i)[:20]})")
    entries = []
    for k, (i, given) in enumerate(zip(indices, values)):
        g = _number(given)
        if g is None:
            raise CheckError(f"values[{k}]", f"must be a number (got {str(given)[:20]})")
        expected = flat[i].item()
        right = g == float(expected)
        entries.append(
            {
                "index": i,
                "given": given,
                "expected": expected,
                "correct": right,
                "explanation": None if right else explain(t, array, i),
            }
        )
    n_right = sum(e["correct"] for e in entries)
    return {
        "array": array,
        "step": t.step,
        "num_correct": n_right,
        "total": len(entries),
        "all_correct": n_right == len(entries),
        "entries": entries,
    }
