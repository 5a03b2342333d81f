"""Replay a recording of a real vLLM 0.33 scheduler (core/recording.py) through pagedviz's
persistent batch and prepare_inputs, V1 or V2 as recorded: each recorded step's scheduler output
becomes the runner's input, and the recorded sampled tokens are the step's tokens, so the trace
shows that server's steps with that server's block ids. No vLLM needed.

An async-scheduling recording holds one line per schedule() (the engine steps that schedule a
batch), each with the output update_from_output later received for it, in the order they were
scheduled; the replay makes each line one step and runs them synchronously, so a step's inputs
hold the tokens sampled the step before, where the server's runner had placeholders filled on
the device (the page's notes say so: ASYNC_NOTE).

The recorded scheduler is core/replay_scheduler.py. `agreement()` then runs pagedviz's own
scheduler on the same arrivals (each request's output length as recorded, the recorded tokens as
its samples) where pagedviz models the recorded configuration, and says up to which step the two
agree or where they first differ.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pagedviz.core.engine import PagedvizEngine
from pagedviz.core.recording import Cut, Header, Step
from pagedviz.core.replay_agreement import Agreement, Comparer
from pagedviz.core.replay_groups import groups_problem, recorded_layers
from pagedviz.core.replay_requests import request_specs, unmodelled
from pagedviz.core.replay_scheduler import SEED, RecordedScheduler, ReplayError
from pagedviz.core.scenario import Scenario
from pagedviz.core.scenario_parts import EngineConfig
from pagedviz.core.scheduler_output import SchedulerOutput
from pagedviz.core.trace import StepTrace
from pagedviz.core.vllm_settings import engine_fields

SYNTHETIC_NOTE = "a redacted recording: token ids are synthetic (the recording kept only their counts)"
SPEC_NOTE = (
    "speculative decoding: each step's drafts are the server's; target_token_ids past a request's first "
    "rejected draft are not recorded (the server keeps the accepted prefix) and repeat its last token"
)
ASYNC_NOTE = (
    "async scheduling: one step per recorded step (each schedule() with the output it later received), "
    "in the order the server scheduled them, replayed synchronously: a step's inputs hold the tokens "
    "sampled the step before, where the server's runner filled placeholders on the device"
)


@dataclass
class Summary:
    """What a first pass over the steps keeps: each request's arrival (and its step), the tokens it
    produced, which finished, the number of steps. Small: no step is kept."""

    arrivals: dict[str, tuple[Any, int]] = field(default_factory=dict)
    produced: dict[str, int] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    num_steps: int = 0
    cut: Cut | None = None  # the recording's last line, cut mid-write


def add_step(s: Summary, step: Step) -> None:
    """One more step into the summary (a live run's recording, which grows, is summarised so)."""
    s.num_steps = step.step
    for a in step.arrivals:
        s.arrivals[a.id] = (a, step.step)
    for rid, toks in (step.sampled or {}).items():
        s.produced[rid] = s.produced.get(rid, 0) + (toks if isinstance(toks, int) else len(toks))
    s.finished.update(step.finished)


def summarise(steps: Iterable[Step]) -> Summary:
    s = Summary()
    for step in steps:
        add_step(s, step)
    s.cut = getattr(steps, "cut", None)  # known once the steps are read
    return s


def scenario_of(header: Header, steps: Iterable[Step], for_agreement: bool = False) -> Scenario:
    return scenario_from(header, summarise(steps), for_agreement)


def scenario_from(header: Header, summary: Summary, for_agreement: bool = False) -> Scenario:
    """A pagedviz scenario with the recorded configuration and arrivals (arrival step: the step
    whose schedule() first saw the request). `for_agreement`: each request's max_tokens is the
    number of tokens it produced in the recording when it finished there."""
    vocab = header.vocab_size or 32000
    arrivals = []
    for rid, (a, step) in summary.arrivals.items():
        produced = summary.produced.get(rid, 1)
        max_tokens = a.max_tokens or max(1, produced)
        if for_agreement and rid in summary.finished:
            max_tokens = max(1, produced)
        arrivals.append((a, step, int(max_tokens)))
    # n > 1: the children as their parent on the page; apart for the agreement (their lengths)
    specs = request_specs(arrivals, vocab, families=not for_agreement)
    n = summary.num_steps
    layers = recorded_layers(header)
    settings = engine_fields(header)
    # the agreement runs pagedviz's own scheduler as the server scheduled; the page replays in steps
    settings["async_scheduling"] = header.async_scheduling and for_agreement
    cfg = EngineConfig(
        **settings,
        cudagraph_capture_sizes=None
        if header.cudagraph_capture_sizes is None
        else tuple(sorted(header.cudagraph_capture_sizes)),
        device="cpu",
        vocab_size=vocab,
        model=None,
        model_runner=header.runner,
        num_speculative_tokens=num_spec(header),
        layer_types=layers.layer_types,
        sliding_window=layers.sliding_window,
    )
    return Scenario(
        name=f"recording of vLLM {header.vllm_version} ({header.scheduler})",
        flavor="vllm",
        seed=SEED,
        config=cfg,
        requests=tuple(specs),
        max_steps=max(1, n + (2 * n + 8 if for_agreement else 0)),
        title=f"a real vLLM {header.vllm_version} schedule",
    )


def num_spec(header: Header) -> int:
    """The recorded server's draft tokens per step (0: no speculative decoding)."""
    return int((header.speculative or {}).get("num_speculative_tokens", 0) or 0)


def replay_problem(header: Header) -> str | None:
    """Why pagedviz cannot replay this recording's configuration (None: it can)."""
    if num_spec(header):
        if header.async_scheduling:
            return (
                "speculative decoding with async scheduling is not replayed (the drafts of a batch "
                "reach the scheduler a step late and are not paired with their batch in the recording); "
                "record with async scheduling off (--no-async-scheduling)"
            )
        if header.runner == "v2":
            return (
                "speculative decoding on Model Runner V2 is not replayed: its drafts stay on the worker "
                "(the recording holds placeholders of -1); record with the V1 runner "
                "(VLLM_USE_V2_MODEL_RUNNER=0)"
            )
        if header.redacted:
            return (
                "a redacted recording with speculative decoding "
                "(the drafts' token ids are needed to verify them)"
            )
    return groups_problem(header)


class ReplayEngine(PagedvizEngine):
    """pagedviz's engine with the recorded scheduler and the recorded tokens."""

    def __init__(self, scenario: Scenario, header: Header, steps: Iterator[Step]) -> None:
        self._header = header
        self._steps = steps
        super().__init__(scenario)

    def _setup(self) -> None:
        cfg = self.scenario.config
        self.engine_core = None
        self.scheduler = RecordedScheduler(self._header, self._steps, cfg.vocab_size)  # type: ignore[assignment]
        runner_cls: type[Any] = self.runner_cls
        if cfg.model_runner == "v2":
            from pagedviz.core.runners.v2 import ModelRunnerV2

            runner_cls = ModelRunnerV2
        self.runner = runner_cls(cfg, self.device, mrope={})

    @property
    def done(self) -> bool:
        return not self.scheduler.has_unfinished

    def _forward_and_sample(self, v: dict[str, Any], trace: StepTrace, timer: Any) -> np.ndarray:
        rec = self.scheduler.sampled_for(self.runner.row_req_ids, v)  # type: ignore[attr-defined]
        if rec is None:
            return super()._forward_and_sample(v, trace, timer)
        return rec

    def _update_with_drafts(
        self, out: SchedulerOutput, generated: dict[str, list[int]], trace: StepTrace
    ) -> None:
        """As the engine's: roll back the rejected drafts and append the generated tokens; the
        next step's drafts are the recording's (the server's drafter proposed them)."""
        drafts = {s.req_id: len(s.spec_token_ids) for s in out.scheduled}
        rejected = {rid: drafts[rid] - (len(toks) - 1) for rid, toks in generated.items() if drafts[rid]}
        self.scheduler.update_from_spec_output(out, generated, rejected)  # type: ignore[call-arg]
        self.runner.append_generated(generated)  # type: ignore[attr-defined]
        proposed = self.scheduler.next_drafts()  # type: ignore[attr-defined]
        trace.forward["generated_token_ids"] = {rid: list(map(int, t)) for rid, t in generated.items()}
        trace.forward["num_rejected_tokens"] = rejected
        trace.forward["proposed_draft_token_ids"] = {r: d for r, d in proposed.items() if r in generated}


@dataclass
class Imported:
    """An imported recording: the scenario it amounts to, the replayed steps, the comparison."""

    header: Header
    scenario: Scenario
    traces: list[StepTrace]
    agreement: Agreement
    notes: list[str]


def replay_engine(header: Header, steps: list[Step]) -> ReplayEngine:
    """The engine that replays the recording (raises ReplayError naming what it cannot replay)."""
    problem = replay_problem(header)
    if problem:
        raise ReplayError(f"line 1: {problem}")
    return ReplayEngine(scenario_of(header, steps), header, iter(steps))


class StreamingImport:
    """A recording replayed step by step, read twice and never held whole: `first` (an iterable
    of its steps, or their Summary made before) gives the arrivals and each request's output
    length; `second` is replayed, and
    pagedviz's own scheduler is compared with each replayed step as it comes."""

    def __init__(self, header: Header, first: Iterable[Step] | Summary, second: Iterator[Step]) -> None:
        problem = replay_problem(header)
        if problem:
            raise ReplayError(f"line 1: {problem}")
        self.header = header
        summary = first if isinstance(first, Summary) else summarise(first)
        self.num_steps = summary.num_steps
        self.arrivals = summary.arrivals
        self.cut = summary.cut
        self.scenario = scenario_from(header, summary)
        self.engine = ReplayEngine(self.scenario, header, second)
        self.comparer = Comparer(header, scenario_from(header, summary, for_agreement=True))

    def run(self, budget: float | None = None) -> Iterator[StepTrace]:
        rec = self.engine.scheduler
        for t in self.engine.run(budget=budget):
            self.comparer.feed(rec.current, t.scheduler)  # type: ignore[attr-defined]
            yield t

    def notes(self) -> list[str]:
        h = self.header
        notes = [
            self.comparer.result().text,
            f"recorded by vLLM {h.vllm_version}'s {h.scheduler} ({h.runner.upper()} runner"
            + (", async scheduling)" if h.async_scheduling else ")"),
        ]
        if self.cut is not None:
            notes.append(self.cut.text())
        if h.async_scheduling:
            notes.append(ASYNC_NOTE)
        if h.redacted:
            notes.append(SYNTHETIC_NOTE)
        if num_spec(h):
            notes.append(SPEC_NOTE)
        stand_in = recorded_layers(h).note
        if stand_in:
            notes.append(stand_in)
        notes.extend(unmodelled(h, [a for a, _ in self.arrivals.values()]))
        notes.extend(self.engine.scheduler.problems[:3])  # type: ignore[attr-defined]
        return notes

    def imported(self, traces: list[StepTrace]) -> Imported:
        notes = self.notes()
        scenario = replace(self.scenario, notes=tuple(n[:400] for n in notes[:8]))
        return Imported(self.header, scenario, traces, self.comparer.result(), notes)


def import_recording(header: Header, steps: list[Step]) -> Imported:
    """Replay every recorded step (V1 or V2 as recorded), then compare pagedviz's own scheduler."""
    imp = StreamingImport(header, steps, iter(steps))
    return imp.imported(list(imp.run()))
