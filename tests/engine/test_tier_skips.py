"""tests/conftest.py's rule that the reference tiers never skip silently: with CI=true a skipped test
under a `fidelity` (or `browser`) folder fails the run, naming the test, its tier and its reason,
in one process and under pytest-xdist; without CI the same run passes and still lists the skip.
Each case runs pytest in a subprocess on a tiny test tree that holds a copy of the conftest."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
REASON = "vLLM 0.33.0 is not installed (bash scripts/fidelity-deps.sh)"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """tests/engine passes; tests/fidelity skips one test and one whole module; tests/api skips one."""
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    tests = tmp_path / "tests"
    for folder in ("engine", "api", "fidelity"):
        (tests / folder).mkdir(parents=True)
    shutil.copy(CONFTEST, tests / "conftest.py")
    (tests / "engine" / "test_fine.py").write_text("def test_fine():\n    assert 1 + 1 == 2\n")
    (tests / "api" / "test_optional.py").write_text(
        "import pytest\n\n\ndef test_optional():\n    pytest.skip('not this time')\n"
    )
    (tests / "fidelity" / "test_reference.py").write_text(
        f"import pytest\n\n\ndef test_reference():\n    pytest.skip({REASON!r})\n\n\n"
        "def test_runs():\n    assert True\n"
    )
    (tests / "fidelity" / "test_whole_module.py").write_text(
        "import pytest\n\npytest.skip('Triton is not installed', allow_module_level=True)\n"
    )
    return tmp_path


def pytest_in(root: Path, *args: str, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "HYPOTHESIS_PROFILE", "PYTEST_ADDOPTS")}
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args, "tests"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def says_which_skipped(out: str) -> None:
    """The end of the run lists the reference tiers' skips, each with its tier and reason."""
    listed = [line for line in out.splitlines() if line.startswith("SKIPPED [") and " tier] " in line]
    assert listed == [
        f"SKIPPED [fidelity tier] tests/fidelity/test_reference.py::test_reference: {REASON}",
        "SKIPPED [fidelity tier] tests/fidelity/test_whole_module.py: Triton is not installed",
    ], out  # and not tests/api's skip: the engine and API tiers may skip


def test_in_ci_a_skipped_fidelity_test_fails_the_run_with_its_tier_and_reason(tree: Path) -> None:
    r = pytest_in(tree, ci=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "CI=true: skipped fidelity tests fail the run" in r.stdout
    says_which_skipped(r.stdout)
    assert "hypothesis profile 'ci'" in r.stdout and "derandomize=True" in r.stdout


def test_in_ci_under_xdist_the_controller_collects_the_workers_skips(tree: Path) -> None:
    r = pytest_in(tree, "-n", "2", ci=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "CI=true: skipped fidelity tests fail the run" in r.stdout
    says_which_skipped(r.stdout)


def test_without_ci_the_same_skips_are_listed_and_the_run_passes(tree: Path) -> None:
    r = pytest_in(tree, ci=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skipped fidelity tests (with CI=true they fail the run)" in r.stdout
    says_which_skipped(r.stdout)
    assert "hypothesis profile 'dev'" in r.stdout


def test_in_ci_a_run_without_reference_skips_passes(tree: Path) -> None:
    r = pytest_in(tree, "--ignore=tests/fidelity", ci=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fail the run" not in r.stdout
