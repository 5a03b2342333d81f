"""A real uvicorn in a subprocess on a free loopback port, driven with httpx."""

from __future__ import annotations

import io
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np

from pagedviz.app.serve import running_server
from pagedviz.core.presets import preset_dict
from tests.support.scenarios import LONG_RUN


def test_real_server_runs_a_preset_end_to_end() -> None:
    with running_server("--max-runs", "2") as server, httpx.Client(base_url=server.url, timeout=60) as c:
        assert c.get("/healthz").json()["status"] == "ok"
        # concurrent posts of one scenario get one id
        with ThreadPoolExecutor(4) as pool:
            ids = set(
                pool.map(
                    lambda _: c.post("/api/runs", json=preset_dict("seed-001")).json()["run_id"], range(4)
                )
            )
        assert len(ids) == 1
        rid = ids.pop()
        r = c.get(f"/api/runs/{rid}/steps/2/arrays/slot_mapping", params={"format": "npy"})
        assert np.load(io.BytesIO(r.content)).tolist() == [5, 14, 13, 16, 17]
        assert c.get("/docs").status_code == 200
        bad = c.post("/api/runs", json={"name": "x", "requests": "no"})
        assert bad.status_code == 422 and "Traceback" not in bad.text


def test_serve_refuses_a_bad_port() -> None:
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "pagedviz.app.cli", "serve", "--port", "70000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--port must be between 1 and 65535" in r.stderr


def test_two_workers_answer_for_each_others_runs() -> None:
    with running_server("--workers", "2") as server, httpx.Client(base_url=server.url, timeout=60) as c:
        rid = c.post("/api/runs", json=preset_dict("seed-004")).json()["run_id"]
        codes = set()
        for _ in range(12):  # new connections spread over both workers
            with httpx.Client(base_url=server.url, timeout=60) as fresh:
                codes.add(fresh.get(f"/api/runs/{rid}/steps/2").status_code)
        assert codes == {200}


def test_progress_of_a_long_run_while_it_computes() -> None:
    long_run = LONG_RUN
    with running_server("--max-runs", "1") as server, httpx.Client(base_url=server.url, timeout=60) as c:
        rid = c.post("/api/scenarios/validate", json=long_run).json()["run_id"]
        assert c.get(f"/api/runs/{rid}/progress").status_code == 404  # not posted yet
        with ThreadPoolExecutor(1) as pool:
            posted = pool.submit(c.post, "/api/runs", json=long_run)
            seen = []
            while not posted.done():
                p = c.get(f"/api/runs/{rid}/progress")
                if p.status_code == 200:
                    seen.append(p.json())
                time.sleep(0.1)
            assert posted.result().status_code == 201
        computing = [p for p in seen if p["state"] == "computing"]
        assert computing, seen[:3]
        done_counts = [p["steps_done"] for p in computing]
        assert done_counts == sorted(done_counts) and 0 < done_counts[-1] <= long_run["max_steps"]
        assert all(p["max_steps"] == long_run["max_steps"] and p["elapsed_s"] >= 0 for p in computing)
        assert c.get(f"/api/runs/{rid}/progress").json()["state"] == "done"
        assert c.get(f"/api/runs/{rid}/progress").json()["steps_done"] == long_run["max_steps"]
        # evicted by another run, it is remembered: the next read computes it again
        c.post("/api/runs", json=preset_dict("seed-001"))
        assert c.get(f"/api/runs/{rid}/progress").json()["state"] == "waiting"


def test_serve_on_a_taken_port_says_so_and_exits_non_zero() -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "pagedviz.app.cli", "serve", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode == 2
    assert r.stderr.strip().startswith(f"pagedviz: cannot listen on 127.0.0.1:{port}: ")
    assert "serving on" not in r.stdout and "Traceback" not in r.stderr
