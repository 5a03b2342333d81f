"""pagedviz's own scheduler against a recording of vLLM's (core/replay.py): run on the recording's
arrivals, each request's output length as recorded and the recorded tokens as its samples, and
compared with each replayed step as the replay makes it (nothing of the recording is kept but the
tokens not yet sampled). A recording that stops while requests still run (the server was stopped)
agrees up to its last step. It says "agrees with the recording up to step N" or "diverges at step k:"
with the first difference (scheduled tokens, new, resumed, preempted or finished requests, new
block ids, every scheduled request's block ids per KV cache group: a sliding window's dropped
blocks are the null block 0 in both). Under async scheduling only the steps that schedule a batch
are compared."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pagedviz.core.engine import PagedvizEngine
from pagedviz.core.recording import Header, Step
from pagedviz.core.replay_groups import groups_problem
from pagedviz.core.scenario import Scenario
from pagedviz.core.scheduler_output import SchedulerOutput
from pagedviz.core.trace import StepTrace

SCHEDULE_KEYS = (
    "num_scheduled_tokens",
    "new_req_ids",
    "resumed_req_ids",
    "preempted_req_ids",
    "finished_req_ids",
    "new_block_ids",
    "block_ids",
)


@dataclass
class Agreement:
    """pagedviz's own scheduler against the recording."""

    modelled: bool
    agrees_up_to: int = 0
    diverges_at: int | None = None
    difference: str = ""
    reason: str = ""

    @property
    def text(self) -> str:
        if not self.modelled:
            return f"pagedviz's scheduler was not compared: {self.reason}"
        if self.diverges_at is None:
            return f"pagedviz's scheduler agrees with the recording up to step {self.agrees_up_to}"
        return f"pagedviz's scheduler diverges at step {self.diverges_at}: {self.difference}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "modelled": self.modelled,
            "agrees_up_to": self.agrees_up_to,
            "diverges_at": self.diverges_at,
            "difference": self.difference,
            "text": self.text,
        }


def _same(key: str, a: Any, b: Any) -> bool:
    if key == "num_scheduled_tokens":
        return list((a or {}).items()) == list((b or {}).items())
    if key in ("resumed_req_ids", "preempted_req_ids", "finished_req_ids"):
        return sorted(a or []) == sorted(b or [])
    return bool(a == b)


class _RecordedTokens(PagedvizEngine):
    """pagedviz's own engine whose samples are the recorded tokens, request by request (its own
    synthetic ones past what the recording has, or for a redacted recording)."""

    outputs: dict[str, list[int]]
    cursor: dict[str, int]

    def _forward_and_sample(self, v: dict[str, Any], trace: StepTrace, timer: Any) -> np.ndarray:
        # the recorded token of each row that samples; the synthetic ones are made only when some
        # row has none (the rows that do not sample keep theirs: the runner discards them)
        discard = v["discard_request_mask"].tolist()
        recorded: list[int | None] = []
        for rid, skip in zip(self.runner.row_req_ids, discard):
            if skip:
                recorded.append(None)
                continue
            i = self.cursor.get(rid, 0)
            toks = self.outputs.get(rid)
            recorded.append(toks[i] if toks is not None and i < len(toks) else None)
            self.cursor[rid] = i + 1
        if self.model is None and len(recorded) == len(v["logits_indices"]) and None not in recorded:
            return np.array(recorded, dtype=np.int32)
        tokens = super()._forward_and_sample(v, trace, timer)
        for row, tok in enumerate(recorded):
            if tok is not None:
                tokens[row] = tok
        return tokens


class Comparer:
    """Steps pagedviz's engine alongside the replay (`feed` once per replayed step)."""

    def __init__(self, header: Header, scenario: Scenario) -> None:
        self.k = 0
        self.done: Agreement | None = None
        self.trailing_empty = True  # recorded steps after pagedviz's run ended, all empty so far
        self.ended_at: int | None = None
        self.engine: _RecordedTokens | None = None
        problem = groups_problem(header)
        if problem:
            self.done = Agreement(False, reason=problem)
            return
        retention = (header.model_extra or {}).get("prefix_cache_retention_interval", 0)
        if retention != 0 and header.enable_prefix_caching:
            self.done = Agreement(
                False,
                reason=f"prefix_cache_retention_interval {retention}: pagedviz's scheduler caches a "
                "sliding window's blocks as vLLM's default 0 does",
            )
            return
        if (header.speculative or {}).get("num_speculative_tokens"):
            method = header.speculative.get("method", "") if header.speculative else ""
            self.done = Agreement(
                False,
                reason=f"speculative decoding: the drafts are the server's {method} drafter's, "
                "which pagedviz's scheduler does not run",
            )
            return
        self.redacted = header.redacted
        # its steps uncaptured, not copied to a device: only each schedule() is compared
        engine = _RecordedTokens(scenario, capture=False)
        engine.outputs, engine.cursor = {}, {}
        engine.runner.copy_to_device = lambda timer: True  # type: ignore[method-assign]
        schedule = engine.scheduler.schedule
        self.last: list[SchedulerOutput] = []

        def keep(step: int) -> SchedulerOutput:
            self.last[:] = [schedule(step)]
            return self.last[0]

        engine.scheduler.schedule = keep  # type: ignore[method-assign]
        self.engine = engine
        self.steps: Iterator[StepTrace] = engine.run()

    def _next_scheduled(self) -> dict[str, Any] | None:
        """The scheduler output of pagedviz's next step that scheduled, as the trace has it."""
        for t in self.steps:
            if t.engine_core is not None and not t.engine_core.get("scheduled", True):
                continue
            return self.last[0].to_dict()
        return None

    def feed(self, step: Step | None, replayed: dict[str, Any]) -> None:
        if self.done is not None or self.engine is None or step is None:
            return
        if not self.redacted:
            for rid, toks in (step.sampled or {}).items():
                if isinstance(toks, list):
                    self.engine.outputs.setdefault(rid, []).extend(toks)
        self.k += 1
        if self.ended_at is not None:
            # vLLM's engine steps once more to hand finished ids to the runner: empty steps only
            if replayed.get("num_scheduled_tokens"):
                self.done = Agreement(
                    True, self.ended_at, self.k, "pagedviz's run ended before the recording's"
                )
            return
        try:
            t = self._next_scheduled()
        except Exception as e:  # noqa: BLE001 (the comparison never fails the import)
            self.done = Agreement(
                True, self.k - 1, self.k, f"pagedviz's scheduler stopped: {type(e).__name__}: {e}"
            )
            return
        if t is None:
            self.ended_at = self.k - 1
            self.feed_ended(replayed)
            return
        for key in SCHEDULE_KEYS:
            if not _same(key, t.get(key), replayed.get(key)):
                self.done = Agreement(
                    True,
                    self.k - 1,
                    self.k,
                    f"{key}: recorded {replayed.get(key)!r}, pagedviz {t.get(key)!r}",
                )
                return
        for rid in step.finished:  # both have finished it: its tokens are no longer needed
            self.engine.outputs.pop(rid, None)
            self.engine.cursor.pop(rid, None)

    def feed_ended(self, replayed: dict[str, Any]) -> None:
        if replayed.get("num_scheduled_tokens"):
            self.done = Agreement(True, self.k - 1, self.k, "pagedviz's run ended before the recording's")

    def result(self) -> Agreement:
        if self.done is not None:
            return self.done
        # pagedviz may have steps left where the recording stops (a server stopped while requests ran)
        self.done = Agreement(True, self.k)
        return self.done
