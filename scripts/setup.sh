#!/usr/bin/env bash
# Create .venv with CPU torch and pagedviz installed (idempotent). With --test, also the test tools
# and Debian's chromium for the browser tests (installed with apt when running as root).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
# CPU torch first, so that the project's `torch>=2.4` does not pull a CUDA build
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  .venv/bin/python -m pip install -q "torch==2.13.0"
fi
if [ "${1:-}" = "--test" ]; then
  .venv/bin/python -m pip install -q -e ".[test]"
  if [ ! -x /usr/bin/chromium ] || [ ! -d /usr/share/fonts/opentype/noto ]; then
    if [ "$(id -u)" = "0" ]; then
      # chromium for the browser tests; Noto CJK so that 简体中文 renders in their screenshots
      log=$(mktemp)
      if ! (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium fonts-noto-cjk) >"$log" 2>&1; then
        cat "$log" >&2
        echo "setup: installing chromium and fonts-noto-cjk with apt failed (see above)" >&2
        exit 1
      fi
      rm -f "$log"
    else
      echo "note: /usr/bin/chromium is missing and this is not root; browser tests will be skipped" >&2
    fi
  fi
else
  .venv/bin/python -m pip install -q -e .
fi
