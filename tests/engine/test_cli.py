"""The `pagedviz` command as a user runs it. What it prints and its exit code come from the real
main() in this process (tests.support.cli.in_process: no interpreter and torch start per command);
what only a process shows runs as a real subprocess: the exit code the shell sees (a refused
argument and --version), a reader closing the pipe early, the progress bar on a terminal."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from pagedviz.core import __version__
from tests.support.cli import in_process
from tests.support.cli import pagedviz as subprocess_pagedviz


def pagedviz(*args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    """`pagedviz ARGS...` through main() in this process, at `columns` (else 80, as on a pipe)."""
    return in_process(*args, columns=columns or 80)


def table_row(stdout: str, name: str) -> list[str]:
    """The cells of array `name` in every table that has it, the tables' pieces joined."""
    out: list[str] = []
    for line in stdout.splitlines():
        cells = line.split("|")
        if line.startswith("|") and cells[1].strip() == name:
            out += [c.strip() for c in cells[2:-1]]
    return out


def test_run_seed_001_step_2_shows_the_documents_numbers() -> None:
    r = pagedviz("run", "seed-001", "--step", "2")
    assert r.returncode == 0, r.stderr
    assert [int(c) for c in table_row(r.stdout, "slot_mapping")] == [5, 14, 13, 16, 17]
    assert "new_block_ids: {'1': [7], '2': [8]}" in r.stdout
    # the block table drawn as the documents draw it
    assert "| 3  | 7  | 0  | 0  | 0  | 0  |" in r.stdout
    assert "| 4  | 5  | 6  | 8  | 0  | 0  |" in r.stdout
    assert "=== step 1" not in r.stdout


def test_run_json_prints_the_trace_contract() -> None:
    r = pagedviz("run", "seed-001", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["scenario"]["name"] == "seed-001" and doc["truncated"] is False
    assert doc["upstream"]["vllm"]["version"] == "0.33.0"
    step2 = doc["steps"][1]
    assert step2["step"] == 2 and step2["idle"] is False
    assert step2["arrays"]["slot_mapping"] == {
        "level": "token",
        "dtype": "int64",
        "shape": [5],
        "data": [5, 14, 13, 16, 17],
        "stage": "slot_mapping",
        "side": "cpu",
    }
    assert step2["scheduler"]["new_block_ids"] == {"1": [7], "2": [8]}
    assert {
        "scheduler",
        "batch",
        "arrays",
        "scalars",
        "stages",
        "sampled_token_ids",
        "kv_cache",
        "forward",
        "timing_us",
    } <= set(step2)
    assert [s["name"] for s in step2["stages"]][:5] == [
        "update_states",
        "req_indices",
        "cu_num_tokens",
        "positions",
        "token_indices",
    ]


def test_presets_lists_every_preset_with_its_document() -> None:
    r = pagedviz("presets")
    assert r.returncode == 0
    for pid, doc in [
        ("seed-000", "000_67918e1e51b93ef2.txt"),
        ("seed-001", "001_8a4008a8117428f7.txt"),
        ("seed-004", "004_bb1918dda1248f63.txt"),
    ]:
        assert pid in r.stdout and doc in r.stdout
    assert "demo-prefix-cache" in r.stdout and "follows \n" not in r.stdout + "\n"


def test_bad_scenario_file_exits_non_zero_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"name": "x", "config": {"block_size": -1}, "requests": [{"id": "a", "prompt_len": 3}]})
    )
    r = pagedviz("run", str(bad))
    assert r.returncode == 2
    assert "config.block_size: must be >= 1 (got -1)" in r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_preset_and_broken_json_exit_non_zero(tmp_path: Path) -> None:
    r = subprocess_pagedviz("run", "no-such-preset")  # the exit code a shell sees
    assert r.returncode == 2 and "unknown preset 'no-such-preset'" in r.stderr
    assert "did you mean" not in r.stderr  # nothing close: no guess
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    r = pagedviz("run", str(broken))
    assert r.returncode == 2 and "is not valid JSON" in r.stderr
    r = pagedviz("run", "seed-001", "--step", "999")
    assert r.returncode == 2 and "--step" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(("typed", "meant"), [("seed-01", "seed-001"), ("demo-prefix", "demo-prefix-cache")])
def test_a_misspelt_preset_suggests_the_nearest_id_in_one_line(typed: str, meant: str) -> None:
    r = pagedviz("run", typed)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert f"unknown preset {typed!r}; did you mean {meant!r}?" in r.stderr


def test_run_help_says_what_step_does_when_left_out() -> None:
    text = " ".join(pagedviz("run", "--help", columns=200).stdout.split())
    assert "--step N show only step N" in text
    assert "Left out: every step of the run" in text


def test_a_reader_that_stops_early_ends_the_command_quietly() -> None:
    # `pagedviz run ... --json | head -c 100`: the pipe closes long before the trace is written
    proc = subprocess.Popen(
        [sys.executable, "-m", "pagedviz.app.cli", "run", "seed-000", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    head = proc.stdout.read(100)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert head.startswith(b'{"scenario"')
    assert "Traceback" not in err and err == ""
    assert proc.returncode == 141


def test_a_device_this_machine_lacks_exits_non_zero_naming_the_field(tmp_path: Path) -> None:
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    from pagedviz.core.presets import preset_dict

    scenario = preset_dict("seed-001")
    scenario["config"]["device"] = "cuda"
    path = tmp_path / "on-cuda.json"
    path.write_text(json.dumps(scenario))
    r = pagedviz("run", str(path))
    assert r.returncode == 2
    assert r.stderr.strip() == "pagedviz: config.device: cuda was asked for but torch sees no CUDA GPU"
    assert r.stdout == ""


def test_run_shows_arange_cu_num_tokens_and_the_padded_slot_mapping(tmp_path: Path) -> None:
    scenario = {
        "name": "padded",
        "config": {
            "block_size": 2,
            "max_model_len": 16,
            "max_num_reqs": 4,
            "max_num_batched_tokens": 16,
            "num_kv_blocks": 12,
            "cudagraph_capture_sizes": [4, 8],
            "model_runner": "v1",  # V1's arange (V2 has none)
        },
        "requests": [{"id": "a", "prompt_len": 5, "max_tokens": 2}],
    }
    path = tmp_path / "padded.json"
    path.write_text(json.dumps(scenario))
    r = pagedviz("run", str(path), "--step", "1")
    assert r.returncode == 0, r.stderr
    assert [int(c) for c in table_row(r.stdout, "arange")] == [0, 1, 2, 3, 4]
    assert "cu_num_tokens" in r.stdout
    assert "slot_mapping padded to num_input_tokens=8: [2, 3, 4, 5, 6, -1, -1, -1]" in r.stdout


def test_run_shows_each_kv_cache_groups_slot_mapping_and_block_table(tmp_path: Path) -> None:
    """A hybrid model (a full-attention layer, then a sliding one): group 1's block_numbers and
    slot_mapping are token rows beside group 0's, and its block table is drawn after group 0's."""
    scenario = {
        "name": "hybrid",
        "config": {
            "model_runner": "v1",
            "block_size": 4,
            "max_model_len": 32,
            "max_num_reqs": 2,
            "num_kv_blocks": 20,
            "layer_types": ["full_attention", "sliding_attention"],
            "sliding_window": 8,
            "model": None,
        },
        "requests": [{"id": "a", "prompt_len": 6, "max_tokens": 2}],
    }
    path = tmp_path / "hybrid.json"
    path.write_text(json.dumps(scenario))
    r = pagedviz("run", str(path), "--step", "1")
    assert r.returncode == 0, r.stderr
    # a holds blocks [1, 2] in group 0 and [3, 4] in group 1
    assert [int(c) for c in table_row(r.stdout, "slot_mapping")] == [4, 5, 6, 7, 8, 9]
    assert [int(c) for c in table_row(r.stdout, "slot_mapping_g1")] == [12, 13, 14, 15, 16, 17]
    assert [int(c) for c in table_row(r.stdout, "block_numbers_g1")] == [3, 3, 3, 3, 4, 4]
    # each table says which group it is: its kind, its layers and its window
    g0 = r.stdout.index("block_table (group 0 full_attention layers [0]):")
    g1 = r.stdout.index("block_table_g1 (group 1 sliding_attention layers [1] window 8):")
    assert g0 < g1
    assert "| 3  | 4  | 0  |" in r.stdout[g1:]
    assert "num_kv_cache_groups=2" in r.stdout
    assert "block_ids (one list per group): {'a': [[1, 2], [3, 4]]}" in r.stdout


@pytest.mark.parametrize("columns", [80, 120])
def test_tables_fit_the_terminal_and_keep_every_value(columns: int) -> None:
    r = pagedviz("run", "seed-000", "--step", "2", columns=columns)
    assert r.returncode == 0, r.stderr
    widest = max(len(line) for line in r.stdout.splitlines())
    assert widest <= columns, next(line for line in r.stdout.splitlines() if len(line) == widest)
    # the token table is split into pieces, and the pieces hold every token in order
    assert sum(line.startswith("| token ") for line in r.stdout.splitlines()) > 1
    slots = [int(c) for c in table_row(r.stdout, "slot_mapping")]
    assert len(slots) == 200 and slots[:4] == [70, 225, 240, 241]
    assert [int(c) for c in table_row(r.stdout, "seq_lens")] == [55, 146, 93, 75, 30]


def test_wide_prints_each_table_whole() -> None:
    split = pagedviz("run", "seed-000", "--step", "2", columns=80)
    wide = pagedviz("run", "seed-000", "--step", "2", "--wide", columns=80)
    assert wide.returncode == 0, wide.stderr
    assert sum(line.startswith("| token ") for line in wide.stdout.splitlines()) == 1
    assert max(len(line) for line in wide.stdout.splitlines()) > 1000
    assert table_row(wide.stdout, "slot_mapping") == table_row(split.stdout, "slot_mapping")


def test_long_request_ids_are_shortened_unless_wide(tmp_path: Path) -> None:
    long_id = "a-request-with-a-very-long-id-" * 2
    path = tmp_path / "long-id.json"
    path.write_text(json.dumps({"requests": [{"id": long_id, "prompt_len": 3, "max_tokens": 1}]}))
    short = pagedviz("run", str(path), "--step", "1", columns=80)
    assert short.returncode == 0, short.stderr
    assert long_id not in table_row(short.stdout, "req_id")
    assert long_id in table_row(pagedviz("run", str(path), "--step", "1", "--wide").stdout, "req_id")


def test_version_and_defaults_in_help() -> None:
    r = subprocess_pagedviz("--version")  # the command's own entry, exit 0
    assert r.returncode == 0 and r.stdout.strip() == f"pagedviz {__version__}"
    serve = pagedviz("serve", "--help", columns=200).stdout
    for option, default in [("--host", "127.0.0.1"), ("--port", "8000"), ("--workers", "1")]:
        line = next(line for line in serve.splitlines() if line.strip().startswith(option))
        assert f"(default: {default})" in line
    assert "(default: 64; also $PAGEDVIZ_MAX_RUNS)" in serve
    assert "(default: 1024; also $PAGEDVIZ_STORE_MB)" in serve and "$PAGEDVIZ_STORE)" in serve
    assert "(default: None)" not in serve
    for command in ("run", "presets", "schema"):
        assert pagedviz(command, "--help").returncode == 0


def on_a_terminal(*args: str, **env: str) -> str:
    """Run `pagedviz` with stderr on a pseudo-terminal, as in an interactive shell; its stderr."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pagedviz.app.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=follower,
        env={**os.environ, "COLUMNS": "100", "TERM": "xterm", **env},
    )
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert proc.wait(timeout=120) == 0
    return seen.decode(errors="replace")


LONG_SIM = {
    "max_steps": 600,
    "config": {"block_size": 16, "max_model_len": 1024, "num_kv_blocks": 200, "model": None},
    "requests": [{"id": str(i), "prompt_len": 16, "max_tokens": 1000} for i in range(2)],
}


def test_a_run_shows_a_progress_bar_on_a_terminal_once_it_takes_a_while(tmp_path: Path) -> None:
    path = tmp_path / "long.json"
    path.write_text(json.dumps(LONG_SIM))
    # the bar's delay set to 0 so that the test does not depend on this machine's speed
    text = on_a_terminal("run", str(path), "--step", "600", PAGEDVIZ_PROGRESS_AFTER_S="0")
    assert "pagedviz: step" in text and "(at most 600)" in text
    # a run shorter than the delay shows nothing
    assert on_a_terminal("run", str(path), "--step", "600", PAGEDVIZ_PROGRESS_AFTER_S="1000") == ""
    # stderr not a terminal (a pipe, or the capture here): nothing, whatever the delay
    piped = in_process("run", str(path), "--step", "600", env={"PAGEDVIZ_PROGRESS_AFTER_S": "0"})
    assert piped.returncode == 0 and piped.stderr == ""


NO_TORCH = """
import contextlib, io, sys
from pagedviz.app.cli import main
for argv in {argvs!r}:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(argv)
        except SystemExit:
            pass
    heavy = sorted(m for m in ("torch", "pydantic", "uvicorn") if m in sys.modules)
    print(" ".join(argv), "->", heavy or "-")
"""


def test_commands_that_build_no_engine_import_no_torch(tmp_path: Path) -> None:
    """`--version`, `--help`, `presets`, a refused argument, an invalid scenario, a server that cannot
    start: each answers without importing torch (1.5 s or more of a process's start), so the command
    and the tests that run it stay quick (core/__init__.py imports its names on first use)."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"requests": [{"id": "a", "prompt_len": 0}]}))
    argvs = [
        ["--version"],
        ["run", "--help"],
        ["presets"],
        ["run", "no-such-preset"],
        ["run", str(bad)],
        ["serve", "--port", "0"],
        ["serve", "--store", str(bad)],
    ]
    r = subprocess.run(
        [sys.executable, "-c", NO_TORCH.format(argvs=argvs)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == len(argvs) and all("torch" not in line for line in lines), lines
