"""The `pagedviz` command: the engine's commands (pagedviz.core.cli) plus `serve`, the web app."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from pagedviz.app.db import StoreError
from pagedviz.app.settings import Settings
from pagedviz.core.cli import build_parser
from pagedviz.core.cli import main as core_main
from pagedviz.core.cli_common import HELP, CliError
from pagedviz.core.limits import Limits

SERVE_LIMITS = {
    "max_runs": "PAGEDVIZ_MAX_RUNS",
    "max_store_mb": "PAGEDVIZ_MAX_STORE_MB",
    "max_body_kb": "PAGEDVIZ_MAX_BODY_KB",
    "max_requests": "PAGEDVIZ_MAX_REQUESTS",
    "max_cells": "PAGEDVIZ_MAX_CELLS",
    "max_total_tokens": "PAGEDVIZ_MAX_TOTAL_TOKENS",
    "max_steps": "PAGEDVIZ_MAX_STEPS",
    "max_run_seconds": "PAGEDVIZ_MAX_RUN_SECONDS",
    "max_run_mb": "PAGEDVIZ_MAX_RUN_MB",
    "max_computing": "PAGEDVIZ_MAX_COMPUTING",
    "max_in_progress": "PAGEDVIZ_MAX_IN_PROGRESS",
    "max_queued": "PAGEDVIZ_MAX_QUEUED",
    "store_mb": "PAGEDVIZ_STORE_MB",
    "store_max_mb": "PAGEDVIZ_STORE_MAX_MB",
}


def cmd_serve(args: argparse.Namespace) -> int:
    if not 1 <= args.port <= 65535:
        raise CliError(f"--port must be between 1 and 65535 (got {args.port})")
    if args.workers < 1:
        raise CliError(f"--workers must be at least 1 (got {args.workers})")
    env = {
        var: str(getattr(args, key)) for key, var in SERVE_LIMITS.items() if getattr(args, key) is not None
    }
    if args.store is not None:
        if not args.store.strip():
            raise CliError("--store must name a folder (got an empty name)")
        env["PAGEDVIZ_STORE"] = args.store
    if args.live_token is not None:
        if not args.live_token.strip():
            raise CliError("--live-token must not be empty (it turns POST /api/runs/live on)")
        env["PAGEDVIZ_LIVE_TOKEN"] = args.live_token.strip()
    # here, once the arguments are valid: uvicorn, and the device line's torch, only for a server
    from pagedviz.app.serve import check_listen, serve

    try:
        check_listen(args.host, args.port)
    except OSError as e:  # the port is taken, or the host is not this machine's
        reason = e.strerror or str(e)
        raise CliError(
            f"cannot listen on {args.host}:{args.port}: {reason} (choose another --port or --host)"
        ) from e
    try:
        return serve(
            host=args.host, port=args.port, workers=args.workers, env=env, access_log=args.access_log
        )
    except StoreError as e:  # the store cannot be used: one line naming --store
        raise CliError(str(e)) from None


def _limit_default(defaults: Settings, key: str) -> int:
    """The value a limit takes when neither the flag nor its variable is given."""
    if key == "max_store_mb":
        return defaults.max_store_bytes >> 20
    if key == "max_body_kb":
        return defaults.max_body_bytes >> 10
    if key == "max_run_mb":
        return defaults.max_run_bytes >> 20
    if key == "store_mb":
        return defaults.max_db_bytes >> 20
    if key == "store_max_mb":
        return defaults.max_db_total_bytes >> 20
    if hasattr(defaults, key):
        return int(getattr(defaults, key))
    return int(getattr(Limits(), key))


def add_serve(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve the web app", formatter_class=HELP)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on")
    p.add_argument("--workers", type=int, default=1, help="worker processes")
    p.add_argument(
        "--access-log",
        action="store_true",
        default=os.environ.get("PAGEDVIZ_ACCESS_LOG", "").lower() in ("1", "true", "yes", "on"),
        help="log one line per request (also PAGEDVIZ_ACCESS_LOG=1)",
    )
    p.add_argument(
        "--store",
        metavar="DIR",
        default=None,
        help="folder of the run store's database (SQLite): run ids answer across restarts and from"
        " every worker (default: a temporary folder, removed when the server ends; also $PAGEDVIZ_STORE)",
    )
    p.add_argument(
        "--live-token",
        metavar="T",
        default=None,
        help="turn on live runs (POST /api/runs/live: a vLLM server's recorder with PAGEDVIZ_RECORD="
        "http://HOST:PORT sends its steps as it schedules them) for senders of this bearer token"
        " (default: off; also $PAGEDVIZ_LIVE_TOKEN)",
    )
    defaults = Settings()
    for key in SERVE_LIMITS:
        p.add_argument(
            f"--{key.replace('_', '-')}",
            dest=key,
            type=int,
            metavar="N",
            help=f"limit (default: {_limit_default(defaults, key)}; also ${SERVE_LIMITS[key]})",
        )
    p.set_defaults(fn=cmd_serve)


def main(argv: list[str] | None = None) -> int:
    parser, sub = build_parser()
    add_serve(sub)
    return core_main(argv, parser)


if __name__ == "__main__":
    sys.exit(main())
