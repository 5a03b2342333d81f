"""Issue 14 against a real `pagedviz serve` on 127.0.0.1: two workers on a run store whose folder
holds foreign and junk files, and the server's memory (RSS from /proc) under the worst requests the
default limits allow."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from pagedviz.app.serve import running_server
from pagedviz.core.presets import preset_dict
from tests.support.hostile_cases import worst_scenarios


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(field)


def test_two_workers_share_a_store_whose_folder_holds_foreign_and_junk_files(tmp_path: Path) -> None:
    (tmp_path / "foreign.json").write_text('{"name": "mine"}')
    (tmp_path / "notes.json").write_text("notes")
    (tmp_path / "x.json").mkdir()
    (tmp_path / f"{'c' * 20}.scenario.json").write_text("[" * 50_000)
    env = {"PAGEDVIZ_MAX_SCENARIOS": "3"}
    with running_server("--workers", "2", "--store", str(tmp_path), env=env) as server:

        def post(seed: int) -> tuple[int, str]:
            with httpx.Client(base_url=server.url, timeout=60) as c:  # a new connection: any worker
                d = preset_dict("seed-001") | {"seed": seed}
                r = c.post("/api/runs", json=d)
                return r.status_code, r.json().get("run_id", "")

        with ThreadPoolExecutor(6) as pool:
            posted = list(pool.map(post, range(12)))
        assert {code for code, _ in posted} == {201}
        # every run posted at once (more than the 3 scenarios a worker keeps in memory) is
        # readable from either worker
        for _, rid in posted:
            with httpx.Client(base_url=server.url, timeout=60) as c:
                assert c.get(f"/api/runs/{rid}/steps/2").status_code == 200
                assert c.get(f"/api/runs/{'c' * 20}").status_code == 404
                assert c.get(f"/api/runs/{'c' * 20}/progress").status_code == 404
                assert c.get("/healthz").status_code == 200
    assert (tmp_path / "foreign.json").read_text() == '{"name": "mine"}'
    assert (tmp_path / "notes.json").exists() and (tmp_path / "x.json").is_dir()
    assert (tmp_path / f"{'c' * 20}.scenario.json").read_text() == "[" * 50_000


def test_server_memory_stays_bounded_under_the_worst_allowed_requests() -> None:
    """Each of the costliest scenarios the default limits allow, then many distinct ones: the
    server's peak RSS grows by less than 1.5 GB, and its memory plateaus. (The time bound is
    lowered to keep the test short; the memory bounds are the defaults.)"""
    cases = worst_scenarios()
    with (
        running_server(env={"PAGEDVIZ_MAX_RUN_SECONDS": "8"}) as server,
        httpx.Client(base_url=server.url, timeout=120) as c,
    ):
        c.post("/api/runs", json=preset_dict("seed-001"))  # warm: imports, first run
        base = rss_kb(server.pid)
        peak = [base]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], rss_kb(server.pid))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            codes = {}
            for name, d in cases.items():
                r = c.post("/api/runs", json=d)
                codes[name] = r.status_code
                assert r.status_code in (201, 413), (name, r.text)
            after_worst = rss_kb(server.pid)
            for seed in range(12):  # distinct large scenarios: the caches must plateau
                d = cases["token_ids_cpu (256 rows)"] | {"seed": seed, "max_steps": 3}
                assert c.post("/api/runs", json=d).status_code in (201, 413)
                if seed == 5:
                    half = rss_kb(server.pid)
            end = rss_kb(server.pid)
        finally:
            done.set()
            sampler.join()
    growth_mb = (peak[0] - base) / 1024
    assert growth_mb < 1536, (growth_mb, codes)
    assert (end - half) / 1024 < 200, (half, end, after_worst)
