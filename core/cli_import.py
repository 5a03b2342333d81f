"""`pagedviz import FILE.jsonl [--json]`: replay a recording of a real vLLM 0.33 server
(pagedviz.record) through pagedviz's runner (core/replay.py), and say whether pagedviz's own
scheduler agrees with it. A bad recording is one line on stderr naming its line, exit 2; a last
line cut mid-write is left out and a line says where the recording stops (exit 0). `--step N`
prints step N alone, without replaying the rest in full (core/replay_seek.py); a bad N is one
line naming --step, exit 2."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pagedviz.core.cli_common import HELP, CliError, make_console
from pagedviz.core.upstream import upstream_of


def recording_dict(imp: Any) -> dict[str, Any]:
    """The recording's header, notes (the agreement line first) and agreement."""
    return {
        "header": imp.header.model_dump(),
        "notes": imp.notes(),
        "agreement": imp.comparer.result().to_dict(),
        "cut": imp.cut.to_dict() if imp.cut else None,  # the last line, cut mid-write
    }


def cmd_import(args: argparse.Namespace) -> int:
    """Streams: the file is read twice (arrivals, then the replay) and each step is printed as it
    is replayed, so a long recording is never held whole."""
    from pagedviz.core.recording import RecordingError, bounded_lines, iter_recording, max_line_bytes
    from pagedviz.core.replay import ReplayError, StreamingImport

    limit = max_line_bytes()
    step = _step_arg(args.step)
    try:
        if step is not None:
            return _print_step(args, step, limit)
        with open(args.file, "rb") as first_file, open(args.file, "rb") as second_file:
            header, first = iter_recording(bounded_lines(first_file, limit), limit)
            _, second = iter_recording(bounded_lines(second_file, limit), limit)
            imp = StreamingImport(header, first, second)
            return _print(imp, args)
    except OSError as e:
        raise CliError(f"{args.file}: {e.strerror or e}") from None
    except (RecordingError, ReplayError) as e:
        raise CliError(f"{args.file}: {e}") from None


def _step_arg(raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        n = int(raw)
    except ValueError:
        raise CliError(f"--step: {raw[:40]!r} is not a step number (1, 2, ...)") from None
    if n < 1:
        raise CliError(f"--step: {n} is not a step number (the first step is 1)")
    return n


def _print_step(args: argparse.Namespace, n: int, limit: int) -> int:
    """Step n alone: the recording read once (its arrivals), then rolled forward with cheap steps
    to step n - 1 (core/replay_seek.py) and step n computed in full."""
    from pagedviz.core.recording import bounded_lines, iter_recording
    from pagedviz.core.replay import replay_problem, scenario_from, summarise
    from pagedviz.core.replay_scheduler import ReplayError
    from pagedviz.core.replay_seek import FileSource, Seeker

    with open(args.file, "rb") as f:
        header, steps = iter_recording(bounded_lines(f, limit), limit)
        problem = replay_problem(header)
        if problem:
            raise ReplayError(f"line 1: {problem}")
        summary = summarise(steps)
    if n > summary.num_steps:
        raise CliError(f"--step: {n} is past the recording's last step, {summary.num_steps}")
    scenario = scenario_from(header, summary)
    with open(args.file, "rb") as f:
        t = Seeker(header, scenario, FileSource(f), summary.num_steps, summary.num_steps + 1).step(n)
    if args.json:
        sys.stdout.write(json.dumps(t.to_dict()) + "\n")
        return 0
    console = make_console(args.wide)
    console.print(scenario.name, highlight=False)
    console.print()
    from pagedviz.core.cli_tables import render_step

    render_step(t, console, args.wide)
    return 0


def _print(imp: Any, args: argparse.Namespace) -> int:
    from pagedviz.core.cli_tables import render_step  # imports torch: only once there is a step to show

    out = sys.stdout
    if args.json:
        head = {"scenario": imp.scenario.to_dict(), "upstream": upstream_of(imp.scenario), "truncated": False}
        out.write(json.dumps(head)[:-1] + ', "steps": [')
        for n, t in enumerate(imp.run()):
            out.write(("," if n else "") + json.dumps(t.to_dict()))
        out.write('], "recording": ' + json.dumps(recording_dict(imp)) + "}\n")
        return 0
    console = make_console(args.wide)
    console.print(imp.scenario.name, highlight=False)
    console.print()
    for t in imp.run():
        render_step(t, console, args.wide)
        console.print()
    for note in imp.notes():
        if imp.cut is not None and note == imp.cut.text():
            note = imp.cut.text(args.lang)
        console.print(note, highlight=False)
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
        "--step",
        metavar="N",
        help="print step N alone, at once (the steps before it rolled forward, not replayed in full)",
    )
    p.add_argument(
        "--lang", choices=("en", "zh"), default="en", help="language of the line on a cut recording"
    )
    p.add_argument(
        "--wide", action="store_true", help="print tables whole, not split to the terminal's width"
    )
    p.set_defaults(fn=cmd_import)
