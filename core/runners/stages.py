"""What every runner shares: the `@stage` marker that makes a method one stage of
`prepare_inputs` (its reads, writes, formula and why, and the title and explanation the page shows
in English and 简体中文), the level of each traced array, and the
engine's own source of a stage for the page."""

from __future__ import annotations

import inspect
import re
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pagedviz.core.device import StageTimer
from pagedviz.core.kv_groups import KVCacheGroup
from pagedviz.core.trace import PlanItem, Stage, StepTrace


@dataclass(frozen=True)
class StageSpec:
    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    formula: str
    why: str = ""
    # the stage runs only for runners where this holds (e.g. speculative decoding is on)
    when: Callable[[Any], bool] | None = None
    # arrays the stage leaves as views of persistent buffers (the next step overwrites them)
    views: tuple[str, ...] = ()
    # with several KV cache groups: the arrays (of reads and writes) each group has its own of,
    # named with the suffix _g{g} for g >= 1, and the formula the stage then shows
    per_group: tuple[str, ...] = ()
    group_formula: str = ""
    group_reads: tuple[str, ...] = ()  # read only when there are several groups
    # what the page shows (GET /api/stages/text): the title in English and 简体中文, and `why` in 简体中文
    title: tuple[str, str] = ("", "")
    why_zh: str = ""


def stage(
    name: str,
    reads: str,
    writes: str,
    formula: str,
    why: str = "",
    when: Callable[[Any], bool] | None = None,
    views: str = "",
    per_group: str = "",
    group_formula: str = "",
    group_reads: str = "",
    title: tuple[str, str] = ("", ""),
    why_zh: str = "",
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Mark a runner method as a stage of prepare_inputs (reads/writes/views are space-separated;
    `views`: what it leaves as views of persistent buffers, which a trace must copy; `per_group`:
    the arrays each KV cache group has its own of, and `group_formula` the formula shown when
    there are several groups; `title` (English, 简体中文) and `why_zh`: the stage's title and the
    Chinese of `why`, as the page shows them)."""

    def mark(fn: Callable[..., None]) -> Callable[..., None]:
        spec = StageSpec(
            name,
            tuple(reads.split()),
            tuple(writes.split()),
            formula,
            why,
            when,
            tuple(views.split()),
            tuple(per_group.split()),
            group_formula,
            tuple(group_reads.split()),
            title,
            why_zh,
        )
        fn.stage_spec = spec  # type: ignore[attr-defined]
        return fn

    return mark


LEVELS: dict[str, str] = {
    "num_scheduled_tokens": "request",
    "num_computed_tokens_cpu": "request",
    "num_tokens": "request",
    "cu_num_tokens": "request",
    "query_start_loc": "request",
    "seq_lens": "request",
    "logits_indices": "request",
    "discard_request_mask": "request",
    "cu_seqlens_q": "request",
    "cu_seqlens_k": "request",
    "context_lens": "request",
    "req_indices": "token",
    "arange": "token",
    "positions": "token",
    "token_indices": "token",
    "input_ids": "token",
    "block_table_indices": "token",
    "block_numbers": "token",
    "block_offsets": "token",
    "slot_mapping": "token",
    "token_ids_cpu": "system",
    "block_table": "system",
    "attn_mask": "system",
    "block_tables": "system",
    # what-if (counterfactual) token_indices for the max_model_len question of document 000
    "token_indices_whatif": "token",
    "input_ids_whatif": "token",
    "whatif_wrong": "token",
    # M-RoPE: [3, T] as vLLM keeps it (one column per token), so a table rather than a token row
    "mrope_positions": "system",
    # async scheduling: the previous step's rows and the scatter into input_ids
    "prev_sampled_token_ids": "prev_request",
    "prev_positions": "request",
    "sample_flattened_indices": "common",
    "prev_common_req_indices": "common",
    # speculative decoding: request level, then one entry per logits row ("logits")
    "num_draft_tokens": "request",
    "cu_num_draft_tokens": "request",
    "num_sampled_tokens": "request",
    "cu_num_sampled_tokens": "request",
    "target_logits_indices": "logits",
    "bonus_logits_indices": "request",
    "draft_token_ids": "logits",
}


GROUP_SUFFIX = re.compile(r"_g[1-9][0-9]*$")


def group_name(name: str, g: int) -> str:
    """The trace's name of KV cache group g's copy of an array: group 0 keeps vLLM's name, group
    g >= 1 adds the suffix _g{g} (block_table_g1, slot_mapping_g1, ...)."""
    return name if g == 0 else f"{name}_g{g}"


def base_name(name: str) -> str:
    """An array's name without its KV cache group suffix (slot_mapping_g1 -> slot_mapping)."""
    return GROUP_SUFFIX.sub("", name)


def with_groups(names: tuple[str, ...], per_group: tuple[str, ...], num_groups: int) -> list[str]:
    """`names`, each per-group one followed by its copies for groups 1 .. num_groups - 1."""
    out: list[str] = []
    for name in names:
        out.append(name)
        if name in per_group:
            out.extend(group_name(name, g) for g in range(1, num_groups))
    return out


def group_device_inputs(
    device_inputs: dict[str, object], groups: tuple[KVCacheGroup, ...], table: str
) -> dict[str, object]:
    """With several KV cache groups, what the forward reads: each group's block table and
    slot_mapping, and each group's attention metadata (its layers attend through its own table and
    slot_mapping; a sliding-window group's layers mask keys more than sliding_window - 1 positions
    before the query)."""
    names = list(device_inputs["device_inputs"])  # type: ignore[call-overload]
    for g in range(1, len(groups)):
        names += [group_name(table, g), group_name("slot_mapping", g)]
    return {
        **device_inputs,
        "device_inputs": names,
        "attn_groups": [
            {
                "group": g,
                "kind": group.kind,
                "layers": list(group.layers),
                "sliding_window": group.sliding_window,
                "block_table": group_name(table, g),
                "slot_mapping": group_name("slot_mapping", g),
            }
            for g, group in enumerate(groups)
        ],
    }


class StagedRunner:
    """The stage machinery a runner shares: the plan of the `@stage` methods named in `STAGES`
    that run for this configuration (and what each records), the driver that runs them in
    order, and the recording of what they wrote. A runner keeps the arrays of the step being
    prepared in `self.v` (by vLLM name) and the padded ones in `self.pad`."""

    STAGES: tuple[str, ...] = ()
    LEVELS: dict[str, str] = LEVELS
    v: dict[str, Any]
    pad: dict[str, tuple[int, np.ndarray | None]]
    stage_records: list[Stage]
    record_plan: list[PlanItem]
    num_groups: int = 1  # KV cache groups (config.kv_cache_groups)

    def build_stage_plan(self) -> None:
        """The stages that run, in order, and what each records; fixed for this runner. With
        several KV cache groups a stage's per-group arrays are read and written once per group
        (group g >= 1 under the suffix _g{g}, at the level of group 0's) and its formula is the
        one that shows the group."""
        self.stage_plan: list[tuple[Callable[[], None], StageSpec, Stage, list[tuple[str, str]]]] = []
        G = self.num_groups
        for name in self.STAGES:
            method = getattr(self, name)
            spec: StageSpec = method.stage_spec
            if spec.when is not None and not spec.when(self):
                continue
            reads, writes, formula = list(spec.reads), list(spec.writes), spec.formula
            if G > 1 and spec.per_group:
                reads = with_groups(spec.reads + spec.group_reads, spec.per_group, G)
                writes = with_groups(spec.writes, spec.per_group, G)
                formula = spec.group_formula or formula
            levels = [(w, self.LEVELS[base_name(w)]) for w in writes if base_name(w) in self.LEVELS]
            record = Stage(spec.name, reads, writes, formula, spec.why)
            self.stage_plan.append((method, spec, record, levels))
        self.stage_methods = tuple(method for method, _, _, _ in self.stage_plan)
        self.stage_names = tuple(spec.name for _, spec, _, _ in self.stage_plan)
        self.stage_records = [record for _, _, record, _ in self.stage_plan]
        self.record_plan = [
            (w, level, spec.name, "cpu", None)
            for _, spec, _, levels in self.stage_plan
            for w, level in levels
        ]
        self.view_names = tuple(
            view for _, spec, _, _ in self.stage_plan for view in with_groups(spec.views, spec.per_group, G)
        )

    def stage_record_plan(self) -> list[PlanItem]:
        """What the stages record (built by build_stage_plan)."""
        return list(self.record_plan)

    def stage_record_list(self) -> list[Stage]:
        """The stages' records, in order (built by build_stage_plan)."""
        return list(self.stage_records)

    def prepare_inputs(self, trace: StepTrace | None, timer: StageTimer) -> dict[str, Any]:
        """Run every stage in order; record written arrays into `trace` when it is given. Each
        stage is timed only when the timer asks for it (`per_stage`); else the whole loop is."""
        if timer.per_stage:
            timings = timer.timings
            for method, name in zip(self.stage_methods, self.stage_names):
                t0 = time.perf_counter_ns()
                method()
                timings[name] = (time.perf_counter_ns() - t0) / 1e3
        else:
            t0 = time.perf_counter_ns()
            for method in self.stage_methods:
                method()
            timer.timings["prepare_inputs"] = (time.perf_counter_ns() - t0) / 1e3
        if trace is not None:
            self.record_stages(trace)
        return self.v

    def record_stages(self, trace: StepTrace) -> None:
        """The stages that ran and the arrays each wrote, in stage order (a later stage that
        writes an array again, e.g. spec decode's logits_indices, is the one recorded). Views of
        persistent buffers are copied once: a padded array whose whole buffer is recorded too is
        handed over as that buffer's copy (the trace takes its first `valid` entries as the
        array). The runner's own state joins the same record (capture_state)."""
        trace.stages.extend(self.stage_records)
        # the step's arrays and padding are made afresh by update_states and nothing writes them
        # after prepare_inputs: the trace takes both dicts as they are (a view of a persistent
        # buffer is replaced by its copy, which reads the same)
        values, padding = self.v, self.pad
        for name, (valid, buffer) in padding.items():
            if buffer is not None:
                padding[name] = (valid, buffer.copy())
                values[name] = padding[name][1]
        for name in self.view_names:  # a buffer's copy (above) has no base: not copied again
            data = values.get(name)
            if data is not None and data.base is not None:
                values[name] = data.copy()
        self.capture_state(values)
        trace.record_all(self.record_plan, values, padding)

    def capture_state(self, values: dict[str, Any]) -> None:
        """Copies of the persistent state the trace records with the stages' arrays (a runner whose
        state nothing changes between prepare_inputs and the end of the step's forward records it
        here, in the same plan, rather than in a second pass); none by default."""


def stage_source(runner_cls: type[Any], name: str) -> str:
    """The engine's own source of one stage, read from the running code."""
    if name == "update_states":
        return textwrap.dedent(inspect.getsource(runner_cls.update_states))
    for _, fn in inspect.getmembers(runner_cls, inspect.isfunction):
        spec = getattr(fn, "stage_spec", None)
        if spec is not None and spec.name == name:
            return textwrap.dedent(inspect.getsource(fn))
    raise KeyError(name)
