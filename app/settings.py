"""Server settings: bounds of the run store and of requests, from the environment (PAGEDVIZ_*),
which `pagedviz serve` flags set. The engine's own limits (core.Limits) read the same way."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pagedviz.core.config import Limits


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw.isdigit() else default


@dataclass(frozen=True)
class Settings:
    max_runs: int = 64  # computed runs kept in memory (LRU)
    max_store_bytes: int = 256 << 20  # bytes of computed runs kept in memory
    max_scenarios: int = 4096  # scenarios remembered so evicted runs can be recomputed
    max_body_bytes: int = 1 << 20  # largest POST body
    max_link_chars: int = 64 << 10  # largest packed scenario in a link
    max_run_seconds: int = 60  # a run still computing after this long is refused (413)
    shared_dir: str = ""  # where workers share remembered scenarios ("" = not shared)
    limits: Limits = field(default_factory=Limits.from_env)

    @classmethod
    def from_env(cls) -> Settings:
        d = cls()
        return cls(
            max_runs=_env_int("PAGEDVIZ_MAX_RUNS", d.max_runs),
            max_store_bytes=_env_int("PAGEDVIZ_MAX_STORE_MB", d.max_store_bytes >> 20) << 20,
            max_scenarios=_env_int("PAGEDVIZ_MAX_SCENARIOS", d.max_scenarios),
            max_body_bytes=_env_int("PAGEDVIZ_MAX_BODY_KB", d.max_body_bytes >> 10) << 10,
            max_link_chars=_env_int("PAGEDVIZ_MAX_LINK_CHARS", d.max_link_chars),
            max_run_seconds=_env_int("PAGEDVIZ_MAX_RUN_SECONDS", d.max_run_seconds),
            shared_dir=os.environ.get("PAGEDVIZ_SHARED_DIR", ""),
            limits=Limits.from_env(),
        )
