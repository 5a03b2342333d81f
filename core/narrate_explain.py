"""`explain()`: one entry of one array, with this step's numbers substituted into its formula (what
a predict-then-reveal check shows for a wrong answer, and what the stage sentences work through).
The formulas are each runner's: narrate_v1_explain.py (V1, nanovllm, ascend) and
narrate_v2_explain.py (Model Runner V2, which falls back on V1's where they agree)."""

from __future__ import annotations

import numpy as np

from pagedviz.core.narrate_common import Text, en_zh
from pagedviz.core.narrate_facts import Facts
from pagedviz.core.narrate_v1_explain import V1_EXPLAIN
from pagedviz.core.narrate_v2_explain import V2_EXPLAIN
from pagedviz.core.trace import StepTrace


def explain(t: StepTrace, name: str, index: int) -> Text | None:
    """One entry of one array, with this step's numbers substituted into its formula;
    None if the step has no such array or entry (index counts into the flattened array)."""
    entry = t.array_entries.get(name)
    if entry is None:
        return None
    arr = entry.value
    if not 0 <= index < arr.size:
        return None
    f = Facts(t)
    fn = V1_EXPLAIN.get(name)
    if f.v2:  # Model Runner V2's formulas read through idx_mapping (narrate_v2_explain.py)
        fn = V2_EXPLAIN.get(name, fn)
    if fn is not None and arr.ndim == 1:
        out = fn(f, index, arr)
        if out is not None:
            return out
    flat = arr.reshape(-1)
    where = f"[{', '.join(map(str, np.unravel_index(index, arr.shape)))}]" if arr.ndim > 1 else f"[{index}]"
    formula = next((s.formula for s in t.stages if s.name == entry.stage), "")
    value = flat[index].item()
    en = f"{name}{where} = {value} (stage {entry.stage}" + (f": {formula})" if formula else ")")
    zh = f"{name}{where} = {value}（阶段 {entry.stage}" + (f"：{formula}）" if formula else "）")
    return en_zh(en, zh)
