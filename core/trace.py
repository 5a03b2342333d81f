"""StepTrace: everything one engine step produced, in the shape of the trace contract
(docs/trace-contract.md).

Each array keeps its name (vLLM's), its level (request / token / system / scalar), the stage that
wrote it and the side it was read from (cpu or device). System tables are stored as their active
rows plus the full shape (rows past the active ones are zero), so capturing stays cheap; the
runners' persistent tables are recorded by change (core/table_changes.py) and materialised when a
step's entry is read.
Padded buffers say how much of them is real (`valid`): slot_mapping's `data` runs to the
CUDA-graph size with -1 past `valid`; query_start_loc and seq_lens keep one entry per request (one
more for query_start_loc) in `data` and the whole persistent buffer, padding included, in `buffer`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pagedviz.core.shared_values import share
from pagedviz.core.table_versions import TableVersion

# what to record of each array: (name, level, stage, side, full shape or None)
PlanItem = tuple[str, str, str, str, "tuple[int, ...] | None"]
Padding = Mapping[str, tuple["int | None", "np.ndarray | None"]]
NO_PADDING: tuple[None, None] = (None, None)
# the KV cache's per-block lists that compact() keeps as int32 arrays (block ids, ref counts)
POOL_LISTS = ("free_block_queue", "ref_cnt")


class TraceArray:
    """One recorded array: name, level, the stage that wrote it, the side it was read from, and
    its data. A persistent table recorded by change (a TableVersion, core/table_versions.py) is
    materialised when `data` is read."""

    __slots__ = ("name", "level", "_data", "stage", "side", "shape", "valid", "buffer")

    def __init__(
        self,
        name: str,
        level: str,
        data: np.ndarray | TableVersion,
        stage: str,
        side: str = "cpu",
        shape: tuple[int, ...] | None = None,
        valid: int | None = None,
        buffer: np.ndarray | None = None,
    ) -> None:
        self.name = name
        self.level = level
        self._data = data  # for system tables: the active rows only
        self.stage = stage
        self.side = side
        self.shape = shape  # full shape when `data` holds only leading rows
        # padding: `valid` leading entries are real. With `buffer` set, that is the whole
        # persistent buffer the kernels are handed (data keeps its level's length); else `data`
        # itself is padded.
        self.valid = valid
        self.buffer = buffer

    @property
    def data(self) -> np.ndarray:
        d = self._data
        return d if isinstance(d, np.ndarray) else d.read()

    @data.setter
    def data(self, value: np.ndarray) -> None:
        self._data = value

    def __repr__(self) -> str:
        return f"TraceArray({self.name!r}, {self.level!r}, shape={self.full_shape}, stage={self.stage!r})"

    @property
    def value(self) -> np.ndarray:
        """The full array, zero rows restored."""
        if self.shape is None or self.shape == self.data.shape:
            return self.data
        full = np.zeros(self.shape, dtype=self.data.dtype)
        full[: self.data.shape[0]] = self.data
        return full

    @property
    def full_shape(self) -> tuple[int, ...]:
        return self.shape if self.shape is not None else tuple(self._data.shape)

    def to_dict(self) -> dict[str, Any]:
        v = self.value
        out: dict[str, Any] = {
            "level": self.level,
            "dtype": str(v.dtype),
            "shape": list(v.shape),
            "data": v.tolist(),
            "stage": self.stage,
            "side": self.side,
        }
        if self.valid is not None:
            out["valid"] = self.valid
        if self.buffer is not None:
            out["buffer"] = self.buffer.tolist()
        return out


class BlockOwners(Mapping[str, list[str]]):
    """kv_cache["owners"] (block id as text -> the requests holding it) kept in binary form: the
    blocks in their order, CSR offsets into the owners' indices, and the request ids once. Read
    like the dict it replaces (same keys, order and lists), at a tenth of its memory."""

    __slots__ = ("blocks", "offsets", "owner", "req_ids", "_sorted", "_perm")

    def __init__(self, owners: Mapping[str, list[str]]) -> None:
        ids: dict[str, int] = {}
        self.blocks = np.fromiter((int(b) for b in owners), dtype=np.int64, count=len(owners))
        counts = np.fromiter((len(o) for o in owners.values()), dtype=np.int64, count=len(owners))
        self.offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        self.owner = np.fromiter(
            (ids.setdefault(r, len(ids)) for o in owners.values() for r in o),
            dtype=np.int32,
            count=int(self.offsets[-1]),
        )
        self.req_ids = tuple(ids)
        self._perm = np.argsort(self.blocks, kind="stable")
        self._sorted = self.blocks[self._perm]

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled: the request ids are shared with the steps this process holds."""
        for name, value in state.items():
            setattr(self, name, value)
        self.req_ids = tuple(sys.intern(r) for r in self.req_ids)

    def _index(self, key: object) -> int:
        try:
            b = int(str(key))
        except ValueError:
            raise KeyError(key) from None
        i = int(np.searchsorted(self._sorted, b))
        if i == len(self._sorted) or self._sorted[i] != b or str(b) != key:
            raise KeyError(key)
        return int(self._perm[i])

    def __getitem__(self, key: str) -> list[str]:
        i = self._index(key)
        return [self.req_ids[j] for j in self.owner[self.offsets[i] : self.offsets[i + 1]]]

    def __contains__(self, key: object) -> bool:
        try:
            self._index(key)
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return (str(b) for b in self.blocks.tolist())

    def __len__(self) -> int:
        return len(self.blocks)


def _shared_stage(name: str, reads: list[str], writes: list[str], formula: str, why: str) -> Stage:
    """A Stage whose texts are interned (shared by every step that names them)."""
    return Stage(
        sys.intern(name),
        [sys.intern(r) for r in reads],
        [sys.intern(w) for w in writes],
        sys.intern(formula),
        sys.intern(why),
    )


@dataclass
class Stage:
    name: str
    reads: list[str]
    writes: list[str]
    formula: str
    why: str = ""

    def __reduce__(self) -> tuple[Any, ...]:
        # every step names the same stages: unpickled, their texts are shared, not one copy a step
        return (_shared_stage, (self.name, self.reads, self.writes, self.formula, self.why))

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "reads": self.reads, "writes": self.writes, "formula": self.formula}
        if self.why:
            out["why"] = self.why
        return out


@dataclass(init=False)
class StepTrace:
    step: int
    idle: bool = False
    scheduler: dict[str, Any] = field(default_factory=dict)
    batch: dict[str, Any] = field(default_factory=dict)
    scalars: dict[str, Any] = field(default_factory=dict)
    stages: list[Stage] = field(default_factory=list)
    sampled_token_ids: dict[str, int] = field(default_factory=dict)
    kv_cache: dict[str, Any] = field(default_factory=dict)
    forward: dict[str, Any] = field(default_factory=dict)
    timing_us: dict[str, float] = field(default_factory=dict)
    # async scheduling: what the engine core's batch queue did this step (core/engine_core.py);
    # None for synchronous runs, whose dict then has no "engine_core" key
    engine_core: dict[str, Any] | None = None
    # recorded arrays, owned by the trace, become TraceArray entries when first read (in order)
    _pending: list[tuple[Iterable[PlanItem], Mapping[str, Any], Padding]] = field(
        default_factory=list, repr=False, compare=False
    )
    _entries: dict[str, TraceArray] = field(default_factory=dict, repr=False, compare=False)

    def __init__(
        self,
        step: int,
        idle: bool = False,
        scheduler: dict[str, Any] | None = None,
        batch: dict[str, Any] | None = None,
        scalars: dict[str, Any] | None = None,
        stages: list[Stage] | None = None,
        sampled_token_ids: dict[str, int] | None = None,
        kv_cache: dict[str, Any] | None = None,
        forward: dict[str, Any] | None = None,
        timing_us: dict[str, float] | None = None,
        engine_core: dict[str, Any] | None = None,
    ) -> None:
        # written out (the dataclass's own __init__ calls a factory per field): one is made a step
        self.step = step
        self.idle = idle
        self.scheduler = {} if scheduler is None else scheduler
        self.batch = {} if batch is None else batch
        self.scalars = {} if scalars is None else scalars
        self.stages = [] if stages is None else stages
        self.sampled_token_ids = {} if sampled_token_ids is None else sampled_token_ids
        self.kv_cache = {} if kv_cache is None else kv_cache
        self.forward = {} if forward is None else forward
        self.timing_us = {} if timing_us is None else timing_us
        self.engine_core = engine_core
        self._pending = []
        self._entries = {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled (a step sent by a compute process): its request ids and small numbers are
        shared with the steps this process already holds (core/shared_values.py)."""
        self.__dict__.update(state)
        for part in (self.scheduler, self.batch, self.sampled_token_ids, self.kv_cache):
            share(part)

    @property
    def array_entries(self) -> dict[str, TraceArray]:
        """The arrays by name; an array recorded twice keeps its first place and its last value."""
        if self._pending:
            entries = self._entries
            for plan, values, padding in self._pending:
                for name, level, stage, side, shape in plan:
                    data = values.get(name)
                    if data is not None:
                        valid, buffer = padding.get(name, NO_PADDING)
                        if data is buffer:  # handed over as the buffer: the array is its head
                            data = buffer[:valid]
                        entries[name] = TraceArray(name, level, data, stage, side, shape, valid, buffer)
            self._pending.clear()
        return self._entries

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        return {name: a.value for name, a in self.array_entries.items()}

    def record(
        self,
        name: str,
        level: str,
        data: np.ndarray,
        stage: str,
        side: str = "cpu",
        shape: tuple[int, ...] | None = None,
        valid: int | None = None,
        buffer: np.ndarray | None = None,
    ) -> None:
        # arrays a stage made afresh are kept as they are; views of persistent buffers are copied
        if data.base is not None:
            data = data.copy()
        if buffer is not None:
            buffer = buffer.copy()
        padding = {name: (valid, buffer)} if valid is not None or buffer is not None else {}
        self._pending.append((((name, level, stage, side, shape),), {name: data}, padding))

    def record_all(self, plan: Iterable[PlanItem], values: Mapping[str, Any], padding: Padding) -> None:
        """Record each array of `plan` that `values` holds, with its padding (valid, buffer) if
        any. The trace takes `values` and the buffers as they are: the caller hands over arrays
        that nothing will overwrite (fresh ones, or copies of persistent buffers). An array given
        as its buffer itself (the same object) is that buffer's first `valid` entries."""
        self._pending.append((plan, values, padding))

    def compact(self) -> None:
        """Keep what the trace holds in binary form where it has lists of Python objects (the KV
        cache's block owners, its free queue and ref counts: one entry a block); readers and
        to_dict see the same values."""
        kv = self.kv_cache
        owners = kv.get("owners")
        if isinstance(owners, dict) and owners:
            kv["owners"] = BlockOwners(owners)
        for key in POOL_LISTS:
            if isinstance(kv.get(key), list):
                kv[key] = np.asarray(kv[key], dtype=np.int32)

    def to_dict(self) -> dict[str, Any]:
        kv_cache = self.kv_cache
        if any(isinstance(v, (BlockOwners, np.ndarray)) for v in kv_cache.values()):
            kv_cache = {
                k: dict(v) if isinstance(v, BlockOwners) else v.tolist() if isinstance(v, np.ndarray) else v
                for k, v in kv_cache.items()
            }
        out = {
            "step": self.step,
            "idle": self.idle,
            "scheduler": self.scheduler,
            "batch": self.batch,
            "arrays": {n: a.to_dict() for n, a in self.array_entries.items()},
            "scalars": self.scalars,
            "stages": [s.to_dict() for s in self.stages],
            "sampled_token_ids": self.sampled_token_ids,
            "kv_cache": kv_cache,
            "forward": self.forward,
            "timing_us": self.timing_us,
        }
        if self.engine_core is not None:
            out["engine_core"] = self.engine_core
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StepTrace:
        """A step read back from its trace contract (to_dict's JSON, as the run store keeps an
        imported run's steps): the same to_dict, arrays and readers' values. Padded entries keep
        `data` as it was written (their full shape is the data's)."""
        t = cls(
            step=int(d["step"]),
            idle=bool(d.get("idle", False)),
            scheduler=dict(d.get("scheduler", {})),
            batch=dict(d.get("batch", {})),
            scalars=dict(d.get("scalars", {})),
            stages=[
                _shared_stage(s["name"], s["reads"], s["writes"], s["formula"], s.get("why", ""))
                for s in d.get("stages", [])
            ],
            sampled_token_ids=dict(d.get("sampled_token_ids", {})),
            kv_cache=dict(d.get("kv_cache", {})),
            forward=dict(d.get("forward", {})),
            timing_us=dict(d.get("timing_us", {})),
            engine_core=d.get("engine_core"),
        )
        for name, a in d.get("arrays", {}).items():
            data = np.asarray(a["data"], dtype=a["dtype"]).reshape(a["shape"])
            buffer = a.get("buffer")
            t._entries[name] = TraceArray(
                name,
                a["level"],
                data,
                a["stage"],
                a.get("side", "cpu"),
                None,
                a.get("valid"),
                None if buffer is None else np.asarray(buffer, dtype=a["dtype"]),
            )
        return t
