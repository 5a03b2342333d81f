"""Issue 14 for the `pagedviz` command: every error is one line on stderr and exit code 2, never a
traceback, whatever the file holds (through the real main(), tests.support.cli.in_process, and
hypothesis; the terminal's encoding in a real subprocess)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedviz.app.cli import main
from pagedviz.app.serve import free_port
from pagedviz.core.presets import preset_dict
from tests.support.cli import in_process, one_line_exit_2, pagedviz


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b'{"name": "caf\xe9"}', "is not UTF-8 text"),
        (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
        (b'{"\\ud800": 1, "requests": [{"id": "a", "prompt_len": 2}]}', "\\ud800: unknown field"),
        (b'{"requests": [{"id": "a", "prompt": "\\udc00"}]}', "requests[0].prompt: has a lone surrogate"),
        (
            b'{"config": {"cudagraph_capture_sizes": [1000000000000000000]}, "requests": [{"prompt_len": 2}]}',  # noqa: E501
            "PAGEDVIZ_MAX_TOKENS_PER_STEP",
        ),
        (b'{"requests": [{"id": "a\\u001b[2J", "prompt_len": 2}]}', "control character"),
    ],
)
def test_hostile_files_are_one_line_and_exit_2(tmp_path: Path, content: bytes, says: str) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(content)
    assert says in one_line_exit_2(in_process("run", str(path)))


def test_text_the_terminal_cannot_encode_prints_escaped(tmp_path: Path) -> None:
    d = preset_dict("seed-001")
    d["name"] = "准备 👩‍💻"
    path = tmp_path / "zh.json"
    path.write_text(json.dumps(d), encoding="utf-8")
    r = pagedviz("run", str(path), "--step", "1", env={"PYTHONIOENCODING": "ascii"})
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert r.stdout.startswith("\\u51c6\\u5907")


def test_bad_settings_and_bad_arguments_are_one_line(tmp_path: Path) -> None:
    msg = one_line_exit_2(in_process("run", "seed-001", env={"PAGEDVIZ_MAX_TOTAL_TOKENS": "-1"}))
    assert msg == "pagedviz: PAGEDVIZ_MAX_TOTAL_TOKENS must be a positive integer (got '-1')"
    port = str(free_port())
    msg = one_line_exit_2(in_process("serve", "--port", port, env={"PAGEDVIZ_MAX_RUNS": "abc"}))
    assert "PAGEDVIZ_MAX_RUNS must be a positive integer" in msg
    assert "--step" in one_line_exit_2(in_process("run", "seed-001", "--step", "two"))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.text(max_size=8),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=12,
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.sampled_from(["name", "seed", "max_steps", "config", "requests", "flavor"]), json_values)
def test_hostile_scenarios_through_main_are_exit_0_or_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: Any
) -> None:
    d = preset_dict("seed-001")
    d[key] = value
    path = tmp_path / "h.json"
    path.write_text(json.dumps(d))
    code = main(["run", str(path), "--step", "1"])
    err = capsys.readouterr().err
    assert code in (0, 2)
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("pagedviz: ")
    path.unlink()
