"""Run a coroutine to its end from a test, whatever the test's thread is running: asyncio.run() in
a thread of its own. A browser-tier test before it on the same xdist worker leaves Playwright's
sync API running an event loop in the worker's main thread, where asyncio.run() refuses to start."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
