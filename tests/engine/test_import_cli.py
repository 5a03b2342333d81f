"""`pagedviz import FILE.jsonl` (issue 30): the shipped recording of vLLM 0.33.0's own scheduler
replays step for step, with the agreement line; every bad recording is one line on stderr naming
its line, exit 2. No vLLM needed. The commands run through the CLI's real main() in the test process
(tests/support/cli.py `in_process`); a missing file's refusal runs in a real subprocess, for the
process's own exit code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pagedviz.core.recordings import example_bytes
from tests.support.cli import in_process
from tests.support.recording_cases import CUT, CUT_SAYS, EXAMPLE, LINES, NUM_STEPS, cases

LIMIT_MB = 1


def pagedviz(*args: str) -> subprocess.CompletedProcess[str]:
    return in_process(*args, env={"PAGEDVIZ_MAX_RECORD_LINE_MB": str(LIMIT_MB)})


def pagedviz_process(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pagedviz.app.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PAGEDVIZ_MAX_RECORD_LINE_MB": str(LIMIT_MB)},
    )


def test_the_shipped_recording_imports_one_step_per_recorded_step(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    path.write_bytes(EXAMPLE)
    r = pagedviz("import", str(path), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [s["step"] for s in out["steps"]] == list(range(1, NUM_STEPS + 1))
    recorded = [json.loads(x) for x in EXAMPLE.splitlines()[1:]]
    for step, rec in zip(out["steps"], recorded):
        assert step["scheduler"]["num_scheduled_tokens"] == rec["num_scheduled_tokens"]
        assert sorted(step["scheduler"]["preempted_req_ids"]) == rec["preempted"]
        assert {k: [v] for k, v in step["sampled_token_ids"].items()} == rec["sampled"]
    # the same fields as `pagedviz run --json`
    run = json.loads(pagedviz("run", "demo-preemption", "--json").stdout)
    assert set(out["steps"][0]) == set(run["steps"][0])
    assert out["recording"]["agreement"]["agrees_up_to"] == NUM_STEPS
    assert "agrees with the recording up to step" in out["recording"]["agreement"]["text"]


def test_the_import_in_the_terminal_says_whether_pagedviz_agrees(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    path.write_bytes(EXAMPLE)
    r = pagedviz("import", str(path))
    assert r.returncode == 0, r.stderr
    assert f"agrees with the recording up to step {NUM_STEPS}" in r.stdout
    assert f"=== step {NUM_STEPS} ===" in r.stdout


def test_the_shipped_hybrid_recording_imports_with_every_groups_blocks(tmp_path: Path) -> None:
    """A hybrid server's recording (issue 38, point 7): each step's blocks per KV cache group, the
    null block where the sliding window dropped, the scenario's layers from the header's groups."""
    body = example_bytes("real-vllm-hybrid")
    path = tmp_path / "hybrid.jsonl"
    path.write_bytes(body)
    r = pagedviz("import", str(path), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    recorded = [json.loads(x) for x in body.splitlines()[1:]]
    assert [s["step"] for s in out["steps"]] == list(range(1, len(recorded) + 1))
    assert out["steps"][1]["scheduler"]["block_ids"]["a"] == [[1, 2, 3, 4, 5, 7], [0, 0, 0, 9, 10, 6]]
    for step, rec in zip(out["steps"], recorded):
        assert step["scheduler"]["num_scheduled_tokens"] == rec["num_scheduled_tokens"]
        assert all(len(groups) == 2 for groups in step["scheduler"]["block_ids"].values())
        assert step["kv_cache"]["num_free_blocks"] == rec["num_free_blocks"]
    assert out["scenario"]["config"]["layer_types"] == ["full_attention", "sliding_attention"]
    assert out["recording"]["agreement"]["agrees_up_to"] == len(recorded)


@pytest.mark.parametrize("name", list(cases(LIMIT_MB << 20)))
def test_a_bad_recording_is_one_line_naming_its_line(name: str, tmp_path: Path) -> None:
    body, says = cases(LIMIT_MB << 20)[name]
    path = tmp_path / "rec.jsonl"
    path.write_bytes(body)
    r = pagedviz("import", str(path))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert says in r.stderr, r.stderr


def test_a_recording_whose_last_line_was_cut_imports_its_whole_lines_and_says_where_it_stops(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cut.jsonl"
    path.write_bytes(CUT)
    r = pagedviz("import", str(path))
    assert r.returncode == 0, r.stderr
    assert CUT_SAYS in r.stdout.splitlines()
    assert "=== step 3 ===" in r.stdout and "=== step 4 ===" not in r.stdout
    zh = pagedviz("import", str(path), "--lang", "zh")
    assert "最后一行（第 5 行）被截断：记录止于第 3 步" in zh.stdout.splitlines()
    out = json.loads(pagedviz("import", str(path), "--json").stdout)
    assert [s["step"] for s in out["steps"]] == [1, 2, 3]
    assert out["recording"]["cut"]["line"] == 5 and out["recording"]["cut"]["step"] == 3


def test_a_bad_line_in_the_middle_is_one_line_naming_only_the_files_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"".join(LINES[:4]) + b'{"step": 4, x}\n' + b"".join(LINES[5:]))
    r = pagedviz("import", str(path))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "line 5: not JSON at column 13 (" in r.stderr
    assert len(re.findall(r"\bline \d", r.stderr)) == 1, r.stderr


def test_the_per_line_limit_names_the_setting(tmp_path: Path) -> None:
    body, _ = cases(LIMIT_MB << 20)["a line over the per-line limit"]
    path = tmp_path / "rec.jsonl"
    path.write_bytes(body)
    r = pagedviz("import", str(path))
    assert (
        "longer than the per-line limit of 1048576 bytes" in r.stderr
        and "PAGEDVIZ_MAX_RECORD_LINE_MB" in r.stderr
    )


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    r = pagedviz_process("import", str(tmp_path / "nope.jsonl"))
    assert r.returncode == 2 and "nope.jsonl" in r.stderr


def test_a_kv_cache_group_pagedviz_does_not_model_is_one_line_naming_it(tmp_path: Path) -> None:
    lines = example_bytes("real-vllm-hybrid").splitlines(keepends=True)
    header = json.loads(lines[0])
    header["kv_cache_groups"][1] = {"kind": "MambaSpec", "block_size": 4, "num_layers": 1}
    path = tmp_path / "mamba.jsonl"
    path.write_bytes(json.dumps(header).encode() + b"\n" + b"".join(lines[1:]))
    r = pagedviz("import", str(path))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == (
        f"pagedviz: {path}: line 1: KV cache group 1 is MambaSpec (1 layer(s)): pagedviz models full "
        "attention (FullAttentionSpec) and sliding windows (SlidingWindowSpec)"
    )


def test_one_step_alone_is_that_step_of_the_whole_import(tmp_path: Path) -> None:
    """`--step N` (issue 40): step N alone, as the whole import prints it (but its stage timings)."""
    path = tmp_path / "rec.jsonl"
    path.write_bytes(EXAMPLE)
    whole = json.loads(pagedviz("import", str(path), "--json").stdout)["steps"]
    for n in (NUM_STEPS // 2, NUM_STEPS):
        r = pagedviz("import", str(path), "--json", "--step", str(n))
        assert r.returncode == 0, r.stderr
        one, want = json.loads(r.stdout), dict(whole[n - 1])
        assert one.pop("timing_us") and want.pop("timing_us")
        assert one == want, f"step {n}"
    text = pagedviz("import", str(path), "--step", str(NUM_STEPS))
    assert text.returncode == 0 and f"=== step {NUM_STEPS} ===" in text.stdout
    assert "=== step 1 ===" not in text.stdout


@pytest.mark.parametrize("bad", ["0", str(NUM_STEPS + 1), "x"])
def test_a_bad_step_number_is_one_line_naming_step(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "rec.jsonl"
    path.write_bytes(EXAMPLE)
    r = pagedviz("import", str(path), "--step", bad)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "--step" in r.stderr, r.stderr
