"""One engine step (docs/architecture.md): schedule -> update_states -> prepare_inputs -> forward ->
sample -> update the scheduler. `PagedvizEngine.step()` returns the step's StepTrace; `run()` yields them
until every request has finished or `max_steps` is reached (then `truncated` is True). With
`async_scheduling` the engine core's batch queue (core/engine_core.py) decides whether a step
schedules and whose output its update_from_output takes. Speculative decoding's verification and
drafts are core/engine_drafts.py's."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from pagedviz.core.async_scheduler import AsyncScheduler
from pagedviz.core.device import StageTimer, resolve_device
from pagedviz.core.engine_core import BatchQueueLoop, QueuedBatch
from pagedviz.core.engine_drafts import DraftSteps
from pagedviz.core.flavor_table import register_flavor
from pagedviz.core.kv_cache import usable_blocks
from pagedviz.core.limits import DENSE_CHECK_MAX_TOKENS
from pagedviz.core.parallel_sampling import family, scheduled_specs
from pagedviz.core.runners.mrope import MRope, mrope_prompt_positions
from pagedviz.core.runners.v1 import ModelRunner
from pagedviz.core.runners.v2 import ModelRunnerV2
from pagedviz.core.sampler import gumbel_noise, synthetic_tokens
from pagedviz.core.scenario import Scenario
from pagedviz.core.scheduler import Scheduler
from pagedviz.core.scheduler_output import SchedulerOutput
from pagedviz.core.tiny_model import ForwardInputs, TinyTransformer
from pagedviz.core.trace import StepTrace


class RunTooLongError(RuntimeError):
    def __init__(self, steps_done: int) -> None:
        self.steps_done = steps_done
        super().__init__(f"the run passed its time budget after {steps_done} steps")


# the KV cache tensor's layout: vLLM's FlashAttention backend (and vllm-ascend) keep one tensor per
# layer; nano-vllm allocates one tensor for all layers (ModelRunner.allocate_kv_cache)
KV_LAYOUTS = {
    "vllm": "[2, num_blocks, block_size, num_kv_heads, head_size] per layer (K and V)",
    "nanovllm": "[2, num_layers, num_blocks, block_size, num_kv_heads, head_dim] (one tensor, all layers)",
}


@register_flavor("vllm")
class PagedvizEngine(DraftSteps):
    """pagedviz's own engine (a scenario's `engine: pagedviz`, the default), of the vllm flavour:
    runs a Scenario step by step; `capture=False` skips recording arrays (for timing);
    `stage_timing=True` times each stage of prepare_inputs, not only their total. Other flavours
    subclass it and register themselves (core/registry.py); so does the engine `vllm`
    (core/vllm_engine/live.py's `VllmEngine`, vLLM's own scheduler in this engine's step).
    `make_engine(scenario)` picks the scenario's.

    Also importable as `pagedviz.core.Engine`: that name is the public Python API's, kept as an
    alias of this class (`Engine` below)."""

    flavor = "vllm"
    runner_cls: type[ModelRunner] = ModelRunner

    def __init__(self, scenario: Scenario, capture: bool = True, stage_timing: bool = False) -> None:
        if scenario.flavor != self.flavor:
            raise ValueError(
                f"{type(self).__name__} runs the {self.flavor!r} flavour, not {scenario.flavor!r}: "
                "use make_engine(scenario)"
            )
        self.scenario = scenario
        self.capture = capture
        self.stage_timing = stage_timing
        cfg = scenario.config
        self.device = resolve_device(cfg.device)
        self.step_no = 0
        self.truncated = False
        # parallel sampling: each child's parent and index (`scheduler.parents`; none without n > 1)
        self.parents = family(scenario.requests)
        self.model: TinyTransformer | None = None
        if cfg.model is not None:
            self.model = TinyTransformer(
                cfg.model, scenario.seed, cfg.num_kv_blocks, cfg.block_size, self.device, cfg.kv_cache_groups
            )
        # a hook for demonstrations and tests: may alter the device inputs before the forward
        self.before_forward: Callable[[ForwardInputs], None] | None = None
        self._setup()

    def _setup(self) -> None:
        cfg = self.scenario.config
        self.engine_core: BatchQueueLoop | None = None
        if cfg.async_scheduling:
            self.scheduler = AsyncScheduler(cfg, self.scenario.requests)
            self.engine_core = BatchQueueLoop(self.scheduler)
        else:
            self.scheduler = Scheduler(cfg, self.scenario.requests)
        mrope: dict[str, MRope] = {}
        if any(r.image is not None for r in self.scenario.requests):
            specs = scheduled_specs(self.scenario.requests)  # n > 1: each child has the image
            mrope = {r.id: mrope_prompt_positions(len(r.prompt_token_ids), r.image) for r in specs}
        runner_cls: type[Any] = self.runner_cls
        if self.flavor == "vllm" and cfg.model_runner == "v2":
            runner_cls = ModelRunnerV2
        self.runner = runner_cls(cfg, self.device, mrope=mrope)

    @classmethod
    def stages_from(cls) -> type:
        """The class whose `@stage` methods (and `update_states`, if any) make the flavour's inputs."""
        return cls.runner_cls

    @property
    def v1_async(self) -> bool:
        """V1's async path: last step's sampled tokens reach this step's input_ids on the device."""
        return self.scenario.config.async_scheduling and getattr(self.runner, "runner", "v1") == "v1"

    @property
    def v2(self) -> bool:
        return getattr(self.runner, "runner", "v1") == "v2"

    @property
    def done(self) -> bool:
        if self.engine_core is not None:
            return self.engine_core.done
        return not self.scheduler.has_unfinished

    def run(self, deadline: float | None = None, *, budget: float | None = None) -> Iterator[StepTrace]:
        """Steps until every request finished or max_steps. With a `deadline` (time.monotonic()),
        a step that would end past it is not started: when less time is left than the longest
        step so far took, it raises RunTooLongError rather than run on. A `budget` (seconds) bounds
        the same way the time the run's own steps take, not counting the time between them (a
        run that shares its process with others is not charged for theirs)."""
        longest = used = 0.0
        while not self.done:
            if self.step_no >= self.scenario.max_steps:
                self.truncated = True
                return
            start = time.monotonic()
            if (deadline is not None and start + longest > deadline) or (
                budget is not None and used + longest > budget
            ):
                raise RunTooLongError(self.step_no)
            trace = self.step()
            took = time.monotonic() - start
            used += took
            longest = max(longest, took)
            yield trace

    def step(self) -> StepTrace:
        self.step_no += 1
        timer = StageTimer(self.device, per_stage=self.stage_timing)
        core = self.engine_core
        scheduled = core is None or core.schedules(self.step_no)
        # a step that does not schedule only drains the batch queue
        out = self.scheduler.schedule(self.step_no) if scheduled else SchedulerOutput(step=self.step_no)
        trace = StepTrace(step=self.step_no, idle=not out.scheduled)
        with timer.cpu("update_states"):
            moves = self.runner.update_states(out)
        v = self.runner.prepare_inputs(trace if self.capture else None, timer)
        sampled: dict[str, int] = {}
        generated: dict[str, list[int]] = {}
        if out.scheduled:
            agrees = self.runner.copy_to_device(timer)
            trace.forward = {"device": str(self.device), **self.runner.DEVICE_INPUTS}
            trace.forward["slot_mapping_device_matches_cpu"] = agrees
            if self.capture and self.v1_async:
                ids = self.runner.input_ids[: v["T"]].cpu().numpy()
                trace.record("input_ids_device", "token", ids, "prepare_input_ids", side="device")
            tokens = self._forward_and_sample(v, trace, timer)
            if self.scenario.config.num_speculative_tokens and self.v2:
                generated = self._verify_v2(v, tokens, trace)
                sampled = {rid: toks[-1] for rid, toks in generated.items()}
            elif self.scenario.config.num_speculative_tokens:
                generated = self._accept_drafts(v, tokens, trace)
                sampled = {rid: toks[-1] for rid, toks in generated.items()}
            else:
                keep = ~v["discard_request_mask"]
                req_ids = self.runner.row_req_ids
                sampled = {rid: int(t) for rid, t, k in zip(req_ids, tokens, keep) if k}
                if self.v1_async:
                    self.runner.keep_sampled_on_device(tokens, keep)
        else:
            trace.forward = {"device": str(self.device)}
        if self.capture:
            self.runner.record_batch(trace)
            trace.scheduler = out.to_dict()
            if self.parents:
                trace.scheduler["parents"] = self.parents
            trace.batch = self.runner.batch_view(moves)
            trace.scalars = dict(v["scalars"])
            trace.kv_cache = self._kv_view()
        if core is not None:
            # the runner (the device) sees its sampled tokens in order; the scheduler when the
            # batch leaves the queue
            batch = QueuedBatch(self.step_no, out, sampled) if scheduled else None
            if self.scenario.config.num_speculative_tokens and self.v2 and out.scheduled:
                batch = self._worker_drafts_v2(out, generated, trace)
            else:
                self.runner.append_sampled(sampled)
            trace.engine_core = core.end_step(self.step_no, batch)
        elif self.scenario.config.num_speculative_tokens and self.v2:
            if out.scheduled:
                self._update_with_drafts_v2(out, generated, trace)
        elif self.scenario.config.num_speculative_tokens:
            self._update_with_drafts(out, generated, trace)
        else:
            self.scheduler.update_from_output(out, sampled)
            self.runner.append_sampled(sampled)
        trace.sampled_token_ids = sampled
        trace.timing_us = timer.collect(self.runner.stage_names)
        return trace

    def _forward_and_sample(self, v: dict[str, Any], trace: StepTrace, timer: StageTimer) -> np.ndarray:
        """The greedy token at every row of logits_indices (one per request, or, with drafts,
        num_sampled_tokens per request; a child of a request with n > 1 samples at temperature 1);
        with `model: null` the synthetic sampler's token for the position after that row's token."""
        r = self.runner
        n, T = v["num_reqs"], v["T"]
        if self.model is None:
            rows = v["logits_indices"]
            ids = r.row_req_ids  # a property that builds the list: read it once, not once a row
            req_indices = v.get("req_indices")  # V1's; V2 has none: the row whose tokens hold each
            row_of = (
                req_indices[rows]
                if req_indices is not None
                else np.searchsorted(v["query_start_loc"][1:], rows, side="right")
            )
            row_req = [ids[i] for i in row_of]
            return synthetic_tokens(
                self.scenario.seed, row_req, v["positions"][rows] + 1, self.scenario.config.vocab_size
            )
        inp = ForwardInputs(
            input_ids=r.input_ids[:T],
            positions=r.positions[:T],
            slot_mapping=r.slot_mapping[:T],
            block_table=r.block_table[:n],
            seq_lens=r.seq_lens[:n],
            query_start_loc=r.query_start_loc[: n + 1],
            logits_indices=torch.from_numpy(v["logits_indices"]).to(self.device),
        )
        if getattr(r, "num_groups", 1) > 1:
            # each KV cache group's slot_mapping and block table (its layers write and read there)
            inp.group_slot_mappings = [s[:T] for s in r.group_slot_mapping]
            inp.group_block_tables = [t[:n] for t in r.group_block_table]
        if self.before_forward is not None:
            self.before_forward(inp)
        with torch.no_grad():
            with timer.dev("forward"):
                hidden, logits = self.model.forward(inp)
            with timer.dev("sample"):
                if self.parents:
                    logits = self._children_sample(logits, v)
                tokens = logits.argmax(-1).cpu().numpy()
            if int(v["seq_lens"].sum()) <= DENSE_CHECK_MAX_TOKENS:
                with timer.dev("dense_reference"):
                    trace.forward["paged_vs_dense_max_abs_diff"] = self._dense_diff(hidden, v, trace)
            else:
                trace.forward["dense_check"] = f"skipped: over {DENSE_CHECK_MAX_TOKENS} tokens of context"
        return tokens

    def _children_sample(self, logits: torch.Tensor, v: dict[str, Any]) -> torch.Tensor:
        """Parallel sampling's children sample at temperature 1 (vLLM refuses n > 1 with greedy
        sampling): Gumbel noise keyed by the seed, the child's id and the position is added to
        their logits rows (core/sampler.py); the other rows stay greedy."""
        rows = v["logits_indices"]
        req_indices = v.get("req_indices")
        row_of = (
            req_indices[rows]
            if req_indices is not None
            else np.searchsorted(v["query_start_loc"][1:], rows, side="right")
        )
        ids = self.runner.row_req_ids
        row_req = [ids[i] for i in row_of]
        child = np.array([rid in self.parents for rid in row_req], dtype=bool)
        if not child.any():
            return logits
        which = np.flatnonzero(child)
        noise = gumbel_noise(
            self.scenario.seed, [row_req[i] for i in which], v["positions"][rows[which]] + 1, logits.shape[-1]
        )
        out = logits.clone()
        pick = torch.from_numpy(which).to(logits.device)
        out[pick] += torch.from_numpy(noise).to(device=logits.device, dtype=logits.dtype)
        return out

    def _dense_diff(self, hidden: torch.Tensor, v: dict[str, Any], trace: StepTrace | None = None) -> float:
        """paged vs dense after the final norm; with several KV cache groups also after each layer
        (trace.forward's paged_vs_dense_max_abs_diff_per_layer)."""
        assert self.model is not None
        seqs = self.runner.dense_sequences(v)
        if self.model.num_groups == 1 or trace is None:
            return self.model.max_dense_diff(hidden, seqs, v["query_start_loc"])
        worst, per_layer = self.model.max_dense_diffs(hidden, seqs, v["query_start_loc"])
        trace.forward["paged_vs_dense_max_abs_diff_per_layer"] = per_layer
        return worst

    def _kv_view(self) -> dict[str, Any]:
        kv = self.scheduler.kv
        view = self.kv_view(kv.pool.snapshot(), kv.req_blocks, kv.pool.num_blocks)
        if len(getattr(kv, "groups", ())) > 1:
            # several KV cache groups: owners over every group's tables, the groups, and which
            # group's table holds each block
            view["owners"] = kv.owners()
            view["kv_cache_groups"] = [g.to_dict() for g in kv.groups]
            view["block_group"] = kv.block_groups()
        return view

    def kv_view(
        self, snapshot: dict[str, Any], block_lists: dict[str, list[int]], num_blocks: int
    ) -> dict[str, Any]:
        """The pool's snapshot plus each block's owners and, with a model, its written slots."""
        owners: dict[str, list[str]] = {}
        for req_id, blocks in block_lists.items():
            for b in blocks:
                owners.setdefault(str(b), []).append(req_id)
        cfg = self.scenario.config
        view = {
            **snapshot,
            "owners": owners,
            "num_blocks": num_blocks,
            "num_usable_blocks": usable_blocks(self.flavor, num_blocks),
            "block_size": cfg.block_size,
            "layout": KV_LAYOUTS.get(self.flavor, KV_LAYOUTS["vllm"]),
        }
        if cfg.model is not None:
            m = cfg.model
            per_layer = [2, num_blocks, cfg.block_size, m.num_kv_heads, m.head_size]
            # nano-vllm allocates one tensor for all layers: [2, num_layers, num_blocks, ...]
            view["shape"] = [2, m.num_layers, *per_layer[1:]] if self.flavor == "nanovllm" else per_layer
            view["num_layers"] = m.num_layers
        if self.model is not None:
            view["written_slots"] = self.model.written_slots().cpu().tolist()
            if self.model.num_groups > 1:
                view["written_slots_by_group"] = [
                    w.cpu().tolist() for w in self.model.written_slots_by_group()
                ]
        return view


# the public Python API's name for pagedviz's own engine (`pagedviz.core.Engine`): an alias
Engine = PagedvizEngine
