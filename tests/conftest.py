"""What every test tier shares: one torch thread per test process, the hypothesis profiles, the
`cuda` marker, and CI's rule that the reference tiers never skip silently.

- OMP_NUM_THREADS=1 (unless set) before anything imports torch, for the test processes and what
  they start (servers, commands). With a thread per core in each of pytest-xdist's workers, the
  threads spin against each other: seed-000's run took 2.5 to 6 s of CPU with two threads on this
  2-core machine under load, 0.06 s with one; test_trace_ownership.py 115 s of CPU against 6 s.
  The app's compute processes set their own count (app/compute.py), no more than this.
- PAGEDVIZ_COMPUTE_NICE=0 (unless set): the compute workers at the tests' own priority.
- Hypothesis: the profile "ci" (no deadline, derandomized: each test's seed is a digest of its own
  code, so every CI run draws the same examples; a failure prints its reproduction blob) is loaded
  when CI=true, the profile "dev" (hypothesis' defaults, random seeds) otherwise; HYPOTHESIS_PROFILE
  names another. The run's header says which, and what the seed is.
- `@pytest.mark.cuda` tests skip, saying so, where torch sees no CUDA GPU.
- The order of the modules, for pytest-xdist (SLOW_FIRST, `pytest_collection_modifyitems`): the
  modules with the longest tests go first in each worker's share of the run, so that no worker
  starts a 20 s test while the others have run out of work.
- With CI=true, a skipped test of the browser tier (tests/browser) or the fidelity tier
  (tests/fidelity) fails the run: the end of the run lists each with its tier and reason. Without
  CI the list is printed and the run passes. Under pytest-xdist the controller collects the skips
  from the workers' reports.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
# the compute pools' workers at the tests' own priority (app/compute_worker.py): niced, they starved
# behind the other xdist worker's server and browser (a 9 s test took 257 s)
os.environ.setdefault("PAGEDVIZ_COMPUTE_NICE", "0")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# the tiers whose tests compare pagedviz with a reference (vLLM's code, what a person sees)
REFERENCE_TIERS = ("browser", "fidelity")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


settings.register_profile("dev")  # hypothesis' defaults: what every run did before the profiles
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if in_ci() else "dev"))


def pytest_report_header(config: pytest.Config) -> str:
    """The hypothesis profile and seed, at the top of a run (pytest prints no header with -q)."""
    current = settings.default
    if current.derandomize:
        seed = "derandomized: each test's seed is a digest of its own code, the same on every run"
    elif config.getoption("hypothesis_seed", None) is not None:
        seed = f"{config.getoption('hypothesis_seed')} (--hypothesis-seed)"
    else:
        seed = "random per test (a failure prints how to reproduce it)"
    return (
        f"hypothesis profile {settings.get_current_profile_name()!r} (deadline={current.deadline}, "
        f"derandomize={current.derandomize}, print_blob={current.print_blob}); seed: {seed}"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("cuda") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU (torch sees none)")


# The modules whose tests take longest (10-30 s each on 2 cores under load; the junit of a CI
# run), longest first. pytest-xdist's worksteal gives each of its N workers one Nth of the list,
# in order, and an idle worker steals from the end of another's share: these modules are dealt
# round-robin to the front of each share, so the long tests start first and the run ends on short
# ones. A module missing here only runs in its usual place.
SLOW_FIRST = (
    "tests/browser/test_browser_lesson.py",
    "tests/api/test_run_store_db.py",
    "tests/api/test_import_api.py",
    "tests/browser/test_browser_zh.py",
    "tests/fidelity/test_vllm_v2_fidelity.py",
    "tests/browser/test_browser_lesson_look.py",
    "tests/api/test_server_logs.py",
    "tests/browser/test_browser_canvas.py",
    "tests/api/test_server.py",
    "tests/api/test_hostile_server.py",
    "tests/fidelity/test_vllm_priority_n.py",
    "tests/engine/test_import_cli.py",
    "tests/api/test_served_arrays.py",
    "tests/browser/test_browser_v2_teach.py",
    "tests/browser/test_browser_view.py",
    "tests/engine/test_engine_choice.py",
    "tests/engine/test_notebooks.py",
    "tests/browser/test_browser_runcharts.py",
    "tests/browser/test_browser.py",
)


def workers(config: pytest.Config) -> int:
    """How many pytest-xdist workers share the run, as a worker is told (1 without xdist; the
    controller collects nothing)."""
    workerinput = getattr(config, "workerinput", None)
    return int(workerinput.get("workercount", 1)) if workerinput else 1


def slow_first(items: list[pytest.Item], shares: int) -> list[pytest.Item]:
    """`items` with SLOW_FIRST's modules dealt round-robin to the front of each of the `shares`
    equal parts of the list (whole modules, each in its own order); the others after them, in
    their order. The same on every worker (xdist checks that each collected the same list)."""
    by_module: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_module.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    slow = [m for m in SLOW_FIRST if m in by_module]
    rest = [m for m in by_module if m not in slow]
    share = -(-len(items) // shares)  # xdist's first share; the others are as long or one shorter
    ordered: list[pytest.Item] = []
    for k in range(shares):
        for module in slow[k::shares]:
            ordered += by_module[module]
        # then the other modules, up to where the next share begins
        while rest and len(ordered) < share * (k + 1):
            ordered += by_module[rest.pop(0)]
    for module in rest:
        ordered += by_module[module]
    return ordered


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if workers(config) > 1:
        items[:] = slow_first(items, workers(config))


def tier_of(nodeid: str, keywords: Any) -> str | None:
    """The reference tier a test or module belongs to, by its folder or its marker."""
    folders = PurePosixPath(nodeid.split("::", 1)[0]).parts[:-1]
    for tier in REFERENCE_TIERS:
        if tier in folders or tier in keywords:
            return tier
    return None


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return str(reason).removeprefix("Skipped: ")


class ReferenceSkips:
    """The skipped tests of the reference tiers, as the reports reach this process."""

    def __init__(self) -> None:
        self.skips: dict[str, tuple[str, str]] = {}  # nodeid -> (tier, reason)

    def note(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        tier = tier_of(report.nodeid, getattr(report, "keywords", {}))
        if tier is not None:
            self.skips.setdefault(report.nodeid, (tier, skip_reason(report)))

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.note(report)

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.note(report)  # a module that skips as a whole (pytest.importorskip at its top)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.skips and in_ci() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.skips:
            return
        tiers = sorted({tier for tier, _ in self.skips.values()})
        if in_ci():
            title = f"CI=true: skipped {' and '.join(tiers)} tests fail the run"
        else:
            title = f"skipped {' and '.join(tiers)} tests (with CI=true they fail the run)"
        terminalreporter.section(title, sep="=", red=in_ci(), yellow=not in_ci(), bold=True)
        for nodeid, (tier, reason) in sorted(self.skips.items()):
            terminalreporter.line(f"SKIPPED [{tier} tier] {nodeid}: {reason}")


def pytest_configure(config: pytest.Config) -> None:
    # on an xdist worker the controller gets every report and decides; the worker only runs tests
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(ReferenceSkips(), "reference-tier-skips")
