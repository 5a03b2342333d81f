"""scripts/setup.sh as a newcomer's first command runs it, with the GPU check, the torch index and
pip faked through its environment variables: which torch it chooses, its fall-backs, and that a
second run installs nothing unless pyproject.toml changed. Nothing is really installed."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


@pytest.fixture
def index_url(tmp_path: Path) -> Iterator[str]:
    """A package index on loopback that has a torch/ page."""
    (tmp_path / "index" / "torch").mkdir(parents=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "index"))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def dead_url() -> str:
    """A loopback URL on which nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/"


def setup(*args: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "TORCH_INDEX_URL"}
    return subprocess.run(
        ["bash", str(cwd / "scripts" / "setup.sh"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **env},
    )


def choice_line(r: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in r.stderr.splitlines() if line.startswith("setup: torch")]
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_no_gpu_picks_the_cpu_index_when_it_answers(index_url: str) -> None:
    r = setup("--dry-run", PAGEDVIZ_NVIDIA_SMI="false", PAGEDVIZ_TORCH_CPU_INDEX=index_url)
    assert r.returncode == 0, r.stderr
    assert "no NVIDIA GPU" in choice_line(r) and index_url in choice_line(r)
    assert r.stdout.strip().endswith(f"torch==2.13.0 --index-url {index_url}")


def test_missing_nvidia_smi_counts_as_no_gpu(index_url: str) -> None:
    r = setup("--dry-run", PAGEDVIZ_NVIDIA_SMI="no-such-nvidia-smi", PAGEDVIZ_TORCH_CPU_INDEX=index_url)
    assert r.returncode == 0, r.stderr
    assert f"--index-url {index_url}" in r.stdout


def test_unreachable_cpu_index_falls_back_to_a_plain_install() -> None:
    dead = dead_url()
    r = setup("--dry-run", PAGEDVIZ_NVIDIA_SMI="false", PAGEDVIZ_TORCH_CPU_INDEX=dead)
    assert r.returncode == 0, r.stderr
    assert "does not answer" in choice_line(r) and dead in choice_line(r)
    assert r.stdout.strip().endswith("torch==2.13.0") and "--index-url" not in r.stdout


def test_a_gpu_gets_the_default_build(index_url: str) -> None:
    r = setup("--dry-run", PAGEDVIZ_NVIDIA_SMI="true", PAGEDVIZ_TORCH_CPU_INDEX=index_url)
    assert r.returncode == 0, r.stderr
    assert "NVIDIA GPU answers" in choice_line(r)
    assert "--index-url" not in r.stdout


def test_torch_index_url_overrides_the_gpu_check(index_url: str) -> None:
    r = setup("--dry-run", PAGEDVIZ_NVIDIA_SMI="true", TORCH_INDEX_URL=index_url)
    assert r.returncode == 0, r.stderr
    assert "TORCH_INDEX_URL" in choice_line(r)
    assert r.stdout.strip().endswith(f"--index-url {index_url}")


def test_unknown_option_is_refused() -> None:
    r = setup("--tset")
    assert r.returncode == 2 and "--tset" in r.stderr


@pytest.fixture
def fake_repo(tmp_path: Path) -> Path:
    """A copy of the script and pyproject.toml beside a fake .venv whose python reports torch
    importable once the fake pip has 'installed' it."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", repo / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    bin_dir = repo / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    fake_python = bin_dir / "python"
    fake_python.write_text(f'#!/bin/sh\n[ -e "{bin_dir}/torch-installed" ]\n')
    fake_python.chmod(0o755)
    fake_pip = tmp_path / "pip"
    # logs each call; fails with any --index-url (a broken index), 'installs' torch otherwise
    fake_pip.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{tmp_path}/pip.log"\n'
        'case "$*" in *--index-url*) exit 1 ;; esac\n'
        f'case "$*" in *torch==*) touch "{bin_dir}/torch-installed" ;; esac\n'
    )
    fake_pip.chmod(0o755)
    return repo


def pip_calls(repo: Path) -> list[str]:
    log = repo.parent / "pip.log"
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return calls


def test_installs_once_then_only_when_pyproject_changes(fake_repo: Path, index_url: str) -> None:
    env = {
        "PAGEDVIZ_PIP": str(fake_repo.parent / "pip"),
        "PAGEDVIZ_NVIDIA_SMI": "false",
        "PAGEDVIZ_TORCH_CPU_INDEX": index_url,
    }
    r = setup(cwd=fake_repo, **env)
    assert r.returncode == 0, r.stderr
    # the CPU index answered, pip failed with it, the plain install followed; then the package
    assert pip_calls(fake_repo) == [
        f"install -q --no-compile torch==2.13.0 --index-url {index_url}",
        "install -q --no-compile torch==2.13.0",
        "install -q --no-compile -e .",
    ]
    assert "pip failed with" in r.stderr

    again = setup(cwd=fake_repo, **env)
    assert again.returncode == 0, again.stderr
    assert pip_calls(fake_repo) == [] and again.stderr == ""

    with (fake_repo / "pyproject.toml").open("a") as f:
        f.write("\n# a change\n")
    changed = setup(cwd=fake_repo, **env)
    assert changed.returncode == 0, changed.stderr
    assert pip_calls(fake_repo) == ["install -q --no-compile -e ."]


def test_test_mode_adds_the_test_tools_once(fake_repo: Path) -> None:
    env = {
        "PAGEDVIZ_PIP": str(fake_repo.parent / "pip"),
        "TORCH_INDEX_URL": dead_url(),
        "PAGEDVIZ_NO_APT": "1",
    }
    assert setup(cwd=fake_repo, **env).returncode == 0
    assert pip_calls(fake_repo)[-1] == "install -q --no-compile -e ."
    # chromium's check may print a note where it is missing; the pip calls are what count here
    setup("--test", cwd=fake_repo, **env)
    assert pip_calls(fake_repo) == ["install -q --no-compile -e .[test,notebook]"]
    setup("--test", cwd=fake_repo, **env)
    setup(cwd=fake_repo, **env)
    assert pip_calls(fake_repo) == []


def test_compile_imports_writes_the_pyc_files_that_pythondontwritebytecode_withholds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """scripts/compile_imports.py imports a group's modules with bytecode writing on, so that the
    modules they import get their .pyc files even where PYTHONDONTWRITEBYTECODE is set; a module
    that fails to import is passed over in silence, an unknown group is refused."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("compile_imports", ROOT / "scripts" / "compile_imports.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    pkg = tmp_path / "warm_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from warm_pkg import b\nprint('a says something')\n")
    (pkg / "b.py").write_text("VALUE = 1\n")
    (pkg / "broken.py").write_text("raise RuntimeError('no')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # as PYTHONDONTWRITEBYTECODE=1 leaves it
    monkeypatch.setitem(script.GROUPS, "tiny", ["warm_pkg.broken", "warm_pkg.a"])
    assert script.main(["tiny"]) == 0
    cached = {p.name.split(".")[0] for p in (pkg / "__pycache__").glob("*.pyc")}
    assert cached == {"__init__", "a", "b", "broken"}  # broken compiles, then fails as it runs
    assert capsys.readouterr() == ("", "")
    assert script.main(["tiny", "nope"]) == 2 and "'nope'" in capsys.readouterr().err
    for name in ("warm_pkg", "warm_pkg.a", "warm_pkg.b"):
        sys.modules.pop(name, None)
