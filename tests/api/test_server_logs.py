"""A real `pagedviz serve`: the access log (flag and variable) writes one line per request, and
the server and the test helpers leave nothing in the temporary directory."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from pagedviz.app.serve import RunningServer, running_server
from pagedviz.core.presets import preset_dict


def logged(server: RunningServer, needle: str, timeout: float = 10) -> str:
    """The server's output once `needle` shows in it (or after `timeout`)."""
    deadline = time.monotonic() + timeout
    while needle not in (out := server.output()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return out


@pytest.mark.parametrize(("args", "env"), [(["--access-log"], {}), ([], {"PAGEDVIZ_ACCESS_LOG": "1"})])
def test_access_log_writes_one_line_per_request(args: list[str], env: dict[str, str]) -> None:
    with running_server(*args, env=env) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        assert c.get("/api/presets/no-such-preset").status_code == 404
        assert c.get("/api/presets/seed-001").status_code == 200
        out = logged(server, '"GET /api/presets/seed-001 HTTP/1.1" 200')
    lines = out.splitlines()
    assert sum('"GET /api/presets/no-such-preset HTTP/1.1" 404' in line for line in lines) == 1
    assert sum('"GET /api/presets/seed-001 HTTP/1.1" 200' in line for line in lines) == 1
    assert "access log on" in lines[0]


def test_no_access_log_by_default() -> None:
    with running_server(env={"PAGEDVIZ_ACCESS_LOG": ""}) as server, httpx.Client(base_url=server.url) as c:
        assert c.get("/api/presets/seed-001").status_code == 200
        time.sleep(0.5)
        out = server.output()
    assert "GET /api/presets/seed-001" not in out and "GET /healthz" not in out


def test_server_and_helpers_leave_nothing_in_the_temp_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # this process's temp directory (where running_server keeps its output) is the test's own,
    # so that what other tests and xdist workers put in the shared one does not count
    own = tmp_path / "own"
    own.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(own))
    before = set(os.listdir(tempfile.gettempdir()))
    # one worker, stopped by SIGTERM (running_server's terminate): uvicorn raises the signal again
    # once it has stopped, and the store made for it goes before the process ends
    with running_server(env={"TMPDIR": str(tmp)}):
        assert [p.name.startswith("pagedviz-store-") for p in tmp.iterdir()] == [True]
    assert list(tmp.iterdir()) == []
    # two workers share their run store (a database) in a folder of the server's temporary directory
    with running_server("--workers", "2", env={"TMPDIR": str(tmp)}) as server:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            assert c.post("/api/runs", json=preset_dict("seed-001")).status_code == 201
        assert [p.name.startswith("pagedviz-store-") for p in tmp.iterdir()] == [True]
    assert list(tmp.iterdir()) == []
    # running_server's own output file is unnamed: no pagedviz entry appeared in the test's temp dir
    new = set(os.listdir(tempfile.gettempdir())) - before
    assert not [n for n in new if "pagedviz" in n]


def test_a_server_that_will_not_stop_is_killed_and_its_temporary_store_removed(tmp_path: Path) -> None:
    """running_server sends SIGTERM, then SIGKILL once stop_timeout has passed; the store the
    killed server could not remove (its temporary one, named with its pid) is removed for it."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    with running_server(env={"TMPDIR": str(tmp)}, stop_timeout=1) as server:
        assert [p.name.startswith(f"pagedviz-store-{server.pid}-") for p in tmp.iterdir()] == [True]
        os.kill(server.pid, signal.SIGSTOP)  # SIGTERM now waits; SIGKILL does not
    assert list(tmp.iterdir()) == []
