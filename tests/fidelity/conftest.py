"""The fidelity tier: pagedviz against vLLM 0.33.0's own code (its Scheduler, the V1 and V2
runners, V2's Triton kernels under TRITON_INTERPRET=1, the recorder). Every test here is marked
`fidelity` (`pytest -m fidelity` runs the tier, `-m "not fidelity"` leaves it out).

The tier is loud when what it needs is missing: a module that needs vLLM or Triton skips with a
reason naming what is missing and `bash scripts/fidelity-deps.sh`, which installs it
(tests/support/fidelity_env.py), and the run ends with a section counting the tier's skips by
reason.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.fidelity)


def _skip_reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The tier's skips, by reason (a module that skips counts once)."""
    prefix = HERE.relative_to(config.rootpath).as_posix() + "/"
    reasons: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        if getattr(report, "nodeid", "").startswith(prefix):
            reasons[_skip_reason(report)] += 1
    if not reasons:
        return
    terminalreporter.section("fidelity tier: skipped tests", sep="-", yellow=True, bold=True)
    for reason, n in reasons.most_common():
        terminalreporter.line(f"{n:4d} skipped: {reason}")
