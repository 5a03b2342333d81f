#!/usr/bin/env bash
# Create .venv with torch and pagedviz installed. Installs only what is missing: torch once, the
# package again only when pyproject.toml changed (a stamp in .venv holds its hash), so a second
# start costs well under a second. With --test, also the test tools, the notebook extra (the example
# notebooks run in the tests) and Debian's chromium-headless-shell for the
# browser tests (installed with apt when running as root).
#
# Torch: the CPU build when there is no NVIDIA GPU (nvidia-smi absent or failing), PyPI's default
# (CUDA) build when there is one; TORCH_INDEX_URL overrides the choice. When the chosen index does
# not answer, or pip fails with it, a plain `pip install torch==...` follows. One line says which.
#
# For the script's own test: PAGEDVIZ_NVIDIA_SMI replaces the GPU check's command,
# PAGEDVIZ_TORCH_CPU_INDEX the CPU index, PAGEDVIZ_PIP the pip command, PAGEDVIZ_NO_APT=1 skips apt;
# --dry-run prints the torch choice and its pip command and installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_VERSION=2.13.0
CPU_INDEX=${PAGEDVIZ_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
NVIDIA_SMI=${PAGEDVIZ_NVIDIA_SMI:-nvidia-smi}
STAMP=.venv/.pagedviz-setup
MODE=app
DRY_RUN=0
for arg in "$@"; do
  case "$arg" in
    --test) MODE=test ;;
    --dry-run) DRY_RUN=1 ;;
    *) echo "setup: unknown option $arg (use --test, --dry-run)" >&2; exit 2 ;;
  esac
done
read -r -a PIP <<<"${PAGEDVIZ_PIP:-.venv/bin/python -m pip}"
# pip installs without byte-compiling every module (torch, plotly, sympy...: about 11,000 files and
# most of the install's time); what pagedviz imports is compiled after the install, below
INSTALL=(install -q --no-compile)

# The index that answers within a few seconds, or nothing
reachable() {
  "$PY" - "$1" <<'PYEOF' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=4)
PYEOF
}

# Prints the torch choice (one line, to stderr) and sets TORCH_INDEX to an index URL or ""
choose_torch() {
  local why
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    TORCH_INDEX=$TORCH_INDEX_URL why="TORCH_INDEX_URL"
  elif "$NVIDIA_SMI" >/dev/null 2>&1; then
    TORCH_INDEX="" why="an NVIDIA GPU answers nvidia-smi"
  else
    TORCH_INDEX=$CPU_INDEX why="no NVIDIA GPU (nvidia-smi absent or failing)"
  fi
  if [ -z "$TORCH_INDEX" ]; then
    echo "setup: torch $TORCH_VERSION from the default index ($why)" >&2
  elif reachable "$TORCH_INDEX"; then
    echo "setup: torch $TORCH_VERSION from $TORCH_INDEX ($why)" >&2
  else
    echo "setup: torch $TORCH_VERSION from the default index ($TORCH_INDEX, chosen because $why, does not answer)" >&2
    TORCH_INDEX=""
  fi
}

install_torch() {
  choose_torch
  local cmd=("${PIP[@]}" "${INSTALL[@]}" "torch==$TORCH_VERSION")
  if [ "$DRY_RUN" = 1 ]; then
    echo "would run: ${cmd[*]}${TORCH_INDEX:+ --index-url $TORCH_INDEX}"
    return
  fi
  if [ -n "$TORCH_INDEX" ]; then
    # the index replaces PyPI only; pip's configured find-links and extra indexes still apply
    if "${cmd[@]}" --index-url "$TORCH_INDEX"; then
      return
    fi
    echo "setup: pip failed with $TORCH_INDEX; falling back to the default index" >&2
  fi
  "${cmd[@]}"
}

if [ "$DRY_RUN" = 1 ]; then
  install_torch
  exit 0
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# torch before the package, so that the project's `torch>=2.4` does not pull another build;
# find_spec, not import: importing torch alone takes seconds
if ! .venv/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"; then
  install_torch
fi
HASH=$("$PY" -c "import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], 'rb').read()).hexdigest())" pyproject.toml)
read -r OLD_HASH OLD_MODE 2>/dev/null <"$STAMP" || true
if [ "${OLD_HASH:-}" != "$HASH" ] || { [ "$MODE" = test ] && [ "${OLD_MODE:-}" != test ]; }; then
  if [ "$MODE" = test ]; then
    "${PIP[@]}" "${INSTALL[@]}" -e ".[test,notebook]"
  else
    "${PIP[@]}" "${INSTALL[@]}" -e .
  fi
  # the .pyc files of what the server, its compute workers and the CLI import (with --test, the
  # test tools too): pip compiled nothing, and where PYTHONDONTWRITEBYTECODE is set Python never
  # writes them itself, so that each process would compile them again (scripts/compile_imports.py)
  groups=(app)
  [ "$MODE" = test ] && groups+=(test)
  .venv/bin/python scripts/compile_imports.py "${groups[@]}" >/dev/null 2>&1 || true
  echo "$HASH $MODE" >"$STAMP"
fi
if [ "$MODE" = test ] && { [ ! -x /usr/bin/chromium-headless-shell ] || [ ! -d /usr/share/fonts/opentype/noto ]; }; then
  if [ "$(id -u)" = "0" ] && [ -z "${PAGEDVIZ_NO_APT:-}" ]; then
    # Chromium's headless shell for the browser tests (Debian's build of the same Chromium without
    # the desktop browser around it: the browser tier takes about a third less CPU with it than
    # with chromium, benchmarks/README.md); Noto CJK so that 简体中文 renders in their screenshots
    log=$(mktemp)
    if ! (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium-headless-shell fonts-noto-cjk) >"$log" 2>&1; then
      cat "$log" >&2
      rm -f "$log"
      echo "setup: installing chromium-headless-shell and fonts-noto-cjk with apt failed (see above)" >&2
      exit 1
    fi
    rm -f "$log"
  else
    why="not installed here (not root, or PAGEDVIZ_NO_APT)"
    if [ ! -x /usr/bin/chromium-headless-shell ] && [ ! -x /usr/bin/chromium ]; then
      echo "note: /usr/bin/chromium-headless-shell is missing and $why; browser tests will be skipped" >&2
    elif [ ! -x /usr/bin/chromium-headless-shell ]; then
      echo "note: /usr/bin/chromium-headless-shell is missing and $why;" \
        "browser tests run on /usr/bin/chromium, with about a third more CPU" >&2
    fi
    if [ ! -d /usr/share/fonts/opentype/noto ]; then
      echo "note: fonts-noto-cjk is missing and $why; the browser tests' screenshots may show 简体中文 as boxes" >&2
    fi
  fi
fi
