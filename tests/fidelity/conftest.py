"""The differential suite needs the vLLM 0.33.0 wheel (scripts/fidelity-deps.sh installs it)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
