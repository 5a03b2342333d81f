"""The recorder's HTTP sink: with `PAGEDVIZ_RECORD=http://HOST:PORT` (or https://) the recording goes
to a running pagedviz (`pagedviz serve --live-token T`) instead of a file, as the server schedules.

The header opens a live run (`POST /api/runs/live`, answered with its run id); then the lines go in
batches (`POST /api/runs/{id}/lines`, up to MAX_LINES lines or MAX_BATCH_BYTES bytes, or what came
within MAX_WAIT_S seconds); the last batch, when the scheduler shuts down, says the run ended
(`end=true`). While the server has nothing to schedule, an empty batch every KEEPALIVE_S seconds
says it is alive; a recording that never says it ended (the server killed) is closed by pagedviz,
as cut, once it has been quiet for a while (PAGEDVIZ_LIVE_IDLE_S, 300 s by default).
`PAGEDVIZ_RECORD_TOKEN` goes as a bearer token.

vLLM's scheduler never waits for pagedviz: `write` puts the line on a bounded queue without
waiting, and a background thread sends. A full queue (pagedviz slower than the server) drops the
line and every one after it, with one logged line (a recording with a gap cannot be replayed: the
live run ends there and pagedviz closes it as cut); a pagedviz that cannot be reached or refuses a
batch stops the sending, with one logged line, and the server runs on. No retries, no new
dependency (the standard library's urllib).
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from typing import Any

logger = logging.getLogger("pagedviz.record")

MAX_LINES = 512  # lines per batch (pagedviz takes up to PAGEDVIZ_MAX_LIVE_LINES, 4096 by default)
MAX_BATCH_BYTES = 4 << 20  # bytes per batch (pagedviz takes up to PAGEDVIZ_MAX_LIVE_BODY_MB, 16)
MAX_WAIT_S = 0.2  # a batch goes at the latest this long after its first line
QUEUE_LINES = 65536  # lines waiting to be sent; past it lines are dropped
TIMEOUT_S = 10.0  # one request's timeout
CLOSE_WAIT_S = 5.0  # how long the scheduler's shutdown waits for the last batch
KEEPALIVE_S = 30.0  # a server quiet this long sends an empty batch (pagedviz ends a run quiet for longer)


def is_url(target: str) -> bool:
    return target.startswith(("http://", "https://"))


class HttpSink:
    """A file-like end of the recorder (write, flush, close) that posts to a live pagedviz."""

    def __init__(self, url: str, token: str = "", *, queue_lines: int = QUEUE_LINES) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.queue: queue.Queue[str | None] = queue.Queue(maxsize=queue_lines)
        self.run_id: str | None = None
        self.stopped = False  # a line was dropped or pagedviz failed: nothing more is taken
        self.failed = False  # pagedviz failed: nothing more is sent
        self.closed = False
        self.sent = 0  # lines pagedviz took (the header included)
        self._thread = threading.Thread(target=self._send_all, name="pagedviz-record-sink", daemon=True)
        self._thread.start()

    # --- the recorder's side: never waits -------------------------------------------------

    def write(self, line: str) -> None:
        if self.stopped or self.closed:
            return
        try:
            self.queue.put_nowait(line)
        except queue.Full:
            self.stopped = True
            logger.warning(
                "pagedviz.record: %d lines wait for %s: this line and every one after it are dropped "
                "(pagedviz closes the live run as cut); the server runs on",
                self.queue.maxsize,
                self.url,
            )

    def flush(self) -> None:
        """Nothing to do: the thread sends as lines come."""

    def close(self) -> None:
        """The recording ends: the last batch says so (unless sending stopped), waited for up
        to CLOSE_WAIT_S seconds."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(queue.Full):
            self.queue.put_nowait(None)
        self._thread.join(CLOSE_WAIT_S)

    # --- the thread -----------------------------------------------------------------------

    def _post(self, path: str, body: bytes) -> Any:
        headers = {"Content-Type": "application/x-ndjson"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.url + path, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:  # noqa: S310 (an http(s) URL only)
            return json.loads(r.read() or b"null")

    def _fail(self, what: str, e: BaseException) -> None:
        said = self.stopped  # a drop was already logged: the recording costs the server one line
        self.stopped = self.failed = True
        reason = e.reason if isinstance(e, urllib.error.URLError) else e
        if isinstance(e, urllib.error.HTTPError):
            with contextlib.suppress(Exception):
                reason = f"{e.code} {e.read()[:300].decode('utf-8', 'replace')}"
        logger.log(
            logging.INFO if said else logging.WARNING,
            "pagedviz.record: %s %s failed (%s): the live recording stops, the server runs on",
            what,
            self.url,
            reason,
        )

    def _batch(self, first: str) -> tuple[list[str], bool]:
        """Lines after `first` until the batch is full or MAX_WAIT_S has passed; whether the
        recording ended."""
        batch, size = [first], len(first)
        deadline = time.monotonic() + MAX_WAIT_S
        while len(batch) < MAX_LINES and size < MAX_BATCH_BYTES:
            left = deadline - time.monotonic()
            try:
                item = self.queue.get(timeout=left) if left > 0 else self.queue.get_nowait()
            except queue.Empty:
                return batch, False
            if item is None:
                return batch, True
            batch.append(item)
            size += len(item)
        return batch, False

    def _send_all(self) -> None:
        header = self.queue.get()
        if header is None:
            return
        try:
            self.run_id = str(self._post("/api/runs/live", header.encode())["run_id"])
            self.sent = 1
        except Exception as e:  # noqa: BLE001 (one logged line, never into the server)
            self._fail("opening a live run at", e)
            return
        logger.info("pagedviz.record: sending each scheduler step to %s/run?run=%s", self.url, self.run_id)
        while True:
            try:  # after a drop: what was queued before it, then no more
                item = self.queue.get(timeout=MAX_WAIT_S if self.stopped else KEEPALIVE_S)
            except queue.Empty:
                if self.stopped:
                    return
                item = ""  # a quiet server (no request to schedule): an empty batch keeps the run open
            batch, end = ([], True) if item is None else self._batch(item) if item else ([], False)
            end = end and not self.stopped  # a recording with a gap does not say it ended: a cut
            try:
                query = "?end=true" if end else ""
                self._post(f"/api/runs/{self.run_id}/lines{query}", "".join(batch).encode())
                self.sent += len(batch)
            except Exception as e:  # noqa: BLE001
                self._fail("sending lines to", e)
                return
            if end or item is None:
                return
