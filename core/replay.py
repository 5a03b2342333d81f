"""Replay a recording of a real vLLM 0.33 scheduler (core/recording.py) through pagedviz's
persistent batch and prepare_inputs, V1 or V2 as recorded: each recorded step's scheduler output
becomes the runner's input, and the recorded sampled tokens are the step's tokens, so the trace
shows that server's steps with that server's block ids. No vLLM needed.

An async-scheduling recording holds one line per scheduled batch, in the order the engine ran
them; the replay runs each batch as one step (the model saw the batches in that order).

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
from pagedviz.core.registry import make_engine
from pagedviz.core.sampler import synthetic_tokens
from pagedviz.core.scheduler import ScheduledRequest, SchedulerOutput
from pagedviz.core.trace import StepTrace

SYNTHETIC_NOTE = "a redacted recording: token ids are synthetic (the recording kept only their counts)"
SEED = 0


class ReplayError(ValueError):
    """A recording pagedviz cannot replay (names the step and what is wrong)."""


def _prompt(req_id: str, ids: list[int] | int, vocab: int) -> np.ndarray:
    if isinstance(ids, int):  # redacted: synthetic ids, fixed by the request id and position
        return synthetic_tokens(SEED, [req_id] * ids, np.arange(ids), vocab)
    return np.asarray(ids, dtype=np.int32)


def scenario_of(header: Header, steps: Iterable[Step], for_agreement: bool = False) -> Scenario:
    """A pagedviz scenario with the recorded configuration and arrivals (arrival step: the step
    whose schedule() first saw the request). `for_agreement`: each request's max_tokens is the
    number of tokens it produced in the recording when it finished there."""
    vocab = header.vocab_size or 32000
    reqs: dict[str, dict[str, Any]] = {}
    produced: dict[str, int] = {}
    finished: set[str] = set()
    n = 0
    for s in steps:
        n = s.step
        for a in s.arrivals:
            reqs[a.id] = {"arrival": a, "step": s.step}
        for rid, toks in (s.sampled or {}).items():
            produced[rid] = produced.get(rid, 0) + (toks if isinstance(toks, int) else len(toks))
        finished.update(s.finished)
    specs = []
    for rid, r in reqs.items():
        a = r["arrival"]
        max_tokens = a.max_tokens or max(1, produced.get(rid, 1))
        if for_agreement and rid in finished:
            max_tokens = max(1, produced.get(rid, 1))
        ids = _prompt(rid, a.prompt_token_ids, vocab)
        specs.append(RequestSpec(rid, tuple(int(t) for t in ids), int(max_tokens), r["step"]))
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


def replay_problem(header: Header) -> str | None:
    """Why pagedviz cannot replay this recording's configuration (None: it can)."""
    if header.speculative:
        return "speculative decoding recordings are not replayed yet"
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
        for rid in s.finished:
            self.live.discard(rid)
            self.kv.req_blocks.pop(rid, None)
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

    def sampled_for(self, req_ids: list[str]) -> np.ndarray | None:
        """The recorded token of each row (None: a redacted recording, tokens are synthetic)."""
        s = self.current
        assert s is not None
        if self.header.redacted:
            return None
        got = s.sampled or {}
        return np.array(
            [got[r][0] if isinstance(got.get(r), list) and got[r] else 0 for r in req_ids], dtype=np.int32
        )

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
            self.tokens[rid].append(int(tok))
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
        rec = self.scheduler.sampled_for(self.runner.row_req_ids)  # type: ignore[attr-defined]
        if rec is None:
            return super()._forward_and_sample(v, trace, timer)
        return rec


@dataclass
class Agreement:
    """pagedviz's own scheduler against the recording."""

    modelled: bool
    agrees_up_to: int = 0
    diverges_at: int | None = None
    difference: str = ""
    reason: str = ""
    notes: list[str] = field(default_factory=list)

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


SCHEDULE_KEYS = (
    "num_scheduled_tokens",
    "new_req_ids",
    "resumed_req_ids",
    "preempted_req_ids",
    "finished_req_ids",
    "new_block_ids",
)


def _same(key: str, a: Any, b: Any) -> bool:
    if key == "num_scheduled_tokens":
        return list(a.items()) == list(b.items())
    if key in ("resumed_req_ids", "preempted_req_ids", "finished_req_ids"):
        return sorted(a) == sorted(b)
    return bool(a == b)


class _RecordedTokens(Engine):
    """pagedviz's own engine whose samples are the recorded tokens, request by request."""

    outputs: dict[str, list[int]] = {}

    def _forward_and_sample(self, v: dict[str, Any], trace: StepTrace, timer: Any) -> np.ndarray:
        tokens = super()._forward_and_sample(v, trace, timer)
        if not self.outputs:
            return tokens
        done = self.__dict__.setdefault("_cursor", {})
        for row, rid in enumerate(self.runner.row_req_ids):
            if v["discard_request_mask"][row]:
                continue
            i = done.get(rid, 0)
            toks = self.outputs.get(rid, [])
            if i < len(toks):
                tokens[row] = toks[i]
            done[rid] = i + 1
        return tokens


def agreement(header: Header, steps: list[Step], replayed: list[dict[str, Any]]) -> Agreement:
    """Run pagedviz's own scheduler on the recording's arrivals and compare each scheduled step
    with the recorded one (`replayed`: the replay trace's scheduler dicts, in order)."""
    problem = replay_problem(header)
    if problem:
        return Agreement(False, reason=problem)
    if header.kv_cache_groups[0].kind not in ("FullAttentionSpec",):
        return Agreement(
            False, reason=f"{header.kv_cache_groups[0].kind} KV cache (pagedviz models full attention)"
        )
    scenario = scenario_of(header, steps, for_agreement=True)
    outputs: dict[str, list[int]] = {}
    if not header.redacted:
        for s in steps:
            for rid, toks in (s.sampled or {}).items():
                if isinstance(toks, list):
                    outputs.setdefault(rid, []).extend(toks)
    engine = make_engine(scenario)
    if type(engine) is Engine:
        engine = _RecordedTokens(scenario)
        engine.outputs = outputs
    k = 0
    try:
        for t in engine.run():
            if t.engine_core is not None and not t.engine_core.get("scheduled", True):
                continue
            if k >= len(replayed):
                return Agreement(True, k, k + 1, "pagedviz runs on past the recording's last step")
            rec = replayed[k]
            k += 1
            for key in SCHEDULE_KEYS:
                if not _same(key, t.scheduler.get(key), rec.get(key)):
                    return Agreement(
                        True,
                        k - 1,
                        k,
                        f"{key}: recorded {rec.get(key)!r}, pagedviz {t.scheduler.get(key)!r}",
                    )
    except Exception as e:  # noqa: BLE001 (the comparison never fails the import)
        return Agreement(True, k, k + 1, f"pagedviz's scheduler stopped: {type(e).__name__}: {e}")
    if k < len(replayed):
        rest = replayed[k:]
        if all(not r.get("num_scheduled_tokens") for r in rest):
            # vLLM's engine steps once more to hand finished ids to the runner
            return Agreement(True, len(replayed))
        return Agreement(True, k, k + 1, "pagedviz's run ended before the recording's")
    return Agreement(True, k)


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


def finish_import(
    header: Header, steps: list[Step], engine: ReplayEngine, traces: list[StepTrace]
) -> Imported:
    """The replayed run with its notes (each a line the page shows) and pagedviz's comparison."""
    notes = [
        f"recorded by vLLM {header.vllm_version}'s {header.scheduler} ({header.runner.upper()} runner"
        + (", async scheduling)" if header.async_scheduling else ")")
    ]
    if header.async_scheduling:
        notes.append("async scheduling: one step per scheduled batch, in the order the engine ran them")
    if header.redacted:
        notes.append(SYNTHETIC_NOTE)
    notes.extend(engine.scheduler.problems[:3])  # type: ignore[attr-defined]
    agree = agreement(header, steps, [t.scheduler for t in traces])
    notes.insert(0, agree.text)
    scenario = replace(engine.scenario, notes=tuple(n[:400] for n in notes[:8]))
    return Imported(header, scenario, traces, agree, notes)


def import_recording(header: Header, steps: list[Step]) -> Imported:
    """Replay every recorded step (V1 or V2 as recorded), then compare pagedviz's own scheduler."""
    engine = replay_engine(header, steps)
    return finish_import(header, steps, engine, list(engine.run()))
