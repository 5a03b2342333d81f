#!/usr/bin/env bash
# Set up pagedviz and start the web app on its embedded defaults (presets included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/pagedviz serve "$@"
