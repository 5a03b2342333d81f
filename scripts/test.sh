#!/usr/bin/env bash
# Set up everything the tests need, check the code, then run the test suite in parallel.
#
#   bash scripts/test.sh              the whole suite: tests/engine, tests/api, tests/browser (Chromium)
#                                     and tests/fidelity (vLLM 0.33.0's own code)
#   bash scripts/test.sh --fast       the daily lane: the engine and API tiers only; skips the browser
#                                     and fidelity tiers and the setup only they need (Chromium, vLLM)
#   bash scripts/test.sh ARGS...      ARGS go to pytest, e.g. `tests/engine -k golden` or `-n 0`
#
# Setup (scripts/setup.sh --test, scripts/fidelity-deps.sh), then ruff, then pytest with mypy and
# import-linter's contracts beside it (one core for about 40 s: in the background they cost the run
# about half of that; their output comes after pytest's, and either failing fails the run). pytest
# runs with pytest-xdist (-n auto: one worker per core, set PYTEST_XDIST_AUTO_NUM_WORKERS to
# choose; --dist worksteal, the longest modules first: tests/conftest.py), pytest-timeout (600 s a
# test, by SIGALRM, so that a hung test fails alone and the run goes on), -rs (why each skipped test
# skipped) and --durations=15 (the 15 slowest). With CI=true a skipped browser or fidelity test
# fails the run and hypothesis runs its "ci" profile (tests/conftest.py).
set -euo pipefail
cd "$(dirname "$0")/.."
FAST=0
if [ "${1:-}" = "--fast" ]; then
  FAST=1
  shift
fi
# the time each step took, so that a slow CI run says where its time went
step() {
  local start=$SECONDS
  "$@"
  echo "test.sh: $* took $((SECONDS - start)) s" >&2
}
if [ "$FAST" = 1 ]; then
  # no Chromium: the browser tier is not run
  step env PAGEDVIZ_NO_APT=1 bash scripts/setup.sh --test
else
  step bash scripts/setup.sh --test
  step bash scripts/fidelity-deps.sh
fi
step .venv/bin/ruff check core app plots notebook record tests benchmarks
# mypy and import-linter in the background, after every install (mypy reads the installed packages'
# types: vLLM's among them), their output in a file shown once pytest is done
checks_log=$(mktemp)
(
  step .venv/bin/mypy core app plots notebook record
  if grep -q '^\[tool\.importlinter\]' pyproject.toml; then
    step .venv/bin/lint-imports
  fi
) >"$checks_log" 2>&1 &
checks=$!
trap 'kill "$checks" 2>/dev/null || true; rm -f "$checks_log"' EXIT
tiers=()
if [ "$FAST" = 1 ]; then
  tiers=(--ignore=tests/browser --ignore=tests/fidelity -m "not browser and not fidelity")
fi
status=0
.venv/bin/python -m pytest -n auto --dist worksteal --timeout=600 --timeout-method=signal \
  -rs --durations=15 "${tiers[@]}" "$@" || status=$?
if wait "$checks"; then
  cat "$checks_log" >&2
else
  cat "$checks_log" >&2
  echo "test.sh: mypy or import-linter failed (above)" >&2
  [ "$status" = 0 ] && status=1
fi
exit "$status"
