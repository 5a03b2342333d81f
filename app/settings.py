"""Server settings: bounds of the run store, of requests and of concurrent work, from the
environment (PAGEDVIZ_*), which `pagedviz serve` flags set. The engine's own limits (core.Limits)
read the same way. A value that is not a positive integer raises SettingError naming the variable,
so a server with a mistyped limit stops at start rather than serve without it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from pagedviz.core.limits import Limits, SettingError, env_int

# a CSP source expression: a scheme, host, port, path or keyword, none of the characters that would
# end the directive or the header
_SOURCE = re.compile(r"^[A-Za-z0-9*'.:/_\-+%]+$")


def embed_ancestors(raw: str, var: str = "PAGEDVIZ_EMBED_ANCESTORS") -> str:
    """PAGEDVIZ_EMBED_ANCESTORS as a frame-ancestors source list ("*", "'self'", "https://slides.example");
    anything that could end the directive (";", ",", quotes out of place, control characters) stops the
    server at start, naming the variable."""
    parts = raw.split()
    if not parts or any(not _SOURCE.match(p) for p in parts):
        raise SettingError(f"{var} must be CSP frame-ancestors sources separated by spaces (got {raw!r:.60})")
    return " ".join(parts)


def compute_in(raw: str) -> str:
    """PAGEDVIZ_COMPUTE_IN: "process" or "thread"; anything else stops the server at start."""
    value = raw.strip().lower()
    if value not in ("process", "thread"):
        raise SettingError(f"PAGEDVIZ_COMPUTE_IN must be process or thread (got {raw!r:.60})")
    return value


@dataclass(frozen=True)
class Settings:
    max_runs: int = 64  # computed runs kept in memory (LRU)
    max_store_bytes: int = 256 << 20  # measured bytes of computed runs kept in memory
    max_run_bytes: int = 128 << 20  # measured bytes of one run's trace; past it the run is refused
    max_scenarios: int = 4096  # scenarios remembered so evicted runs can be recomputed
    max_scenario_bytes: int = 64 << 20  # measured bytes of those scenarios
    max_body_bytes: int = 1 << 20  # largest POST body
    max_link_chars: int = 64 << 10  # largest packed scenario in a link
    max_import_bytes: int = 64 << 20  # largest recording POST /api/runs/import takes
    max_record_line_bytes: int = 16 << 20  # longest line of a recording
    max_run_seconds: int = 60  # a run that would compute longer than this is refused (413)
    # runs computing at once: the compute processes, each computing one step at a time (of the
    # run that has had the least time); at most the cores, and at most 4. Runs in flight pause
    # while they hold more than max_computing x max_run_bytes, so that their peaks stay bounded
    max_computing: int = field(default_factory=lambda: min(4, os.cpu_count() or 1))
    max_in_progress: int = 16  # runs started and not finished, sharing those processes
    max_queued: int = 64  # runs waiting for a turn; past it a new run gets 503 + Retry-After
    # the run store's database: a folder (--store, PAGEDVIZ_STORE) kept across restarts and shared
    # by workers; "" = a temporary folder, removed when the server ends
    store_dir: str = ""
    max_db_bytes: int = 1 << 30  # content bytes of the database; past it its oldest steps go
    max_db_total_bytes: int = 4 << 30  # past it (no step left), the least recently used scenario goes
    # where runs compute: "process" (worker processes, so the server stays responsive while runs
    # compute) or "thread" (threads of the server's own process)
    compute_in: str = "process"
    # who may frame an embedded figure (/run?...&embed=<card>): a CSP frame-ancestors source list
    embed_ancestors: str = "*"
    # who may frame every page (the whole run view): nobody by default; pagedviz.notebook's
    # in-process server, on the loopback address only, lets the notebook's page frame it
    page_ancestors: str = "'none'"
    # live runs (POST /api/runs/live, app/import_live.py): off without a token; the bounds of
    # each one (its lines in all), of a batch of lines, of how many at once, and the quiet that
    # closes one (as cut)
    live_token: str = ""
    live_idle_s: int = 300
    max_live_runs: int = 4
    max_live_lines: int = 4096  # lines in one POST /api/runs/{id}/lines
    max_live_body_bytes: int = 16 << 20  # bytes of one POST /api/runs/{id}/lines
    max_live_bytes: int = 1 << 30  # a live run's lines in all; past it a 413
    limits: Limits = field(default_factory=Limits)

    @classmethod
    def from_env(cls) -> Settings:
        d = cls()
        return cls(
            max_runs=env_int("PAGEDVIZ_MAX_RUNS", d.max_runs),
            max_store_bytes=env_int("PAGEDVIZ_MAX_STORE_MB", d.max_store_bytes >> 20) << 20,
            max_run_bytes=env_int("PAGEDVIZ_MAX_RUN_MB", d.max_run_bytes >> 20) << 20,
            max_scenarios=env_int("PAGEDVIZ_MAX_SCENARIOS", d.max_scenarios),
            max_scenario_bytes=env_int("PAGEDVIZ_MAX_SCENARIO_MB", d.max_scenario_bytes >> 20) << 20,
            max_body_bytes=env_int("PAGEDVIZ_MAX_BODY_KB", d.max_body_bytes >> 10) << 10,
            max_link_chars=env_int("PAGEDVIZ_MAX_LINK_CHARS", d.max_link_chars),
            max_import_bytes=env_int("PAGEDVIZ_MAX_IMPORT_MB", d.max_import_bytes >> 20) << 20,
            max_record_line_bytes=env_int("PAGEDVIZ_MAX_RECORD_LINE_MB", d.max_record_line_bytes >> 20) << 20,
            max_run_seconds=env_int("PAGEDVIZ_MAX_RUN_SECONDS", d.max_run_seconds),
            max_computing=env_int("PAGEDVIZ_MAX_COMPUTING", d.max_computing),
            max_queued=env_int("PAGEDVIZ_MAX_QUEUED", d.max_queued),
            max_in_progress=env_int("PAGEDVIZ_MAX_IN_PROGRESS", d.max_in_progress),
            store_dir=os.environ.get("PAGEDVIZ_STORE", ""),
            max_db_bytes=env_int("PAGEDVIZ_STORE_MB", d.max_db_bytes >> 20) << 20,
            max_db_total_bytes=env_int("PAGEDVIZ_STORE_MAX_MB", d.max_db_total_bytes >> 20) << 20,
            compute_in=compute_in(os.environ.get("PAGEDVIZ_COMPUTE_IN", d.compute_in)),
            embed_ancestors=embed_ancestors(os.environ.get("PAGEDVIZ_EMBED_ANCESTORS", d.embed_ancestors)),
            page_ancestors=embed_ancestors(
                os.environ.get("PAGEDVIZ_PAGE_ANCESTORS", d.page_ancestors), "PAGEDVIZ_PAGE_ANCESTORS"
            ),
            live_token=os.environ.get("PAGEDVIZ_LIVE_TOKEN", "").strip(),
            live_idle_s=env_int("PAGEDVIZ_LIVE_IDLE_S", d.live_idle_s),
            max_live_runs=env_int("PAGEDVIZ_MAX_LIVE_RUNS", d.max_live_runs),
            max_live_lines=env_int("PAGEDVIZ_MAX_LIVE_LINES", d.max_live_lines),
            max_live_body_bytes=env_int("PAGEDVIZ_MAX_LIVE_BODY_MB", d.max_live_body_bytes >> 20) << 20,
            max_live_bytes=env_int("PAGEDVIZ_MAX_LIVE_MB", d.max_live_bytes >> 20) << 20,
            limits=Limits.from_env(),
        )
