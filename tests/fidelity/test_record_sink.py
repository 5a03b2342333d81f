"""The recorder's HTTP sink (PAGEDVIZ_RECORD=http://HOST:PORT, record/sink.py): vLLM's scheduler
never waits for it, and a pagedviz that cannot be reached or cannot keep up costs one logged line,
not a retry storm nor an error in the server (tests/browser/test_browser_live.py sends vLLM's real
Scheduler's lines to a real pagedviz and follows them in Chromium)."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from tests.support.fidelity_env import require_vllm

require_vllm()
from pagedviz.record import sink as sink_module  # noqa: E402
from pagedviz.record.sink import HttpSink  # noqa: E402

LINE = '{"step": 1}\n'


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "pagedviz.record" and r.levelno >= logging.WARNING
    ]


def test_an_unreachable_pagedviz_costs_one_logged_line_and_never_blocks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    caplog.set_level(logging.INFO, logger="pagedviz.record")
    sink = HttpSink(f"http://127.0.0.1:{port}", "T")
    start = time.perf_counter()
    for _ in range(20_000):
        sink.write(LINE)
    took = time.perf_counter() - start
    assert took < 2.0, f"20,000 writes took {took:.2f} s"
    sink.close()
    said = warnings(caplog)
    assert len(said) == 1 and f"127.0.0.1:{port}" in said[0] and "the server runs on" in said[0]
    assert sink.failed and sink.sent == 0


def test_a_full_queue_drops_with_one_logged_line(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pagedviz that accepts the connection and never answers: the queue fills, and the writes
    go on at once, dropped. When that pagedviz then goes away, the failed request is not a second
    warning: the server's log has one line for the recording."""
    monkeypatch.setattr(sink_module, "TIMEOUT_S", 30.0)
    monkeypatch.setattr(sink_module, "CLOSE_WAIT_S", 0.1)
    caplog.set_level(logging.INFO, logger="pagedviz.record")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # never accepted: the header's request waits
        sink = HttpSink(f"http://127.0.0.1:{listener.getsockname()[1]}", queue_lines=100)
        start = time.perf_counter()
        for _ in range(1000):
            sink.write(LINE)
        took = time.perf_counter() - start
        sink.close()
    # the listener is gone: the header's request is reset, after the drop was already logged
    sink._thread.join(5.0)
    assert not sink._thread.is_alive()
    assert took < 1.0, f"1,000 writes took {took:.2f} s"
    said = warnings(caplog)
    assert len(said) == 1 and "dropped" in said[0], said
    assert sink.stopped and sink.failed
