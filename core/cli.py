"""`pagedviz`'s engine commands: run a scenario or preset in the terminal (tables or the trace
contract as JSON) and list the presets. The web app adds `serve` (pagedviz.app.cli); this module
imports nothing from the web app, so it runs where only torch and numpy are installed."""

from __future__ import annotations

import argparse
import difflib
import functools
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from pagedviz.core import __version__
from pagedviz.core.device import DeviceUnavailableError
from pagedviz.core.limits import SettingError
from pagedviz.core.narrate import narrate
from pagedviz.core.presets import list_presets, preset_dict
from pagedviz.core.registry import make_engine
from pagedviz.core.runners.stages import base_name
from pagedviz.core.scenario import Scenario
from pagedviz.core.scenario_parts import ENGINES, ScenarioError
from pagedviz.core.schema import scenario_schema
from pagedviz.core.tokenizer import decode_ids
from pagedviz.core.trace import StepTrace
from pagedviz.core.upstream import UPSTREAM, upstream_of

VLLM_VERSION = UPSTREAM["vllm"]["version"]


class CliError(Exception):
    pass


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


REQUEST_ARRAYS = (
    "num_computed_tokens_cpu",
    "num_scheduled_tokens",
    "num_tokens",
    "cu_num_tokens",
    "seq_lens",
    "context_lens",
    "logits_indices",
    "last_indices",
    "discard_request_mask",
)
TOKEN_ARRAYS = (
    "req_indices",
    "arange",
    "positions",
    "token_indices",
    "input_ids",
    "block_table_indices",
    "block_numbers",
    "block_offsets",
    "slot_mapping",
)


def make_console(wide: bool = False) -> Console:
    """stdout as rich sees it: the terminal's width (COLUMNS, else 80 when not a terminal), or
    no limit with --wide. Markup is off: request ids and prompts are user text."""
    return Console(width=1 << 20 if wide else None, markup=False, highlight=False, emoji=False)


def _table(first: str, headers: list[str], rows: list[list[str]]) -> Table:
    table = Table(box=box.MARKDOWN, show_edge=True, pad_edge=True)
    table.add_column(first, justify="left", no_wrap=True)
    for h in headers:
        table.add_column(h, justify="right", no_wrap=True)
    for r in rows:
        table.add_row(*r)
    return table


def column_tables(
    console: Console, first: str, headers: list[str], rows: list[tuple[str, list[Any]]]
) -> list[Table]:
    """A table with one column per token (or request), split into tables whose columns fit the
    console's width; each row is (array name, its values)."""
    cells = [[str(v) for v in values] for _, values in rows]
    names = [name for name, _ in rows]
    n = len(headers)
    name_w = max([len(first), *map(len, names)])
    col_w = max([1, *map(len, headers), *(len(c) for r in cells for c in r)])
    # rich's markdown box: "| " + cell + " " per column, then "|"
    per = max(1, (console.width - 1 - (name_w + 3)) // (col_w + 3))
    out = []
    for lo in range(0, max(n, 1), per):
        hi = min(n, lo + per)
        out.append(_table(first, headers[lo:hi], [[nm, *r[lo:hi]] for nm, r in zip(names, cells)]))
    return out


def draw_grid(tab: np.ndarray, rows: int, filled: np.ndarray | None = None, width: int = 1 << 20) -> str:
    """A table the way the documents draw it: `| 1  | 2  | 0  |`; '?' where nothing is filled.
    Columns past `width` characters continue below, under a `columns lo..hi` line."""
    w = max(2, len(str(int(tab.max()))) if tab.size else 1)
    ncols = tab.shape[1] if tab.ndim == 2 else 0
    per = max(1, (width - 2) // (w + 3))
    lines = []
    for lo in range(0, max(ncols, 1), per):
        hi = min(ncols, lo + per)
        if ncols > per:
            lines.append(f"columns {lo}..{hi - 1}:")
        for r in range(rows):
            cells = []
            for c in range(lo, hi):
                txt = "?" if filled is not None and c >= filled[r] else str(int(tab[r, c]))
                cells.append(txt.ljust(w))
            lines.append("| " + " | ".join(cells) + " |")
    if rows < tab.shape[0]:
        lines.append(f"... ({tab.shape[0] - rows} more rows, all empty)")
    return "\n".join(lines)


def print_tables(console: Console, tables: list[Table]) -> None:
    """The tables' lines, one empty line between two tables (the markdown box draws blank lines
    above and below each: dropped)."""
    for i, table in enumerate(tables):
        if i:
            console.out("")
        with console.capture() as cap:
            console.print(table)
        for line in cap.get().splitlines():
            if line.strip():
                console.out(line.rstrip())


def _short(text: str, wide: bool, n: int = 12) -> str:
    return text if wide or len(text) <= n else text[: n - 1] + "…"


def render_step(t: StepTrace, console: Console, wide: bool = False) -> None:
    """Print one step's tables: request level, token level, scalars, system level."""
    a = t.arrays
    sch = t.scheduler
    say = console.print
    say(f"=== step {t.step}" + (" (idle)" if t.idle else "") + " ===")
    say(
        f"scheduled: {sch.get('num_scheduled_tokens', {})}  total: {sch.get('total_num_scheduled_tokens', 0)}"
    )
    for key in ("new_req_ids", "resumed_req_ids", "preempted_req_ids", "finished_req_ids", "waiting_req_ids"):
        if sch.get(key):
            say(f"{key}: {sch[key]}")
    if sch.get("new_block_ids"):
        say(f"new_block_ids: {sch['new_block_ids']}")
    groups = t.kv_cache.get("kv_cache_groups") or []
    if len(groups) > 1:  # several KV cache groups: each request's blocks per group, null block 0
        say("kv_cache_groups: " + "; ".join(_group_label(g, i) for i, g in enumerate(groups)))
        say(f"block_ids (one list per group): {sch.get('block_ids', {})}")
    if sch.get("window_drops"):
        say(f"window_drops: {sch['window_drops']}")
    for key in ("waiting_causes", "preemption_causes"):  # why each waits / was preempted
        if sch.get(key):
            say(f"{key}: {sch[key]}")
    for m in t.batch.get("moves", []):
        say(f"condense: request {m['req_id']} moved from row {m['from']} to row {m['to']}")
    if t.idle:
        return
    req_ids = t.batch["req_ids"]
    say("\n-- request level (one column per batch row) --")
    rows: list[tuple[str, list[Any]]] = [("req_id", [_short(r, wide) for r in req_ids])]
    rows += [(n, a[n].tolist()) for n in REQUEST_ARRAYS if n in a]
    print_tables(console, column_tables(console, "row", [str(i) for i in range(len(req_ids))], rows))
    for n in ("query_start_loc", "cu_seqlens_q", "cu_seqlens_k"):
        if n in a:
            say(f"{n}: {a[n].tolist()}")
    say("\n-- token level (one column per scheduled token) --")
    # each KV cache group's copy (suffix _g{g}) right after group 0's
    names = [n for base in TOKEN_ARRAYS for n in _with_group_copies(base, a)]
    if names:
        T = len(a[names[0]])
        token_rows: list[tuple[str, list[Any]]] = [(n, a[n].tolist()) for n in names]
        print_tables(console, column_tables(console, "token", [str(i) for i in range(T)], token_rows))
    scheduled = int(t.scalars.get("total_num_scheduled_tokens", 0))
    if "slot_mapping" in a and len(a["slot_mapping"]) > scheduled:
        # CUDA-graph padding: the padded entries are -1 (written nowhere)
        say(f"slot_mapping padded to num_input_tokens={len(a['slot_mapping'])}: {a['slot_mapping'].tolist()}")
    for n in ("query_start_loc", "seq_lens"):
        entry = t.array_entries.get(n)
        if entry is not None and entry.buffer is not None and len(entry.buffer) > (entry.valid or 0):
            say(f"{n} buffer (first {entry.valid} real, then padding): {entry.buffer.tolist()}")
    # everything else the step computed (speculative decoding, async scheduling, M-RoPE, what-if)
    listed = {*REQUEST_ARRAYS, *TOKEN_ARRAYS, "query_start_loc", "cu_seqlens_q", "cu_seqlens_k"}
    listed |= {"token_ids_cpu", "block_table", "block_tables", "attn_mask"}
    for n, arr in a.items():
        if n not in listed and base_name(n) not in listed:
            say(f"{n}: {arr.tolist()}")
    say("\n-- scalars --")
    say("  ".join(f"{k}={v}" for k, v in t.scalars.items()))
    say("\n-- system level --")
    num_rows = len(req_ids)
    grid = functools.partial(draw_grid, width=console.width)
    out = console.out  # pre-drawn lines: never re-wrapped
    if "token_ids_cpu" in a:
        filled = np.array([len(tokens) for tokens in _row_tokens(t, a)])
        say("token_ids_cpu (max_num_reqs x max_model_len):")
        out(
            grid(
                a["token_ids_cpu"],
                min(num_rows + 1, a["token_ids_cpu"].shape[0]),
                np.concatenate([filled, np.zeros(a["token_ids_cpu"].shape[0], dtype=int)]),
            ),
        )
        for i, rid in enumerate(req_ids):
            say(f"  row {i} (request {rid}): {decode_ids(a['token_ids_cpu'][i, : filled[i]])!r}")
    bt_name = "block_table" if "block_table" in a else "block_tables"
    for i, name in enumerate(_with_group_copies(bt_name, a)):  # one table per KV cache group
        where = f" (group {_group_label(groups[i], i)})" if len(groups) > 1 and i < len(groups) else ""
        say(f"{name}{where}:")
        out(grid(a[name], min(num_rows + 1, a[name].shape[0])))
    if "attn_mask" in a:
        say(f"attn_mask {a['attn_mask'].shape[0]} x {a['attn_mask'].shape[1]} (1 = masked):")
        out(grid(a["attn_mask"], a["attn_mask"].shape[0]))
    kv = t.kv_cache
    say(
        f"free_block_queue (head first): {kv['free_block_queue'][:24]}"
        + (" ..." if len(kv["free_block_queue"]) > 24 else "")
    )
    if "num_usable_blocks" in kv:
        say(f"KV pool: {len(kv['free_block_queue'])} of {kv['num_usable_blocks']} usable blocks free")
    if t.forward:
        say(f"forward: {t.forward}")
    say(f"sampled: {t.sampled_token_ids}")


def _with_group_copies(name: str, a: dict[str, np.ndarray]) -> list[str]:
    """`name` and its KV cache groups' copies (name_g1, name_g2, ...) that the step holds."""
    out = [name] if name in a else []
    g = 1
    while f"{name}_g{g}" in a:
        out.append(f"{name}_g{g}")
        g += 1
    return out


def _group_label(group: dict[str, Any], i: int) -> str:
    """`1 sliding_attention layers [1] window 8`: a KV cache group as the trace gives it."""
    window = f" window {group['sliding_window']}" if group.get("sliding_window") else ""
    return f"{i} {group['kind']} layers {group['layers']}{window}"


def _row_tokens(t: StepTrace, a: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Known tokens of each active row: num_tokens when recorded, else up to seq_lens."""
    lens = a["num_tokens"] if "num_tokens" in a else a["seq_lens"]
    return [a["token_ids_cpu"][i, : int(lens[i])] for i in range(len(t.batch["req_ids"]))]


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
    json.dump(scenario_schema(), sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


class HELP(argparse.ArgumentDefaultsHelpFormatter):
    """Every --help shows each option's default; flags and options without one say nothing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


class OneLineParser(argparse.ArgumentParser):
    """argparse, with its errors as one line on stderr (exit 2) like every other error here."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


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
    from pagedviz.core.cli_import import add_import  # noqa: PLC0415 (it imports this module)

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
    except DeviceUnavailableError as e:
        return fail(f"{e.field}: {e}")
    except BrokenPipeError:
        # the reader (`| head`) went away: stop quietly, as other command-line tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (MemoryError, RecursionError) as e:
        return fail(f"the scenario is too large for this machine ({type(e).__name__})")
    except Exception as e:  # never a traceback: one line, and the exit code of every other error
        return fail(f"unexpected error: {type(e).__name__}: {str(e)[:200]}")


def fail(message: str) -> int:
    """Print one line on stderr (control characters from the input escaped) and give exit code 2."""
    safe = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in message)
    print(f"pagedviz: {safe}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
