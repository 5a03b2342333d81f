"""The in-process server behind pagedviz.notebook: the app on a free loopback port, in a thread of
the kernel, started on the first `show` and shared by the later ones; stopped when the kernel's
interpreter exits (atexit) or by `stop()`. Runs compute in threads of the kernel (no worker
processes), and the pages may be framed by the notebook (that server alone, on 127.0.0.1)."""

from __future__ import annotations

import atexit
import socket
import threading
import time

import uvicorn

HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0


class Server:
    def __init__(self) -> None:
        from pagedviz.app.main import create_app
        from pagedviz.app.settings import Settings

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((HOST, 0))  # a free port, chosen by the system and held from now on
        self.port = int(self.sock.getsockname()[1])
        app = create_app(Settings(compute_in="thread", page_ancestors="*"))
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, name="pagedviz-notebook", daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"pagedviz.notebook: the server on {HOST}:{self.port} did not start")
            time.sleep(0.01)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def alive(self) -> bool:
        return self.thread.is_alive() and not self.server.should_exit

    def stop(self, timeout: float = 5.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        self.sock.close()


_server: Server | None = None
_lock = threading.Lock()


def get() -> Server:
    """The running server, started on the first call."""
    global _server
    with _lock:
        if _server is None or not _server.alive:
            _server = Server()
        return _server


def running() -> Server | None:
    return _server if _server is not None and _server.alive else None


@atexit.register
def stop() -> None:
    """Stop the server (at the kernel's end; a later `show` starts a new one)."""
    global _server
    with _lock:
        if _server is not None:
            _server.stop()
            _server = None
