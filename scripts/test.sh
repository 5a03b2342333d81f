#!/usr/bin/env bash
# Set up everything the tests need, then run the whole suite (engine, API, server, browser).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
bash scripts/fidelity-deps.sh
.venv/bin/ruff check core app plots notebook record tests benchmarks
.venv/bin/mypy core app plots notebook record
exec .venv/bin/python -m pytest -q "$@"
