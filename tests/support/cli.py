"""The `pagedviz` command as a real subprocess, for the tests that check what it prints and how it
exits (tests/engine/test_hostile_cli.py, tests/api/test_embed_server.py)."""

from __future__ import annotations

import os
import subprocess
import sys


def pagedviz(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`pagedviz ARGS...` in a subprocess, `env` added to this process's environment."""
    return subprocess.run(
        [sys.executable, "-m", "pagedviz.app.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        errors="backslashreplace",
    )


def one_line_exit_2(r: subprocess.CompletedProcess[str]) -> str:
    """The one line on stderr of a refused command, after checking it exited 2 with no traceback."""
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r.stderr.strip()
