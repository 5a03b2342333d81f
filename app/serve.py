"""`pagedviz serve`: start uvicorn on the app, printing the URL and the device first."""

from __future__ import annotations

import os

import uvicorn

from core.device import resolve_device


def serve(
    host: str = "127.0.0.1", port: int = 8000, workers: int = 1, env: dict[str, str] | None = None
) -> int:
    for key, value in (env or {}).items():
        os.environ[key] = value  # read by Settings.from_env in every worker
    shown = "localhost" if host in ("127.0.0.1", "0.0.0.0") else host
    print(
        f"pagedviz: serving on http://{shown}:{port}/ (device: {resolve_device('auto')}, workers: {workers})",
        flush=True,
    )
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="warning",
        access_log=False,
    )
    return 0
