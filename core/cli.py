"""`pagedviz`'s engine commands: run a scenario or preset in the terminal (tables or the trace
contract as JSON) and list the presets. The web app adds `serve` (pagedviz.app.cli); this module
imports nothing from the web app, so it runs where only torch and numpy are installed."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from pagedviz.core.config import Scenario, ScenarioError, decode_ids
from pagedviz.core.device import DeviceUnavailableError
from pagedviz.core.presets import list_presets, preset_dict
from pagedviz.core.registry import make_engine
from pagedviz.core.trace import StepTrace
from pagedviz.core.upstream import UPSTREAM


class CliError(Exception):
    pass


def load_scenario(ref: str) -> Scenario:
    """A preset id or a path to a scenario JSON file."""
    path = Path(ref)
    if path.suffix == ".json" or path.exists():
        try:
            raw = path.read_text(encoding="utf-8")
        except OSError as e:
            raise CliError(f"cannot read {ref}: {e.strerror}") from e
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as e:
            raise CliError(f"{ref} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    else:
        try:
            data = preset_dict(ref)
        except KeyError:
            ids = ", ".join(p["id"] for p in list_presets())
            raise CliError(f"unknown preset {ref!r} (presets: {ids}); or give a .json file") from None
    return Scenario.from_dict(data)


def _row(cells: list[str], widths: list[int]) -> str:
    return "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths)) + " |"


def table(header: list[Any], rows: list[list[Any]]) -> str:
    header = [str(h) for h in header]
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)]
    lines = [_row(header, widths), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += [_row(r, widths) for r in cells]
    return "\n".join(lines)


def token_table(arrays: dict[str, np.ndarray], names: list[str], per_line: int = 16) -> str:
    names = [n for n in names if n in arrays]
    if not names:
        return ""
    T = len(arrays[names[0]])
    out = []
    for lo in range(0, max(T, 1), per_line):
        hi = min(T, lo + per_line)
        rows = [[n, *arrays[n][lo:hi].tolist()] for n in names]
        out.append(table(["token", *range(lo, hi)], rows))
    return "\n".join(out)


def draw_grid(tab: np.ndarray, rows: int, filled: np.ndarray | None = None) -> str:
    """A table the way the documents draw it: `| 1  | 2  | 0  |`; '?' where nothing is filled."""
    w = max(2, len(str(int(tab.max()))) if tab.size else 1)
    lines = []
    for r in range(rows):
        cells = []
        for c, val in enumerate(tab[r]):
            txt = "?" if filled is not None and c >= filled[r] else str(int(val))
            cells.append(txt.ljust(w))
        lines.append("| " + " | ".join(cells) + " |")
    if rows < tab.shape[0]:
        lines.append(f"... ({tab.shape[0] - rows} more rows, all empty)")
    return "\n".join(lines)


def render_step(t: StepTrace, scenario: Scenario) -> str:
    a = t.arrays
    sch = t.scheduler
    out = [f"=== step {t.step}" + (" (idle)" if t.idle else "") + " ==="]
    out.append(
        f"scheduled: {sch.get('num_scheduled_tokens', {})}  total: {sch.get('total_num_scheduled_tokens', 0)}"
    )
    for key in ("new_req_ids", "resumed_req_ids", "preempted_req_ids", "finished_req_ids", "waiting_req_ids"):
        if sch.get(key):
            out.append(f"{key}: {sch[key]}")
    if sch.get("new_block_ids"):
        out.append(f"new_block_ids: {sch['new_block_ids']}")
    for m in t.batch.get("moves", []):
        out.append(f"condense: request {m['req_id']} moved from row {m['from']} to row {m['to']}")
    if t.idle:
        return "\n".join(out)
    req_ids = t.batch["req_ids"]
    out.append("\n-- request level --")
    req_names = [
        n
        for n in (
            "num_computed_tokens_cpu",
            "num_scheduled_tokens",
            "num_tokens",
            "cu_num_tokens",
            "seq_lens",
            "context_lens",
            "logits_indices",
            "discard_request_mask",
        )
        if n in a
    ]
    rows = [[i, rid, *(a[n][i] for n in req_names)] for i, rid in enumerate(req_ids)]
    out.append(table(["row", "req", *req_names], rows))
    for n in ("query_start_loc", "cu_seqlens_q", "cu_seqlens_k"):
        if n in a:
            out.append(f"{n}: {a[n].tolist()}")
    out.append("\n-- token level --")
    out.append(
        token_table(
            a,
            [
                "req_indices",
                "arange",
                "positions",
                "token_indices",
                "input_ids",
                "block_table_indices",
                "block_numbers",
                "block_offsets",
                "slot_mapping",
            ],
        )
    )
    scheduled = int(t.scalars.get("total_num_scheduled_tokens", 0))
    if "slot_mapping" in a and len(a["slot_mapping"]) > scheduled:
        # CUDA-graph padding: the padded entries are -1 (written nowhere)
        out.append(
            f"slot_mapping padded to num_input_tokens={len(a['slot_mapping'])}: {a['slot_mapping'].tolist()}"
        )
    out.append("\n-- scalars --")
    out.append("  ".join(f"{k}={v}" for k, v in t.scalars.items()))
    out.append("\n-- system level --")
    num_rows = len(req_ids)
    if "token_ids_cpu" in a:
        filled = np.array([len(scenario_tokens) for scenario_tokens in _row_tokens(t, a)])
        out.append("token_ids_cpu (max_num_reqs x max_model_len):")
        out.append(
            draw_grid(
                a["token_ids_cpu"],
                min(num_rows + 1, a["token_ids_cpu"].shape[0]),
                np.concatenate([filled, np.zeros(a["token_ids_cpu"].shape[0], dtype=int)]),
            )
        )
        for i, rid in enumerate(req_ids):
            out.append(f"  row {i} (request {rid}): {decode_ids(a['token_ids_cpu'][i, : filled[i]])!r}")
    bt_name = "block_table" if "block_table" in a else "block_tables"
    if bt_name in a:
        out.append(f"{bt_name}:")
        out.append(draw_grid(a[bt_name], min(num_rows + 1, a[bt_name].shape[0])))
    if "attn_mask" in a:
        out.append(f"attn_mask {a['attn_mask'].shape[0]} x {a['attn_mask'].shape[1]} (1 = masked):")
        out.append(draw_grid(a["attn_mask"], a["attn_mask"].shape[0]))
    kv = t.kv_cache
    out.append(
        f"free_block_queue (head first): {kv['free_block_queue'][:24]}"
        + (" ..." if len(kv["free_block_queue"]) > 24 else "")
    )
    if t.forward:
        out.append(f"forward: {t.forward}")
    out.append(f"sampled: {t.sampled_token_ids}")
    return "\n".join(out)


def _row_tokens(t: StepTrace, a: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Known tokens of each active row: num_tokens when recorded, else up to seq_lens."""
    lens = a["num_tokens"] if "num_tokens" in a else a["seq_lens"]
    return [a["token_ids_cpu"][i, : int(lens[i])] for i in range(len(t.batch["req_ids"]))]


class Progress:
    """A one-line step counter on a terminal's stderr, shown only when a run takes a while."""

    def __init__(self, max_steps: int, after_s: float = 1.5) -> None:
        self.max_steps, self.start, self.after_s = max_steps, time.monotonic(), after_s
        self.shown = False
        self.tty = sys.stderr.isatty()

    def update(self, step: int) -> None:
        if self.tty and time.monotonic() - self.start > self.after_s:
            sys.stderr.write(f"\rpagedviz: step {step} (at most {self.max_steps})")
            sys.stderr.flush()
            self.shown = True

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def cmd_run(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario)
    engine = make_engine(scenario)
    if args.step is not None and not 1 <= args.step <= scenario.max_steps:
        raise CliError(f"--step must be between 1 and max_steps={scenario.max_steps} (got {args.step})")
    traces: list[StepTrace] = []
    progress = Progress(scenario.max_steps)
    for t in engine.run():
        progress.update(t.step)
        if args.step is None or t.step == args.step:
            traces.append(t)
        if args.step is not None and t.step >= args.step:
            break
    progress.done()
    if args.step is not None and not traces:
        raise CliError(f"--step {args.step}: the run has only {engine.step_no} steps")
    if args.json:
        json.dump(
            {
                "scenario": scenario.to_dict(),
                "upstream": UPSTREAM,
                "truncated": engine.truncated,
                "steps": [t.to_dict() for t in traces],
            },
            sys.stdout,
        )
        sys.stdout.write("\n")
        return 0
    print(f"{scenario.name} ({scenario.flavor}) on {engine.device}")
    for t in traces:
        print(render_step(t, scenario))
        print()
    if engine.truncated:
        print(f"(cut short at max_steps={scenario.max_steps})")
    return 0


def cmd_presets(args: argparse.Namespace) -> int:
    for p in list_presets():
        print(f"{p['id']:<18} {p['flavor']:<9} {p['title']}")
        if p["document"]:
            print(f"{'':<18} follows {p['document']}")
    return 0


def build_parser() -> tuple[argparse.ArgumentParser, Any]:
    """The parser of the engine's commands; the web app adds `serve` to it (pagedviz.app.cli)."""
    parser = argparse.ArgumentParser(prog="pagedviz", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a scenario file or a preset")
    run.add_argument("scenario", help="preset id (see `pagedviz presets`) or SCENARIO.json")
    run.add_argument("--step", type=int, help="show only this step (numbered from 1)")
    run.add_argument("--json", action="store_true", help="print the trace contract as JSON")
    run.set_defaults(fn=cmd_run)
    sub.add_parser("presets", help="list the presets").set_defaults(fn=cmd_presets)
    return parser, sub


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    if parser is None:
        parser, _ = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.fn(args))
    except ScenarioError as e:
        print("pagedviz: invalid scenario:", file=sys.stderr)
        for loc, msg in e.errors:
            print(f"  {loc}: {msg}", file=sys.stderr)
        return 2
    except DeviceUnavailableError as e:
        print(f"pagedviz: {e.field}: {e}", file=sys.stderr)
        return 2
    except CliError as e:
        print(f"pagedviz: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader (`| head`) went away: stop quietly, as other command-line tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
