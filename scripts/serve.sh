#!/usr/bin/env bash
# Set up pagedviz (only what is missing: see setup.sh) and start the web app on its embedded
# defaults (presets included). Arguments go to `pagedviz serve`: `bash scripts/serve.sh --port 9000`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/pagedviz serve "$@"
