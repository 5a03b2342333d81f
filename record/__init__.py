"""Record a real vLLM 0.33 server's scheduler, step by step, for `pagedviz import`.

    vllm serve MODEL --scheduler-cls pagedviz.record.RecordingAsyncScheduler   # async scheduling (default)
    vllm serve MODEL --no-async-scheduling --scheduler-cls pagedviz.record.RecordingScheduler

Both classes are vLLM's own schedulers (`AsyncScheduler`, `Scheduler`) with three methods wrapped:
`add_request` notes arrivals, `schedule` keeps what it returned, `update_from_output` pairs that
with the sampled tokens it received and appends one JSON line (core/recording.py describes the
format). The block pool's free queue has its two ways in wrapped too (`prepend_n`, `append_n`):
they note which blocks went back, in order, so that a replay keeps vLLM's free queue in vLLM's
order. No decision changes: each wrapper calls vLLM's method first and only reads its result.
With several KV cache groups (vLLM's hybrid KV cache manager: sliding-window layers beside full
attention) the header names each group's kind, window and layers, block ids are one list per group,
and each cached request carries its `null_head` per group, read off vLLM's managers after
`schedule()`: how many of its first blocks a sliding window has dropped to the null block.

Settings, read when the scheduler is built (not at import), so that every scheduler of a process
records its own file:
- `PAGEDVIZ_RECORD`: the file (default ./pagedviz-trace.jsonl), started afresh; with data
  parallelism rank r > 0 writes FILE.dpR.jsonl beside it. An http:// or https:// URL instead sends
  the lines to a running pagedviz (record/sink.py: batched, never waited for, dropped with one
  logged line when pagedviz cannot take them), with `PAGEDVIZ_RECORD_TOKEN` as its bearer token.
- `PAGEDVIZ_RECORD_MAX_MB` (default 1024): past it the recording stops, with one logged line.
- `PAGEDVIZ_RECORD_REDACT=1`: token ids are written as their counts.

Safe in production: each line is written and flushed before `update_from_output` returns, so a
crash loses no finished step; after start nothing the recorder does can raise into the server
(a failure logs one line and stops the recording). At start it refuses, with a message, a vLLM
other than the one it knows and a class that does not match `async_scheduling` (a synchronous
recorder would turn async scheduling off; an async one on a synchronous engine would change it).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import vllm
from vllm.logger import init_logger
from vllm.v1.core.kv_cache_utils import null_head_len
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from pagedviz.core.recording import FORMAT_VERSION, HEADER_KEY
from pagedviz.record.sink import HttpSink, is_url

logger = init_logger("pagedviz.record")

SUPPORTED_VLLM = ("0.33.0",)
DEFAULT_FILE = "pagedviz-trace.jsonl"
DEFAULT_MAX_MB = 1024


class RecorderConfigError(RuntimeError):
    """The recorder cannot record this server faithfully (raised at start only)."""


def _record_path(base: str, dp_rank: int, dp_size: int) -> Path:
    path = Path(base)
    if dp_size > 1 and dp_rank > 0:
        path = path.with_name(f"{path.stem}.dp{dp_rank}{path.suffix or '.jsonl'}")
    return path


def _tokens(ids: Any, redact: bool) -> list[int] | int:
    ids = list(ids or ())
    return len(ids) if redact else [int(t) for t in ids]


def _speculative(spec: Any) -> dict[str, Any]:
    """The drafter: its method and draft count, and an n-gram drafter's lookup range (what a
    replay needs to propose the same drafts where the recording cannot hold them: Model Runner
    V2 keeps them on the worker)."""
    out: dict[str, Any] = {
        "method": str(spec.method),
        "num_speculative_tokens": int(spec.num_speculative_tokens),
    }
    for key in ("prompt_lookup_min", "prompt_lookup_max"):
        value = getattr(spec, key, None)
        if isinstance(value, int):
            out[key] = value
    return out


def _groups(kv_cache_groups: Any) -> list[dict[str, Any]]:
    """The KV cache groups in vLLM's order: each one's spec class, block size and layer count; a
    window (tokens) where the spec has one; with several groups, each one's layer names (which
    layer is in which group: the model's `layer_types`). A server with one full-attention group
    writes what recordings always held."""
    several = len(kv_cache_groups) > 1
    out = []
    for g in kv_cache_groups:
        spec = g.kv_cache_spec
        group: dict[str, Any] = {
            "kind": type(spec).__name__,
            "block_size": int(spec.block_size),
            "num_layers": len(g.layer_names),
        }
        for key in ("sliding_window", "attention_chunk_size", "extra_retained_tokens"):
            value = getattr(spec, key, None)
            if isinstance(value, int) and value > 0:
                group[key] = value
        if several:
            group["layer_names"] = [str(n) for n in g.layer_names]
        out.append(group)
    return out


class _Recorder:
    """The file, its header and the pairing of scheduled batches with their outputs."""

    def __init__(self, sched: Scheduler, want_async: bool) -> None:
        vc = sched.vllm_config
        version = getattr(vllm, "__version__", "unknown")
        if version.split("+")[0] not in SUPPORTED_VLLM:  # a local build tag (+cu130) is the same vLLM
            raise RecorderConfigError(
                f"pagedviz.record knows vLLM {', '.join(SUPPORTED_VLLM)}, not {version}: "
                "install pip install 'pagedviz[vllm]' (it pins the vLLM it records from)"
            )
        async_on = bool(vc.scheduler_config.async_scheduling)
        if async_on != want_async:
            cls = "RecordingAsyncScheduler" if async_on else "RecordingScheduler"
            raise RecorderConfigError(
                f"{type(sched).__name__} on a server with async_scheduling={async_on} would change how "
                f"it schedules: use --scheduler-cls pagedviz.record.{cls}"
            )
        par = vc.parallel_config
        dp_rank = int(getattr(par, "data_parallel_rank", 0) or 0)
        dp_size = int(getattr(par, "data_parallel_size", 1) or 1)
        target = os.environ.get("PAGEDVIZ_RECORD") or DEFAULT_FILE
        # a URL: a running pagedviz (record/sink.py), each rank a live run of its own
        self.path: Path | str = target if is_url(target) else _record_path(target, dp_rank, dp_size)
        self.redact = os.environ.get("PAGEDVIZ_RECORD_REDACT", "").lower() in ("1", "true", "yes", "on")
        try:
            mb = float(os.environ.get("PAGEDVIZ_RECORD_MAX_MB") or DEFAULT_MAX_MB)
        except ValueError:
            given = os.environ["PAGEDVIZ_RECORD_MAX_MB"]
            raise RecorderConfigError(
                f"PAGEDVIZ_RECORD_MAX_MB must be a number of megabytes, not {given!r}"
            ) from None
        self.max_bytes = int(mb * (1 << 20))
        self.sched = sched
        self.step_no = 0
        self.arrivals: list[dict[str, Any]] = []
        # id(SchedulerOutput) -> (the output, its line), unpaired: the output is held so that its id
        # is not reused (by a later output) while its line waits
        self.pending: dict[int, tuple[Any, dict[str, Any]]] = {}
        self.order: list[int] = []  # the unpaired outputs, oldest first
        self.freed: list[dict[str, Any]] = []  # blocks back on the free queue since the last schedule()
        self._watch_free_queue(sched.kv_cache_manager.block_pool.free_block_queue)
        # a group that is not full attention may drop a request's first blocks (a sliding window
        # puts the null block in their place): each cached request's `null_head` says how many
        kcm = sched.kv_cache_manager
        kinds = [type(g.kv_cache_spec).__name__ for g in sched.kv_cache_config.kv_cache_groups]
        self.managers: tuple[Any, ...] = ()
        if any(k != "FullAttentionSpec" for k in kinds):
            self.managers = tuple(kcm.coordinator.single_type_managers)
        self.written = 0
        self.file: Any = None
        header = self._header(version, async_on, dp_rank)
        if isinstance(self.path, str):
            self.file = HttpSink(self.path, os.environ.get("PAGEDVIZ_RECORD_TOKEN", ""))
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 (held open for the server's life)
        self._write(header)
        logger.info("pagedviz.record: recording each scheduler step to %s", self.path)

    def _header(self, version: str, async_on: bool, dp_rank: int) -> dict[str, Any]:
        s = self.sched
        vc = s.vllm_config
        sc = vc.scheduler_config
        spec = vc.speculative_config
        groups = _groups(s.kv_cache_config.kv_cache_groups)
        cc = getattr(vc, "compilation_config", None)
        sizes = getattr(cc, "cudagraph_capture_sizes", None) or None
        eager = bool(getattr(vc.model_config, "enforce_eager", False))
        if eager or str(getattr(cc, "cudagraph_mode", "")).rsplit(".", 1)[-1] == "NONE":
            sizes = None
        policy = str(getattr(sc, "policy", "fcfs") or "fcfs")
        vocab = None
        get_vocab = getattr(vc.model_config, "get_vocab_size", None)
        if callable(get_vocab):
            vocab = int(get_vocab())
        return {
            HEADER_KEY: FORMAT_VERSION,
            "vllm_version": version,
            "scheduler": type(s).__name__,
            "runner": "v2" if getattr(s, "use_v2_model_runner", False) else "v1",
            "async_scheduling": async_on,
            "block_size": int(s.block_size),
            "max_model_len": int(vc.model_config.max_model_len),
            "max_num_batched_tokens": int(sc.max_num_batched_tokens),
            "max_num_seqs": int(sc.max_num_seqs),
            "num_kv_blocks": int(s.kv_cache_config.num_blocks),
            "enable_chunked_prefill": bool(sc.enable_chunked_prefill),
            "enable_prefix_caching": bool(vc.cache_config.enable_prefix_caching),
            "long_prefill_token_threshold": int(sc.long_prefill_token_threshold or 0),
            "scheduler_reserve_full_isl": bool(getattr(sc, "scheduler_reserve_full_isl", False)),
            "watermark": float(getattr(sc, "watermark", 0.0) or 0.0),
            **({} if policy == "fcfs" else {"scheduling_policy": policy}),
            "speculative": None if spec is None else _speculative(spec),
            "kv_cache_groups": groups,
            **self._retention(),
            "cudagraph_capture_sizes": None if sizes is None else sorted(int(x) for x in sizes),
            "vocab_size": vocab,
            "redacted": self.redact,
            "data_parallel_rank": dp_rank,
        }

    def _retention(self) -> dict[str, Any]:
        """Where a group is not full attention: which of its blocks the prefix cache keeps
        (`prefix_cache_retention_interval`: 0, vLLM's default, only where a later hit can end;
        None, every block), which decides its prefix-cache hits."""
        kv = self.sched.kv_cache_config
        if all(type(g.kv_cache_spec).__name__ == "FullAttentionSpec" for g in kv.kv_cache_groups):
            return {}
        value = getattr(kv, "prefix_cache_retention_interval", 0)
        return {"prefix_cache_retention_interval": None if value is None else int(value)}

    def _watch_free_queue(self, queue: Any) -> None:
        """Note each run of blocks vLLM puts back on its free queue (after vLLM has put them)."""
        for name, to in (("prepend_n", "head"), ("append_n", "tail")):
            original = getattr(queue, name)

            def wrapper(
                blocks: list[Any], _original: Any = original, _to: str = to, _name: str = name
            ) -> None:
                _original(blocks)
                if self.active and blocks:
                    try:
                        self.freed.append({"to": _to, "blocks": [int(b.block_id) for b in blocks]})
                    except Exception as e:  # noqa: BLE001 (never into the server)
                        self.fail(_name, e)

            setattr(queue, name, wrapper)

    # ------------------------------------------------------------------ writing
    def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":")) + "\n"
        size = len(line.encode())
        if self.written + size > self.max_bytes:
            logger.warning(
                "pagedviz.record: %s reached PAGEDVIZ_RECORD_MAX_MB (%d MB); recording stopped after "
                "step %d, the server runs on",
                self.path,
                self.max_bytes >> 20,
                self.step_no - 1,
            )
            self.stop()
            return
        self.file.write(line)
        self.file.flush()
        self.written += size

    def stop(self) -> None:
        if self.file is not None:
            try:
                self.file.close()
            finally:
                self.file = None

    def fail(self, where: str, e: BaseException) -> None:
        logger.warning("pagedviz.record: recording stopped (%s: %s: %s)", where, type(e).__name__, e)
        try:
            self.stop()
        except Exception:  # noqa: BLE001 (nothing may reach the server)
            self.file = None

    @property
    def active(self) -> bool:
        return self.file is not None

    # ------------------------------------------------------------------ the three hooks
    def arrived(self, request: Any) -> None:
        params = getattr(request, "sampling_params", None)
        max_tokens = getattr(params, "max_tokens", None)
        arrival: dict[str, Any] = {
            "id": str(request.request_id),
            "prompt_token_ids": _tokens(request.prompt_token_ids, self.redact),
            "max_tokens": None if max_tokens is None else int(max_tokens),
        }
        priority = int(getattr(request, "priority", 0) or 0)
        if priority:  # written where it is not vLLM's default 0
            arrival["priority"] = priority
        self.arrivals.append(arrival)

    def scheduled(self, out: Any) -> None:
        self.step_no += 1
        r = self.redact
        cached = out.scheduled_cached_reqs
        line = {
            "step": self.step_no,
            "arrivals": self.arrivals,
            "new": [
                {
                    "id": n.req_id,
                    "prompt_token_ids": _tokens(n.prompt_token_ids, r),
                    "block_ids": [list(map(int, g)) for g in n.block_ids],
                    "num_computed_tokens": int(n.num_computed_tokens),
                }
                for n in out.scheduled_new_reqs
            ],
            "cached": [
                {
                    "id": rid,
                    "resumed": rid in cached.resumed_req_ids,
                    "new_block_ids": None if nb is None else [list(map(int, g)) for g in nb],
                    "num_computed_tokens": int(nc),
                    "num_output_tokens": int(no),
                    **self._null_head(rid),
                }
                for rid, nb, nc, no in zip(
                    cached.req_ids, cached.new_block_ids, cached.num_computed_tokens, cached.num_output_tokens
                )
            ],
            "num_scheduled_tokens": {k: int(v) for k, v in out.num_scheduled_tokens.items()},
            "spec_tokens": {k: _tokens(v, r) for k, v in out.scheduled_spec_decode_tokens.items()},
            "preempted": sorted(out.preempted_req_ids or ()),
            "finished": sorted(out.finished_req_ids),
            "num_free_blocks": int(self.sched.kv_cache_manager.block_pool.get_num_free_blocks()),
            "freed": self.freed,
            "sampled": None,
        }
        self.arrivals = []
        self.freed = []
        self.pending[id(out)] = (out, line)
        self.order.append(id(out))

    def _null_head(self, rid: str) -> dict[str, list[int]]:
        """How many of the request's first blocks are the null block, per group, after this
        schedule() (vLLM's `null_head_len`): the blocks a sliding window dropped, which the
        step's new block ids do not show. Nothing where no group drops blocks."""
        if not self.managers:
            return {}
        return {"null_head": [null_head_len(m.req_to_blocks.get(rid, ())) for m in self.managers]}

    def received(self, out: Any, model_output: Any, sampled_lists: list[Any]) -> None:
        key = id(out)
        if key not in self.pending:
            return
        # batches leave the queue in order; one that never reached update_from_output is written
        # first, with `sampled: null`, so the lines keep the order of schedule()
        while self.order and self.order[0] != key and self.active:
            self._write(self.pending.pop(self.order.pop(0))[1])
        self.order.pop(0)
        line = self.pending.pop(key)[1]
        sampled: dict[str, Any] = {}
        for rid, toks in zip(model_output.req_ids, sampled_lists):
            if len(toks):
                sampled[rid] = _tokens(toks, self.redact)
        line["sampled"] = sampled
        if self.active:
            self._write(line)


class _RecordingMixin:
    _want_async = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        self._pagedviz = _Recorder(self, self._want_async)  # type: ignore[arg-type]

    def add_request(self, request: Any) -> None:
        super().add_request(request)  # type: ignore[misc]
        rec = self._pagedviz
        if rec.active:
            try:
                rec.arrived(request)
            except Exception as e:  # noqa: BLE001 (never into the server)
                rec.fail("add_request", e)

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        out = super().schedule(*args, **kwargs)  # type: ignore[misc]
        rec = self._pagedviz
        if rec.active:
            try:
                rec.scheduled(out)
            except Exception as e:  # noqa: BLE001
                rec.fail("schedule", e)
        return out

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        rec = self._pagedviz
        # the tokens as received: vLLM's update_from_output cuts a request's list at its stop in
        # place, after counting its accepted drafts from the whole list
        received = None
        if rec.active:
            try:
                received = [list(t) for t in model_runner_output.sampled_token_ids]
            except Exception as e:  # noqa: BLE001
                rec.fail("update_from_output", e)
        result = super().update_from_output(scheduler_output, model_runner_output)  # type: ignore[misc]
        if rec.active and received is not None:
            try:
                rec.received(scheduler_output, model_runner_output, received)
            except Exception as e:  # noqa: BLE001
                rec.fail("update_from_output", e)
        return result

    def shutdown(self) -> None:
        try:
            super().shutdown()  # type: ignore[misc]
        finally:
            with contextlib.suppress(Exception):
                self._pagedviz.stop()


class RecordingAsyncScheduler(_RecordingMixin, AsyncScheduler):
    """vLLM 0.33's AsyncScheduler (its default with async scheduling on) that records each step."""

    _want_async = True


class RecordingScheduler(_RecordingMixin, Scheduler):
    """vLLM 0.33's synchronous Scheduler (--no-async-scheduling) that records each step."""

    _want_async = False


__all__ = ["RecorderConfigError", "RecordingAsyncScheduler", "RecordingScheduler"]
