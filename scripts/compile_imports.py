"""Byte-compile what pagedviz's processes import, by importing it once with bytecode writing on.

    .venv/bin/python scripts/compile_imports.py GROUP...     (app, test, fidelity)

scripts/setup.sh (app; app and test with --test) and scripts/fidelity-deps.sh (fidelity) install
with `pip --no-compile`, since compiling all of torch, vLLM and transformers would take most of the
install's time, and then run this: only the modules that pagedviz's processes import get their .pyc
files, about 6,000 of some 20,000. Python would write them itself at the first import, but not where
PYTHONDONTWRITEBYTECODE is set, as on some CI machines: there every process compiled every module
it imported, each time it started. Python reads a .pyc whatever PYTHONDONTWRITEBYTECODE says; only
the writing is switched off, and here it is switched on again for this one process.

A module that fails to import is passed over (setup and fidelity-deps.sh check what they install);
nothing is printed.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import sys
import warnings

GROUPS = {
    # the server (uvicorn picks its protocol and loop modules when it starts serving), its compute
    # workers, the CLI, the figures and the recorder
    "app": [
        "pagedviz.app.cli",
        "pagedviz.app.serve",
        "pagedviz.app.main",
        "pagedviz.app.compute_worker",
        "pagedviz.core.cli",
        "pagedviz.plots",
        "pagedviz.record",
        "uvicorn.main",
        "uvicorn.lifespan.on",
        "uvicorn.loops.auto",
        "uvicorn.loops.asyncio",
        "uvicorn.loops.uvloop",
        "uvicorn.protocols.http.auto",
        "uvicorn.protocols.http.h11_impl",
        "uvicorn.protocols.http.httptools_impl",
        "uvicorn.protocols.websockets.auto",
        "uvicorn.protocols.websockets.websockets_impl",
        "uvicorn.supervisors.multiprocess",
    ],
    # pytest and its plugins, Playwright, and the notebooks' runner and kernel
    "test": [
        "pytest",
        "xdist",
        "pytest_timeout",
        "hypothesis",
        "httpx",
        "playwright.sync_api",
        "pagedviz.notebook",
        "nbclient",
        "nbformat",
        "ipykernel.kernelapp",
    ],
    # vLLM's scheduler and runners as the fidelity tier drives them, Triton (Model Runner V2) among them
    "fidelity": [
        "pagedviz.core.vllm_engine.v2",  # first: it readies Triton's interpreter before vLLM's imports
        "pagedviz.core.vllm_engine.v1",
        "pagedviz.core.vllm_engine.live",
        "vllm.v1.engine.parallel_sampling",
        "vllm.v1.structured_output",
    ],
}


def main(groups: list[str]) -> int:
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        print(f"compile_imports: unknown group {unknown[0]!r} (use {', '.join(GROUPS)})", file=sys.stderr)
        return 2
    sys.dont_write_bytecode = False
    warnings.simplefilter("ignore")
    for name in (m for g in groups for m in GROUPS[g]):
        with contextlib.suppress(Exception), contextlib.redirect_stdout(io.StringIO()):
            importlib.import_module(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
