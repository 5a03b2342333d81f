"""The `pagedviz` command as a user runs it: a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def pagedviz(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pagedviz.app.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_run_seed_001_step_2_shows_the_documents_numbers() -> None:
    r = pagedviz("run", "seed-001", "--step", "2")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    slot_row = next(line for line in lines if line.strip().startswith("|        slot_mapping"))
    assert [int(c) for c in slot_row.split("|")[2:-1]] == [5, 14, 13, 16, 17]
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
    r = pagedviz("run", "no-such-preset")
    assert r.returncode == 2 and "unknown preset 'no-such-preset'" in r.stderr
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    r = pagedviz("run", str(broken))
    assert r.returncode == 2 and "is not valid JSON" in r.stderr
    r = pagedviz("run", "seed-001", "--step", "999")
    assert r.returncode == 2 and "--step" in r.stderr and "Traceback" not in r.stderr


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
        },
        "requests": [{"id": "a", "prompt_len": 5, "max_tokens": 2}],
    }
    path = tmp_path / "padded.json"
    path.write_text(json.dumps(scenario))
    r = pagedviz("run", str(path), "--step", "1")
    assert r.returncode == 0, r.stderr
    rows = [line.split("|") for line in r.stdout.splitlines() if line.startswith("|")]
    arange_row = next(cells for cells in rows if cells[1].strip() == "arange")
    assert [int(c) for c in arange_row[2:-1]] == [0, 1, 2, 3, 4]
    assert "cu_num_tokens" in r.stdout
    assert "slot_mapping padded to num_input_tokens=8: [2, 3, 4, 5, 6, -1, -1, -1]" in r.stdout
