"""What the `pagedviz` commands share (the engine's, core/cli.py; `import`, core/cli_import.py; and
the web app's `serve`, pagedviz.app.cli): the error every command reports as one line, the help
formatter, the parser that reports its errors as one line, and the console the tables print on."""

from __future__ import annotations

import argparse
from typing import NoReturn

from rich.console import Console
from rich.table import Table


class CliError(Exception):
    pass


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


def make_console(wide: bool = False) -> Console:
    """stdout as rich sees it: the terminal's width (COLUMNS, else 80 when not a terminal), or
    no limit with --wide. Markup is off: request ids and prompts are user text."""
    return Console(width=1 << 20 if wide else None, markup=False, highlight=False, emoji=False)


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
