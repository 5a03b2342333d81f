"""What the fidelity tier (tests/fidelity) needs installed, and the skip that says what is missing.

The tier runs vLLM 0.33.0's own code (its wheel, installed without its dependencies, plus the few
packages its scheduler and runners import) and Triton (Model Runner V2's kernels, run under
Triton's interpreter). `scripts/fidelity-deps.sh` installs all of it. A module that needs them
calls `require_vllm()` / `require_triton()` before importing them: without them the module skips,
and the reason names what is missing and the command that installs it (CI fails on that skip).

Triton is looked up, never imported here: the vLLM side's `env.prepare()` must be the first to
import it, with its interpreter on.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util

import pytest

from pagedviz.core.vllm_engine import VLLM_VERSION, installed_vllm

INSTALL = "bash scripts/fidelity-deps.sh"


@functools.cache
def vllm_missing() -> str | None:
    """Why vLLM's side cannot run here (None: it can): no vLLM, another version, or a dependency
    of vLLM's that is not installed."""
    version = installed_vllm()
    if version is None:
        return f"vLLM {VLLM_VERSION} is not installed ({INSTALL})"
    if version.split("+")[0] != VLLM_VERSION:
        return f"vLLM {version} is installed, the fidelity tier compares with vLLM {VLLM_VERSION} ({INSTALL})"
    try:
        importlib.import_module("pagedviz.core.vllm_engine.v1")  # vLLM's scheduler and V1 runner
    except ImportError as e:
        what = f"the module {e.name!r}" if e.name else "a module"
        return f"vLLM {VLLM_VERSION} is installed but {what} it imports is not ({e}; {INSTALL})"
    return None


@functools.cache
def triton_missing() -> str | None:
    """Why Model Runner V2's kernels cannot run here (None: they can)."""
    if importlib.util.find_spec("triton") is None:
        return f"Triton is not installed: Model Runner V2's kernels run under its interpreter ({INSTALL})"
    return None


def require_vllm() -> None:
    """Skip the calling test module, saying what is missing, unless vLLM's side can run."""
    __tracebackhide__ = True  # the skip is reported at the module's call, not here
    why = vllm_missing()
    if why:
        pytest.skip(why, allow_module_level=True)


def require_triton() -> None:
    """Skip the calling test module unless vLLM's side and Model Runner V2's kernels can run."""
    __tracebackhide__ = True
    require_vllm()
    why = triton_missing()
    if why:
        pytest.skip(why, allow_module_level=True)


def needs_triton() -> pytest.MarkDecorator:
    """The mark of a test (or parameter) that runs Model Runner V2's kernels."""
    return pytest.mark.skipif(triton_missing() is not None, reason=triton_missing() or "")
