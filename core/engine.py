"""One engine step (DESIGN.md §2): schedule -> update_states -> prepare_inputs -> forward ->
sample -> update the scheduler. `Engine.step()` returns the step's StepTrace; `run()` yields them
until every request has finished or `max_steps` is reached (then `truncated` is True)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from pagedviz.core.config import DENSE_CHECK_MAX_TOKENS, Scenario
from pagedviz.core.device import StageTimer, resolve_device
from pagedviz.core.model import ForwardInputs, TinyTransformer
from pagedviz.core.registry import register_flavor
from pagedviz.core.runner import ModelRunner
from pagedviz.core.sampler import synthetic_tokens
from pagedviz.core.scheduler import Scheduler
from pagedviz.core.trace import StepTrace


class RunTooLongError(RuntimeError):
    def __init__(self, steps_done: int) -> None:
        self.steps_done = steps_done
        super().__init__(f"the run passed its time budget after {steps_done} steps")


@register_flavor("vllm")
class Engine:
    """The vllm flavour's engine: runs a Scenario step by step; `capture=False` skips recording
    arrays (for timing). Other flavours subclass it and register themselves (core/registry.py);
    `make_engine(scenario)` picks the scenario's."""

    flavor = "vllm"
    runner_cls: type[ModelRunner] = ModelRunner

    def __init__(self, scenario: Scenario, capture: bool = True) -> None:
        if scenario.flavor != self.flavor:
            raise ValueError(
                f"{type(self).__name__} runs the {self.flavor!r} flavour, not {scenario.flavor!r}: "
                "use make_engine(scenario)"
            )
        self.scenario = scenario
        self.capture = capture
        cfg = scenario.config
        self.device = resolve_device(cfg.device)
        self.step_no = 0
        self.truncated = False
        self.model: TinyTransformer | None = None
        if cfg.model is not None:
            self.model = TinyTransformer(
                cfg.model, scenario.seed, cfg.num_kv_blocks, cfg.block_size, self.device
            )
        # a hook for demonstrations and tests: may alter the device inputs before the forward
        self.before_forward: Callable[[ForwardInputs], None] | None = None
        self._setup()

    def _setup(self) -> None:
        cfg = self.scenario.config
        self.scheduler = Scheduler(cfg, self.scenario.requests)
        self.runner = self.runner_cls(cfg, self.device)

    @classmethod
    def stages_from(cls) -> type:
        """The class whose `@stage` methods (and `update_states`, if any) make the flavour's inputs."""
        return cls.runner_cls

    @property
    def done(self) -> bool:
        return not self.scheduler.has_unfinished

    def run(self, deadline: float | None = None) -> Iterator[StepTrace]:
        """Steps until every request finished or max_steps. With a `deadline` (time.monotonic()),
        a step that would end past it is not started: when less time is left than the longest
        step so far took, it raises RunTooLongError rather than run on."""
        longest = 0.0
        while not self.done:
            if self.step_no >= self.scenario.max_steps:
                self.truncated = True
                return
            start = time.monotonic()
            if deadline is not None and start + longest > deadline:
                raise RunTooLongError(self.step_no)
            trace = self.step()
            longest = max(longest, time.monotonic() - start)
            yield trace

    def step(self) -> StepTrace:
        self.step_no += 1
        timer = StageTimer(self.device)
        out = self.scheduler.schedule(self.step_no)
        trace = StepTrace(step=self.step_no, idle=not out.scheduled)
        with timer.cpu("update_states"):
            moves = self.runner.update_states(out)
        v = self.runner.prepare_inputs(trace if self.capture else None, timer)
        sampled: dict[str, int] = {}
        if out.scheduled:
            agrees = self.runner.copy_to_device(timer)
            trace.forward = {
                "device": str(self.device),
                # what the forward read: copies of the CPU arrays, and slot_mapping computed on the device
                "device_inputs": ["input_ids", "positions", "query_start_loc", "seq_lens", "block_table"],
                "slot_mapping_source": "device (from the device block table)",
                "slot_mapping_device_matches_cpu": agrees,
            }
            sampled = self._forward_and_sample(v, trace, timer)
        else:
            trace.forward = {"device": str(self.device)}
        if self.capture:
            self.runner.record_batch(trace)
            trace.scheduler = out.to_dict()
            trace.batch = {"req_ids": self.runner.input_batch.req_ids, "moves": moves}
            trace.scalars = dict(v["scalars"])
            trace.kv_cache = self._kv_view()
        self.scheduler.update_from_output(out, sampled)
        self.runner.append_sampled(sampled)
        trace.sampled_token_ids = sampled
        trace.timing_us = timer.collect(tuple(spec.name for _, spec, _, _ in self.runner.stage_plan))
        return trace

    def _forward_and_sample(self, v: dict[str, Any], trace: StepTrace, timer: StageTimer) -> dict[str, int]:
        r = self.runner
        n, T = v["num_reqs"], v["T"]
        keep = ~v["discard_request_mask"]
        req_ids = r.input_batch.req_ids
        keep_ids = [rid for rid, k in zip(req_ids, keep) if k]
        if self.model is None:
            tokens = synthetic_tokens(
                self.scenario.seed, keep_ids, v["seq_lens"][keep], self.scenario.config.vocab_size
            )
            return dict(zip(keep_ids, tokens.tolist()))
        inp = ForwardInputs(
            input_ids=r.input_ids[:T],
            positions=r.positions[:T],
            slot_mapping=r.slot_mapping[:T],
            block_table=r.block_table[:n],
            seq_lens=r.seq_lens[:n],
            query_start_loc=r.query_start_loc[: n + 1],
            logits_indices=torch.from_numpy(v["logits_indices"]).to(self.device),
        )
        if self.before_forward is not None:
            self.before_forward(inp)
        with torch.no_grad():
            with timer.dev("forward"):
                hidden, logits = self.model.forward(inp)
            with timer.dev("sample"):
                tokens = logits.argmax(-1).cpu().numpy()
            if int(v["seq_lens"].sum()) <= DENSE_CHECK_MAX_TOKENS:
                with timer.dev("dense_reference"):
                    trace.forward["paged_vs_dense_max_abs_diff"] = self._dense_diff(hidden, v)
            else:
                trace.forward["dense_check"] = f"skipped: over {DENSE_CHECK_MAX_TOKENS} tokens of context"
        return {rid: int(t) for rid, t, k in zip(req_ids, tokens, keep) if k}

    def _dense_diff(self, hidden: torch.Tensor, v: dict[str, Any]) -> float:
        assert self.model is not None
        ib = self.runner.input_batch
        seqs = [
            (ib.token_ids_cpu[row, : v["seq_lens"][row]], int(ib.num_computed_tokens_cpu[row]))
            for row in range(v["num_reqs"])
        ]
        return self.model.max_dense_diff(hidden, seqs, v["query_start_loc"])

    def _kv_view(self) -> dict[str, Any]:
        kv = self.scheduler.kv
        return self.kv_view(kv.pool.snapshot(), kv.req_blocks, kv.pool.num_blocks)

    def kv_view(
        self, snapshot: dict[str, Any], block_lists: dict[str, list[int]], num_blocks: int
    ) -> dict[str, Any]:
        """The pool's snapshot plus each block's owners and, with a model, its written slots."""
        owners: dict[str, list[str]] = {}
        for req_id, blocks in block_lists.items():
            for b in blocks:
                owners.setdefault(str(b), []).append(req_id)
        view = {
            **snapshot,
            "owners": owners,
            "num_blocks": num_blocks,
            "block_size": self.scenario.config.block_size,
        }
        if self.model is not None:
            view["written_slots"] = self.model.written_slots().cpu().tolist()
        return view
