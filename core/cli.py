"""`pagedviz`'s engine commands: run a scenario or preset in the terminal (tables or the trace
contract as JSON) and list the presets. The web app adds `serve` (pagedviz.app.cli); this module
imports nothing from the web app, so it runs where only torch and numpy are installed."""

from __future__ import annotations

import argparse
import difflib
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from pagedviz.core import __version__
from pagedviz.core.cli_common import HELP, CliError, OneLineParser, make_console, print_tables
from pagedviz.core.cli_import import add_import
from pagedviz.core.limits import SettingError
from pagedviz.core.presets import list_presets, preset_dict
from pagedviz.core.registry import make_engine
from pagedviz.core.scenario import Scenario
from pagedviz.core.scenario_parts import ENGINES, ScenarioError
from pagedviz.core.trace import StepTrace
from pagedviz.core.upstream import UPSTREAM, upstream_of

# Imported where used, not here: the tables (cli_tables), the narration, the schema's pydantic
# models and the device module all import torch or pydantic, which `--version`, `--help`, `presets`
# and a refused argument never need (a process that imports torch starts 1.5 s slower)

VLLM_VERSION = UPSTREAM["vllm"]["version"]


def load_scenario(ref: str, engine: str | None = None) -> Scenario:
    """A preset id or a path to a scenario JSON file; `engine` (--engine) replaces its `engine`."""
    path = Path(ref)
    if path.suffix == ".json" or path.exists():
        try:
            raw = path.read_text(encoding="utf-8")
        except OSError as e:
            raise CliError(f"cannot read {ref}: {e.strerror}") from e
        except UnicodeDecodeError as e:
            raise CliError(f"{ref} is not UTF-8 text (byte {e.start}: {e.reason})") from None
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as e:
            raise CliError(f"{ref} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
        except RecursionError:
            raise CliError(f"{ref}: the JSON is nested too deeply") from None
    else:
        try:
            data = preset_dict(ref)
        except KeyError:
            ids = [p["id"] for p in list_presets()]
            close = difflib.get_close_matches(ref, ids, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise CliError(
                f"unknown preset {ref[:60]!r}; {hint}(presets: {', '.join(ids)}); or give a .json file"
            ) from None
    if engine is not None and isinstance(data, dict):
        data = {**data, "engine": engine}
    return Scenario.from_dict(data)


class RunProgress:
    """A rich progress bar on a terminal's stderr, shown once a run has taken a second
    (PAGEDVIZ_PROGRESS_AFTER_S: another delay)."""

    def __init__(self, max_steps: int, after_s: float | None = None) -> None:
        if after_s is None:
            raw = os.environ.get("PAGEDVIZ_PROGRESS_AFTER_S", "")
            after_s = float(raw) if raw.replace(".", "", 1).isdigit() else 1.0
        self.max_steps, self.start, self.after_s = max_steps, time.monotonic(), after_s
        self.console = Console(stderr=True)
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def update(self, step: int) -> None:
        if self.bar is None:
            if not self.console.is_terminal or time.monotonic() - self.start < self.after_s:
                return
            self.bar = Progress(
                TextColumn("pagedviz: step {task.completed} (at most {task.total})"),
                BarColumn(),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("run", total=self.max_steps)
        assert self.task is not None
        self.bar.update(self.task, completed=step)

    def done(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def cmd_run(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario, args.engine)
    engine = make_engine(scenario)
    # here, once the scenario is valid: they import torch (as the engine just did)
    from pagedviz.core.cli_tables import render_step
    from pagedviz.core.narrate import narrate

    if args.step is not None and not 1 <= args.step <= scenario.max_steps:
        raise CliError(f"--step must be between 1 and max_steps={scenario.max_steps} (got {args.step})")
    traces: list[StepTrace] = []
    before: dict[int, StepTrace | None] = {}  # each shown step's previous step, for --narrate
    prev: StepTrace | None = None
    progress = RunProgress(scenario.max_steps)
    try:
        for t in engine.run():
            progress.update(t.step)
            if args.step is None or t.step == args.step:
                traces.append(t)
                before[t.step] = prev
            prev = t
            if args.step is not None and t.step >= args.step:
                break
    finally:
        progress.done()
    last = prev if engine.done else None  # the run's final step, when it was reached
    if args.step is not None and not traces:
        raise CliError(f"--step {args.step}: the run has only {engine.step_no} steps")
    if args.json:
        json.dump(
            {
                "scenario": scenario.to_dict(),
                "upstream": upstream_of(scenario),
                "truncated": engine.truncated,
                "steps": [
                    {**t.to_dict(), "narration": narrate(t, before[t.step], scenario.config, t is last)}
                    if args.narrate
                    else t.to_dict()
                    for t in traces
                ],
            },
            sys.stdout,
        )
        sys.stdout.write("\n")
        return 0
    console = make_console(args.wide)
    by = f", computed by vLLM {VLLM_VERSION}'s own code" if scenario.engine == "vllm" else ""
    console.print(f"{scenario.name} ({scenario.flavor}) on {engine.device}{by}")
    for t in traces:
        if args.narrate:
            console.out(render_narration(t, before[t.step], scenario, args.lang, t is last), highlight=False)
        else:
            render_step(t, console, args.wide)
        console.print()
    if engine.truncated:
        console.print(f"(cut short at max_steps={scenario.max_steps})")
    return 0


def render_narration(t: StepTrace, prev: StepTrace | None, scenario: Scenario, lang: str, last: bool) -> str:
    """The step's narration (core/narrate.py): what happened and why, then each stage's numbers."""
    from pagedviz.core.narrate import narrate

    lines = [f"step {t.step}" + (" (idle)" if t.idle else "")]
    for item in narrate(t, prev, scenario.config, last):
        stage = f"[{item['stage']}] " if item["key"].startswith("stage:") else ""
        lines.append(f"  - {stage}{item['text'][lang]}")
    return "\n".join(lines)


def cmd_presets(args: argparse.Namespace) -> int:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for name in ("id", "flavor", "title"):
        table.add_column(name, no_wrap=name != "title")
    for p in list_presets():
        title = p["title"] + (f"\nfollows {p['document']}" if p["document"] else "")
        table.add_row(p["id"], p["flavor"], title)
    print_tables(make_console(), [table])
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from pagedviz.core.schema import scenario_schema

    json.dump(scenario_schema(), sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


def build_parser() -> tuple[argparse.ArgumentParser, Any]:
    """The parser of the engine's commands; the web app adds `serve` to it (pagedviz.app.cli)."""
    parser = OneLineParser(prog="pagedviz", description=__doc__, formatter_class=HELP)
    parser.add_argument("--version", action="version", version=f"pagedviz {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a scenario file or a preset", formatter_class=HELP)
    run.add_argument("scenario", help="preset id (see `pagedviz presets`) or SCENARIO.json")
    run.add_argument(
        "--step",
        type=int,
        metavar="N",
        help="show only step N (numbered from 1; the run computes up to it). Left out: every step of the"
        " run, from 1 until all requests finish or max_steps (with --json, all of them in the steps list)",
    )
    run.add_argument("--json", action="store_true", help="print the trace contract as JSON")
    run.add_argument(
        "--engine",
        choices=ENGINES,
        help="what computes the steps (replaces the scenario's `engine`): pagedviz, or vllm (vLLM 0.33.0's "
        "own scheduler and input preparation on the CPU; needs pip install 'pagedviz[vllm]')",
    )
    run.add_argument("--narrate", action="store_true", help="say what happened in each step and why")
    run.add_argument("--lang", choices=("en", "zh"), default="en", help="language of --narrate")
    run.add_argument(
        "--wide", action="store_true", help="print tables whole, not split to the terminal's width"
    )
    run.set_defaults(fn=cmd_run)
    sub.add_parser("presets", help="list the presets", formatter_class=HELP).set_defaults(fn=cmd_presets)
    sub.add_parser(
        "schema",
        help="print the scenario format as a JSON Schema (limits from PAGEDVIZ_MAX_*)",
        formatter_class=HELP,
    ).set_defaults(fn=cmd_schema)
    add_import(sub)
    return parser, sub


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    if parser is None:
        parser, _ = build_parser()
    # text the terminal cannot show (another encoding, a lone surrogate) prints escaped, not as a crash
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    args = parser.parse_args(argv)
    try:
        return int(args.fn(args))
    except ScenarioError as e:
        return fail("invalid scenario: " + "; ".join(f"{loc}: {msg}" for loc, msg in e.errors))
    except (SettingError, CliError) as e:
        return fail(str(e))
    except BrokenPipeError:
        # the reader (`| head`) went away: stop quietly, as other command-line tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (MemoryError, RecursionError) as e:
        return fail(f"the scenario is too large for this machine ({type(e).__name__})")
    except Exception as e:  # never a traceback: one line, and the exit code of every other error
        if is_device_error(e):
            return fail(f"{e.field}: {e}")  # type: ignore[attr-defined]
        return fail(f"unexpected error: {type(e).__name__}: {str(e)[:200]}")


def is_device_error(e: Exception) -> bool:
    """Whether `e` is the core's DeviceUnavailableError (a scenario's `config.device` this machine
    lacks). Only code that imported pagedviz.core.device (and so torch) can raise it: when that
    module is not loaded, the answer is no, without importing torch to say so."""
    device = sys.modules.get("pagedviz.core.device")
    return device is not None and isinstance(e, device.DeviceUnavailableError)


def fail(message: str) -> int:
    """Print one line on stderr (control characters from the input escaped) and give exit code 2."""
    safe = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in message)
    print(f"pagedviz: {safe}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
