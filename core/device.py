"""Which device runs the step, and how its stages are timed.

`auto` picks CUDA when torch sees a GPU, else an Ascend NPU when `torch_npu` imports and reports a
device, else the CPU. CPU stages are timed with perf_counter_ns; device stages on CUDA with events.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch


def npu_available() -> bool:
    try:
        torch_npu = importlib.import_module("torch_npu")
    except Exception:
        return False
    npu = getattr(torch, "npu", None) or getattr(torch_npu, "npu", None)
    try:
        return bool(npu is not None and npu.is_available() and npu.device_count() > 0)
    except Exception:
        return False


class DeviceUnavailableError(RuntimeError):
    """An explicit `config.device` that this machine does not have."""

    field = "config.device"


def pick_device_type(name: str) -> str:
    """The device type a scenario's `device` setting means here; explicit choices must exist."""
    if name == "auto":
        if torch.cuda.is_available():
            return "cuda"
        return "npu" if npu_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailableError("cuda was asked for but torch sees no CUDA GPU")
    if name == "npu" and not npu_available():
        raise DeviceUnavailableError("npu was asked for but torch_npu reports no NPU")
    return name


def resolve_device(name: str) -> torch.device:
    """The torch device to run on (torch knows "npu" once torch_npu is imported)."""
    kind = pick_device_type(name)
    return torch.device("cpu") if kind == "cpu" else torch.device(f"{kind}:0")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "npu":
        torch.npu.synchronize()  # type: ignore[attr-defined]


class StageTimer:
    """Collects microseconds per named stage into a dict. `per_stage` asks for each stage of
    prepare_inputs on its own; without it only their total is taken (one clock read per step
    instead of two per stage)."""

    def __init__(self, device: torch.device, per_stage: bool = False) -> None:
        self.device = device
        self.per_stage = per_stage
        self.timings: dict[str, float] = {}
        self._events: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []

    @contextmanager
    def cpu(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter_ns()
        yield
        self.timings[name] = self.timings.get(name, 0.0) + (time.perf_counter_ns() - t0) / 1e3

    @contextmanager
    def dev(self, name: str) -> Iterator[None]:
        if self.device.type != "cuda":
            # CPU: the wall clock. An NPU runs asynchronously and has no events here, so its stage is
            # bracketed by synchronisations; otherwise only the launch would be timed.
            synchronize(self.device)
            with self.cpu(name):
                yield
                synchronize(self.device)
            return
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        yield
        end.record()
        self._events.append((name, start, end))

    def collect(self, total_of: tuple[str, ...] = (), total_name: str = "prepare_inputs") -> dict[str, float]:
        """Microseconds per stage (device events read back), plus the total of `total_of` unless
        that total was timed as a whole."""
        timings = self._collect()
        if total_of and total_name not in timings:
            timings[total_name] = round(sum(timings.get(n, 0.0) for n in total_of), 1)
        return timings

    def _collect(self) -> dict[str, float]:
        if self._events:
            torch.cuda.synchronize(self.device)
            for name, start, end in self._events:
                self.timings[name] = self.timings.get(name, 0.0) + start.elapsed_time(end) * 1e3
            self._events.clear()
        return {k: round(v, 1) for k, v in self.timings.items()}
