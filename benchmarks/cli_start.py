"""How long a `pagedviz` command takes to start and answer, side by side in one run: commands that
build no engine (`--version`, `run --help`, an unknown preset refused) against one that does
(`run seed-001 --step 1`), and against a bare `python -c "import torch"`. The commands that build
no engine import no torch (pagedviz.core imports its names on first use), so they should take a
fraction of a run's start. Each command runs in a fresh subprocess, the commands interleaved round
by round so that other load on the machine falls on all of them alike; prints each one's median
wall time and CPU time (user + system of the child) and its ratio to the run's. Run:

    .venv/bin/python benchmarks/cli_start.py --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "pagedviz --version": ["-m", "pagedviz.app.cli", "--version"],
    "pagedviz run --help": ["-m", "pagedviz.app.cli", "run", "--help"],
    "pagedviz run no-such-preset (refused)": ["-m", "pagedviz.app.cli", "run", "no-such-preset"],
    "python -c 'import torch'": ["-c", "import torch"],
    "pagedviz run seed-001 --step 1": ["-m", "pagedviz.app.cli", "run", "seed-001", "--step", "1"],
}
REFERENCE = "pagedviz run seed-001 --step 1"


def timed(args: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (the child's user + system) of `python ARGS`."""
    before = os.times()
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], capture_output=True, check=False, timeout=300)
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5, help="runs of each command (medians are printed)")
    args = parser.parse_args()
    walls: dict[str, list[float]] = {name: [] for name in COMMANDS}
    cpus: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.rounds):
        for name, argv in COMMANDS.items():
            wall, cpu = timed(argv)
            walls[name].append(wall)
            cpus[name].append(cpu)
    ref_wall, ref_cpu = statistics.median(walls[REFERENCE]), statistics.median(cpus[REFERENCE])
    print(f"{'command':40} {'wall s':>8} {'CPU s':>8} {'wall / run':>11} {'CPU / run':>10}")
    for name in COMMANDS:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        print(f"{name:40} {wall:8.2f} {cpu:8.2f} {wall / ref_wall:10.2f}x {cpu / ref_cpu:9.2f}x")


if __name__ == "__main__":
    main()
