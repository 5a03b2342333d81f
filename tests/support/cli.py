"""The `pagedviz` command, two ways, for the tests that check what it prints and how it exits
(tests/engine/test_cli.py, test_hostile_cli.py, tests/api/test_embed_server.py):

- `pagedviz(...)`: a real subprocess, for what only a process shows: the interpreter's exit code,
  its terminal and encoding, a closed pipe, a signal;
- `in_process(...)`: the same command line through the real `main(argv)` of pagedviz.app.cli in
  this test process, its stdout and stderr captured as the subprocess's would be (bytes decoded
  with backslashreplace; rich at COLUMNS columns, 80 unless given, as on a pipe) and its exit code
  (main's return, or argparse's SystemExit). Each subprocess costs an interpreter start and, for a
  run, torch's import (1.5 to 5 s under load); this costs the command's own work only.

Both return a subprocess.CompletedProcess, so a test reads `.returncode`, `.stdout` and `.stderr`
the same way whichever it uses."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


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


@contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """os.environ with `env` added (COLUMNS and LINES dropped first) for the block, then exactly
    what it was before (a command may set variables of its own: `serve` does)."""
    saved = dict(os.environ)
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def in_process(
    *args: str, env: dict[str, str] | None = None, columns: int = 80
) -> subprocess.CompletedProcess[str]:
    """`pagedviz ARGS...` through pagedviz.app.cli's main() in this process (see the docstring)."""
    from pagedviz.app.cli import main

    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    saved = sys.stdout, sys.stderr
    with environment({"COLUMNS": str(columns), **(env or {})}):
        sys.stdout, sys.stderr = out, err
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse: --help, --version, a refused argument
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            sys.stdout, sys.stderr = saved

    def text(stream: io.TextIOWrapper) -> str:
        stream.flush()
        raw = stream.buffer.getvalue()  # type: ignore[attr-defined]
        return raw.decode("utf-8", errors="backslashreplace")

    return subprocess.CompletedProcess(["pagedviz", *args], code, text(out), text(err))


def one_line_exit_2(r: subprocess.CompletedProcess[str]) -> str:
    """The one line on stderr of a refused command, after checking it exited 2 with no traceback."""
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r.stderr.strip()
