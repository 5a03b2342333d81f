#!/usr/bin/env bash
# On a machine with a CUDA GPU: run the engine's tests there (the CUDA ones included: identical
# traces on CPU and CUDA for every preset, on both runners, pinned staging) and print
# benchmarks/device.py. Scenarios are validated by pydantic: install it where torch is.
# Uses the Python you point it at (PYTHON=..., default python3) with its own torch build, so a
# CUDA torch is kept; the engine needs only torch, numpy, pytest and hypothesis. When the web
# stack (fastapi, uvicorn, ...) is importable too, the whole suite runs.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# the checkout as the `pagedviz` package without installing it: core/ and app/ linked under a
# pagedviz/ folder on PYTHONPATH
SHIM=$(mktemp -d)
trap 'rm -rf "$SHIM"' EXIT
mkdir "$SHIM/pagedviz"
ln -s "$PWD/core" "$SHIM/pagedviz/core"
ln -s "$PWD/app" "$SHIM/pagedviz/app"
export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$PY" - <<'PYCODE'
import sys
import torch
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}")
if not torch.cuda.is_available():
    sys.exit("gpu-check: torch sees no CUDA GPU here; the CUDA tests would only skip")
print("GPU:", torch.cuda.get_device_name(0))
PYCODE
if "$PY" -c "import fastapi, fastapi_offline, uvicorn, pydantic, jinja2, httpx" 2>/dev/null; then
    "$PY" -m pytest -q -rs tests
else
    echo "(web stack not importable: running the engine's tests only)"
    "$PY" -m pytest -q -rs tests/test_documents.py tests/test_properties.py tests/test_device_model.py \
        tests/test_golden.py tests/test_scheduler_scenarios.py tests/test_input_batch.py \
        tests/test_kv_cache.py tests/test_scenario.py tests/test_v2_runner.py tests/test_async_scheduling.py
fi
"$PY" benchmarks/device.py "$@"
