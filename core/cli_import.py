"""`pagedviz import FILE.jsonl [--json]`: replay a recording of a real vLLM 0.33 server
(pagedviz.record) through pagedviz's runner (core/replay.py), and say whether pagedviz's own
scheduler agrees with it. A bad recording is one line on stderr naming its line, exit 2."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pagedviz.core.cli import HELP, CliError, make_console, render_step
from pagedviz.core.upstream import upstream_of


def imported_dict(imported: Any) -> dict[str, Any]:
    """`pagedviz run --json`'s contract plus the recording's header, notes and agreement."""
    return {
        "scenario": imported.scenario.to_dict(),
        "upstream": upstream_of(imported.scenario),
        "truncated": False,
        "recording": {
            "header": imported.header.model_dump(),
            "notes": imported.notes,
            "agreement": imported.agreement.to_dict(),
        },
        "steps": [t.to_dict() for t in imported.traces],
    }


def cmd_import(args: argparse.Namespace) -> int:
    from pagedviz.core.recording import RecordingError, bounded_lines, max_line_bytes, read_recording
    from pagedviz.core.replay import ReplayError, import_recording

    limit = max_line_bytes()
    try:
        with open(args.file, "rb") as f:
            header, steps = read_recording(bounded_lines(f, limit), limit)
    except OSError as e:
        raise CliError(f"{args.file}: {e.strerror or e}") from None
    except RecordingError as e:
        raise CliError(f"{args.file}: {e}") from None
    try:
        imported = import_recording(header, steps)
    except ReplayError as e:
        raise CliError(f"{args.file}: {e}") from None
    if args.json:
        json.dump(imported_dict(imported), sys.stdout)
        sys.stdout.write("\n")
        return 0
    console = make_console(args.wide)
    console.print(imported.scenario.name, highlight=False)
    for note in imported.notes:
        console.print(f"  {note}", highlight=False)
    console.print()
    for t in imported.traces:
        render_step(t, console, args.wide)
        console.print()
    return 0


def add_import(sub: Any) -> None:
    p = sub.add_parser(
        "import",
        help="replay a recording of a vLLM server (pagedviz.record)",
        formatter_class=HELP,
    )
    p.add_argument("file", help="the recording, FILE.jsonl (PAGEDVIZ_MAX_RECORD_LINE_MB bounds a line)")
    p.add_argument("--json", action="store_true", help="print the trace contract as JSON")
    p.add_argument(
        "--wide", action="store_true", help="print tables whole, not split to the terminal's width"
    )
    p.set_defaults(fn=cmd_import)
