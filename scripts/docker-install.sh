#!/usr/bin/env bash
# The install steps of the Dockerfile, shared with CI (which runs them in a fresh virtual environment,
# since no image can be built there). Usage: docker-install.sh PYTHON SOURCE_DIR
set -euo pipefail
PY=${1:-python3}
SRC=${2:-.}
# CPU torch first; TORCH_INDEX_URL (set in the Dockerfile) points pip at PyTorch's CPU wheels
"$PY" -m pip install --no-cache-dir -q "torch==2.13.0" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
"$PY" -m pip install --no-cache-dir -q "$SRC"
