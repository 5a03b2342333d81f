"""`pagedviz serve`: start uvicorn on the app, printing the URL and the device first (and one
line per request with the access log); and `running_server`, the same in a subprocess for tests
and benchmarks. Neither leaves anything in the temporary directory."""

from __future__ import annotations

import copy
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import uvicorn

from pagedviz.app.db import check_store
from pagedviz.app.settings import Settings


def check_listen(host: str, port: int) -> None:
    """Raise OSError (with its reason) when host:port cannot be listened on, before anything starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))


def log_config(access_log: bool) -> dict[str, Any]:
    """uvicorn's logging: warnings and errors only, plus one line per request with the access log."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["loggers"]["uvicorn.error"]["level"] = "WARNING"
    config["loggers"]["uvicorn.access"]["level"] = "INFO" if access_log else "WARNING"
    return config


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    env: dict[str, str] | None = None,
    access_log: bool = False,
) -> int:
    for key, value in (env or {}).items():
        os.environ[key] = value  # read by Settings.from_env in every worker
    Settings.from_env()  # a bad PAGEDVIZ_* value stops here, naming the variable (SettingError)
    temporary = None
    if os.environ.get("PAGEDVIZ_STORE"):
        check_store(os.environ["PAGEDVIZ_STORE"])  # a store that cannot be used stops here (StoreError)
    else:
        # no store named: the workers share one in a temporary folder, for as long as the server lives
        # (named with this process's id: running_server removes it after killing a server that
        # would not stop)
        temporary = os.environ["PAGEDVIZ_STORE"] = tempfile.mkdtemp(prefix=f"pagedviz-store-{os.getpid()}-")
    # here, once the settings and the store are known to be usable: it imports torch (a second and
    # more), which a server that stops at start has no use for
    from pagedviz.core.device import resolve_device

    shown = "localhost" if host in ("127.0.0.1", "0.0.0.0") else host
    print(
        f"pagedviz: serving on http://{shown}:{port}/ (device: {resolve_device('auto')}, workers: {workers})"
        + (", access log on" if access_log else ""),
        flush=True,
    )
    # uvicorn stops on SIGTERM, then raises it again with the handler it found: the default one
    # ends the process there, before the finally below (a server stopped by `docker stop`,
    # systemd or a test left its temporary store behind). This one removes the store first, then
    # ends the process as the default would have, at once (the compute processes end as their
    # pipe closes).
    def on_sigterm(signum: int, frame: Any) -> None:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signum)

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        uvicorn.run(
            "pagedviz.app.main:create_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_config=log_config(access_log),
            log_level=None,
            access_log=access_log,
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
        if temporary is not None:  # made here, so removed here
            os.environ.pop("PAGEDVIZ_STORE", None)
            shutil.rmtree(temporary, ignore_errors=True)
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class RunningServer:
    url: str
    pid: int
    log: IO[str]

    def output(self) -> str:
        """What the server has printed so far (stdout and stderr)."""
        self.log.flush()
        self.log.seek(0)
        return self.log.read()


@contextmanager
def running_server(
    *extra: str, env: dict[str, str] | None = None, timeout: float = 60, stop_timeout: float = 10
) -> Iterator[RunningServer]:
    """`pagedviz serve` in a subprocess on a free loopback port, until /healthz answers; yields
    its URL and pid and stops it afterwards (for tests, benchmarks and notebooks): SIGTERM, and
    SIGKILL if it has not ended within stop_timeout seconds, after which the temporary store it
    could not remove is removed here."""
    port = free_port()
    child_env = {**os.environ, **(env or {})}
    # an unnamed file (unlinked at once): the output never blocks the server, and nothing is left behind
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pagedviz.app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
            + list(extra),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env=child_env,
        )
        server = RunningServer(f"http://127.0.0.1:{port}", proc.pid, log)
        try:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"pagedviz serve exited: {server.output()}")
                try:
                    with urllib.request.urlopen(f"{server.url}/healthz", timeout=1) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"pagedviz serve did not answer within {timeout} s")
                time.sleep(0.2)
            yield server
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                # the server's own temporary store (serve), which a killed server leaves
                for left in Path(child_env.get("TMPDIR") or tempfile.gettempdir()).glob(
                    f"pagedviz-store-{proc.pid}-*"
                ):
                    shutil.rmtree(left, ignore_errors=True)
