"""Replay a recording of a real vLLM 0.33 scheduler (core/recording.py) through pagedviz's
persistent batch and prepare_inputs, V1 or V2 as recorded: each recorded step's scheduler output
becomes the runner's input, and the recorded sampled tokens are the step's tokens, so the trace
shows that server's steps with that server's block ids. No vLLM needed.

An async-scheduling recording holds one line per schedule() (the engine steps that schedule a
batch), each with the output update_from_output later received for it, in the order they were
scheduled; the replay makes each line one step and runs them synchronously, so a step's inputs
hold the tokens sampled the step before, where the server's runner had placeholders filled on
the device (the page's notes say so: ASYNC_NOTE).

`agreement()` then runs pagedviz's own scheduler on the same arrivals (each request's output
length as recorded, the recorded tokens as its samples) where pagedviz models the recorded
configuration, and says up to which step the two agree or where they first differ.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pagedviz.core.config import EngineConfig, RequestSpec, Scenario
from pagedviz.core.engine import Engine
from pagedviz.core.recording import Header, Step
from pagedviz.core.replay_agreement import Agreement, Comparer
from pagedviz.core.sampler import synthetic_tokens
from pagedviz.core.scheduler import ScheduledRequest, SchedulerOutput
from pagedviz.core.trace import StepTrace

SYNTHETIC_NOTE = "a redacted recording: token ids are synthetic (the recording kept only their counts)"
SEED = 0
SPEC_NOTE = (
    "speculative decoding: each step's drafts are the server's; target_token_ids past a request's first "
    "rejected draft are not recorded (the server keeps the accepted prefix) and repeat its last token"
)
ASYNC_NOTE = (
    "async scheduling: one step per recorded step (each schedule() with the output it later received), "
    "in the order the server scheduled them, replayed synchronously: a step's inputs hold the tokens "
    "sampled the step before, where the server's runner filled placeholders on the device"
)


class ReplayError(ValueError):
    """A recording pagedviz cannot replay (names the step and what is wrong)."""


def _prompt(req_id: str, ids: list[int] | int, vocab: int) -> np.ndarray:
    if isinstance(ids, int):  # redacted: synthetic ids, fixed by the request id and position
        return synthetic_tokens(SEED, [req_id] * ids, np.arange(ids), vocab)
    return np.asarray(ids, dtype=np.int32)


@dataclass
class Summary:
    """What a first pass over the steps keeps: each request's arrival (and its step), the tokens it
    produced, which finished, the number of steps. Small: no step is kept."""

    arrivals: dict[str, tuple[Any, int]] = field(default_factory=dict)
    produced: dict[str, int] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    num_steps: int = 0


def summarise(steps: Iterable[Step]) -> Summary:
    s = Summary()
    for step in steps:
        s.num_steps = step.step
        for a in step.arrivals:
            s.arrivals[a.id] = (a, step.step)
        for rid, toks in (step.sampled or {}).items():
            s.produced[rid] = s.produced.get(rid, 0) + (toks if isinstance(toks, int) else len(toks))
        s.finished.update(step.finished)
    return s


def scenario_of(header: Header, steps: Iterable[Step], for_agreement: bool = False) -> Scenario:
    return scenario_from(header, summarise(steps), for_agreement)


def scenario_from(header: Header, summary: Summary, for_agreement: bool = False) -> Scenario:
    """A pagedviz scenario with the recorded configuration and arrivals (arrival step: the step
    whose schedule() first saw the request). `for_agreement`: each request's max_tokens is the
    number of tokens it produced in the recording when it finished there."""
    vocab = header.vocab_size or 32000
    specs = []
    for rid, (a, step) in summary.arrivals.items():
        produced = summary.produced.get(rid, 1)
        max_tokens = a.max_tokens or max(1, produced)
        if for_agreement and rid in summary.finished:
            max_tokens = max(1, produced)
        ids = _prompt(rid, a.prompt_token_ids, vocab)
        specs.append(RequestSpec(rid, tuple(int(t) for t in ids), int(max_tokens), step))
    n = summary.num_steps
    cfg = EngineConfig(
        block_size=header.block_size,
        max_model_len=header.max_model_len,
        max_num_reqs=header.max_num_seqs,
        max_num_batched_tokens=header.max_num_batched_tokens,
        num_kv_blocks=header.num_kv_blocks,
        long_prefill_token_threshold=header.long_prefill_token_threshold,
        enable_chunked_prefill=header.enable_chunked_prefill,
        enable_prefix_caching=header.enable_prefix_caching,
        cudagraph_capture_sizes=None
        if header.cudagraph_capture_sizes is None
        else tuple(sorted(header.cudagraph_capture_sizes)),
        device="cpu",
        vocab_size=vocab,
        model=None,
        model_runner=header.runner,
        async_scheduling=header.async_scheduling and for_agreement,
        scheduler_reserve_full_isl=bool(getattr(header, "scheduler_reserve_full_isl", False)),
        watermark=float(getattr(header, "watermark", 0.0)),
        num_speculative_tokens=num_spec(header),
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
    if len(header.kv_cache_groups) != 1:
        return f"{len(header.kv_cache_groups)} KV cache groups (pagedviz models one)"
    if header.kv_cache_groups[0].block_size != header.block_size:
        return "the KV cache group's block size differs from the scheduler's"
    return None


class _Blocks:
    """The recorded server's blocks as seen from its scheduler outputs: each live request's blocks
    and the free count (the free queue's order is not recorded)."""

    def __init__(self, num_blocks: int) -> None:
        self.req_blocks: dict[str, list[int]] = {}
        self.num_free = num_blocks
        self.pool = self
        self.num_blocks = num_blocks

    def snapshot(self) -> dict[str, object]:
        ref = np.zeros(self.num_blocks, dtype=np.int64)
        for blocks in self.req_blocks.values():
            if blocks:
                np.add.at(ref, np.asarray(blocks), 1)
        free = np.flatnonzero(ref == 0)
        return {
            "free_block_queue": free.tolist(),
            "ref_cnt": ref.tolist(),
            "block_hash": {},
            "num_free_blocks": self.num_free,
            "free_queue_order": "not recorded (blocks in id order)",
        }


class RecordedScheduler:
    """Stands in for pagedviz's scheduler: each schedule() is the next recorded step."""

    def __init__(self, header: Header, steps: Iterator[Step], vocab: int) -> None:
        self.header = header
        self.steps = steps
        self.vocab = vocab
        self.kv = _Blocks(header.num_kv_blocks)
        self.tokens: dict[str, list[int]] = {}
        self.num_prompt: dict[str, int] = {}
        self.live: set[str] = set()
        self.current: Step | None = None
        self.recorded: dict[int, Step] = {}
        self._next: Step | None = next(self.steps, None)
        self.problems: list[str] = []
        self.done_ids: set[str] = set()

    @property
    def has_unfinished(self) -> bool:
        return self._next is not None

    def schedule(self, step_no: int) -> SchedulerOutput:
        s = self._next
        if s is None:
            raise ReplayError(f"step {step_no}: the recording has ended")
        self._next = next(self.steps, None)
        self.current = s
        for a in s.arrivals:
            ids = _prompt(a.id, a.prompt_token_ids, self.vocab)
            self.tokens[a.id] = ids.tolist()
            self.num_prompt[a.id] = len(ids)
        for rid in s.finished:  # nothing of a finished request is kept (a long recording's memory)
            self.live.discard(rid)
            self.kv.req_blocks.pop(rid, None)
            self.tokens.pop(rid, None)
            self.num_prompt.pop(rid, None)
        for rid in s.preempted:
            self.kv.req_blocks.pop(rid, None)
        new = {n.id: n for n in s.new}
        cached = {c.id: c for c in s.cached}
        out = SchedulerOutput(step=step_no, runner=self.header.runner)
        for rid, num in s.num_scheduled_tokens.items():
            if rid in new:
                n = new[rid]
                if rid not in self.tokens:  # no arrival line: the new request's prompt
                    ids = _prompt(rid, n.prompt_token_ids, self.vocab)
                    self.tokens[rid] = ids.tolist()
                    self.num_prompt[rid] = len(ids)
                blocks = list(n.block_ids[0]) if n.block_ids else []
                kind = "resumed" if rid in self.live else "new"  # V2: resumed requests travel as new
                self.kv.req_blocks[rid] = blocks
                sr = ScheduledRequest(
                    rid,
                    kind,
                    n.num_computed_tokens,
                    num,
                    self.num_prompt[rid],
                    np.asarray(self.tokens[rid], dtype=np.int32),
                    blocks,
                    list(blocks),
                )
            elif rid in cached:
                c = cached[rid]
                added = list(c.new_block_ids[0]) if c.new_block_ids else []
                if c.resumed:
                    blocks = added
                    kind = "resumed"
                else:
                    blocks = self.kv.req_blocks.get(rid, []) + added
                    kind = "running"
                self.kv.req_blocks[rid] = blocks
                sr = ScheduledRequest(
                    rid,
                    kind,
                    c.num_computed_tokens,
                    num,
                    self.num_prompt.get(rid, 0),
                    np.asarray(self.tokens.get(rid, []), dtype=np.int32),
                    list(blocks),
                    added,
                )
            else:
                raise ReplayError(f"step {s.step}: {rid!r} is scheduled but neither new nor cached")
            spec = s.spec_tokens.get(rid)
            if isinstance(spec, list):
                sr.spec_token_ids = list(spec)
            out.scheduled.append(sr)
            self.live.add(rid)
        out.preempted_req_ids = list(s.preempted)
        out.finished_req_ids = list(s.finished)
        scheduled = set(s.num_scheduled_tokens)
        out.waiting_req_ids = [
            r for r in self.tokens if r not in scheduled and r not in self.done_ids and r not in s.finished
        ]
        self.kv.num_free = s.num_free_blocks
        return out

    def sampled_for(self, req_ids: list[str], v: dict[str, Any]) -> np.ndarray | None:
        """The recorded token of each logits row (None: a redacted recording, tokens are
        synthetic). With drafts a request has num_sampled_tokens rows (its drafts' and the bonus
        row): its recorded tokens (the accepted drafts, then the recovered or bonus token) fill
        them from the first, and the last recorded token the rest, so that greedy verification
        accepts exactly the drafts the server accepted (the token at the first rejected draft's
        row is the one the server sampled there, which differs from that draft)."""
        s = self.current
        assert s is not None
        if self.header.redacted:
            return None
        got = s.sampled or {}
        per_req = [got[r] if isinstance(got.get(r), list) and got[r] else [0] for r in req_ids]
        if "num_sampled_tokens" not in v:
            return np.array([toks[0] for toks in per_req], dtype=np.int32)
        rows = v["num_sampled_tokens"].tolist()
        return np.array(
            [t for toks, n in zip(per_req, rows) for t in (toks + toks[-1:] * n)[:n]], dtype=np.int32
        )

    def update_from_spec_output(
        self, out: SchedulerOutput, generated: dict[str, list[int]], rejected: dict[str, int]
    ) -> None:
        """The tokens each request generated this step (its accepted drafts and one more)."""
        s = self.current
        assert s is not None
        if s.sampled is not None and set(generated) != set(s.sampled):
            self.problems.append(
                f"step {out.step}: pagedviz's runner samples for {sorted(generated)}, the recording for "
                f"{sorted(s.sampled)}"
            )
        for rid, toks in generated.items():
            self.tokens.setdefault(rid, []).extend(int(t) for t in toks)
        for rid in s.finished:
            self.done_ids.add(rid)

    def next_drafts(self) -> dict[str, list[int]]:
        """The drafts the next recorded step schedules (what the drafter proposed after this one)."""
        nxt = self._next
        if nxt is None:
            return {}
        return {r: list(t) for r, t in nxt.spec_tokens.items() if isinstance(t, list)}

    def update_from_output(self, out: SchedulerOutput, sampled: dict[str, int]) -> None:
        s = self.current
        assert s is not None
        recorded = set(s.sampled or {})
        if s.sampled is not None and set(sampled) != recorded:
            self.problems.append(
                f"step {out.step}: pagedviz's runner samples for {sorted(sampled)}, the recording for "
                f"{sorted(recorded)}"
            )
        for rid, tok in sampled.items():
            self.tokens.setdefault(rid, []).append(int(tok))
        for rid in s.finished:
            self.done_ids.add(rid)


class ReplayEngine(Engine):
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
        if h.async_scheduling:
            notes.append(ASYNC_NOTE)
        if h.redacted:
            notes.append(SYNTHETIC_NOTE)
        if num_spec(h):
            notes.append(SPEC_NOTE)
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
