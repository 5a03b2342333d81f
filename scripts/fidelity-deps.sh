#!/usr/bin/env bash
# Install what the differential suite (tests/fidelity) needs into .venv: the vLLM 0.33.0 wheel
# without its dependencies (its CUDA build pulls torch 2.14 and GPU kernels), plus the few pure
# packages that vllm.v1's scheduler, KV cache manager and GPU model runners import, and Triton
# (Model Runner V2 prepares inputs with Triton kernels; the V2 group runs them under Triton's
# interpreter on the CPU; 3.9.0 works with torch 2.13.0's CPU build). Idempotent:
# a stamp named after this script's content skips the work on later runs.
#
# Then it checks what the tier imports (vLLM's version, vLLM's scheduler and V1 runner with every
# module they import, Triton) and names whatever is still missing. On a newcomer's machine it never
# fails the caller: the tests that need what is missing skip, each saying why. Under CI=true it
# exits 1 instead, since CI must run the whole tier.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
stamp=".venv/.fidelity-deps-$(sha256sum "$0" | cut -c1-12)"
[ -f "$stamp" ] && exit 0
# the vLLM pins come from vllm-0.33.0's own requirements
pkgs=(
  "vllm==0.33.0"
  "transformers>=5.16.1,<5.21.0" "tokenizers>=0.23.2" "safetensors>=0.6.2" "huggingface_hub>=1.31.0"
  "xgrammar==0.2.8" "apache-tvm-ffi==0.1.11" "llguidance>=1.7.0,<1.8.0" "partial-json-parser"
  "openai>=2.25.0" "openai-harmony" "aiohttp>=3.14.4" "aiohappyeyeballs" "aiosignal" "frozenlist"
  "multidict>=6.9.1" "yarl" "propcache" "attrs" "sniffio" "httpx2" "httpcore2" "truststore"
  "requests>=2.33.0" "urllib3" "regex" "cachetools" "cbor2" "cloudpickle" "einops" "msgspec"
  "pillow" "prometheus_client>=0.18.0" "psutil" "py-cpuinfo" "pybase64" "pyyaml" "pyzmq>=25.0.0"
  "tqdm" "uvloop"
)
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# pip install --no-deps "$@", saying what it could not install and pip's last lines. --no-compile:
# pip byte-compiles nothing (vLLM, transformers, openai and triton are some 8,400 modules, of which
# the tests import about 2,000: scripts/compile_imports.py compiles those, below), as setup.sh does
install() {
  local what=$1
  shift
  if ! "$PY" -m pip install -q --no-deps --no-compile "$@" >"$log" 2>&1; then
    echo "fidelity-deps: could not install $what; pip said:" >&2
    tail -3 "$log" | sed 's/^/    /' >&2
  fi
}
install "the vLLM 0.33.0 wheel and the packages its scheduler and runners import" "${pkgs[@]}"
# apart, so that without Triton only the V2 group skips
install "triton 3.9.0 (Model Runner V2's kernels)" "triton==3.9.0"

# what the tier imports, one line per thing still missing (tests/support/fidelity_env.py asks the
# same questions when the tests skip); first, in the same process, the .pyc files of what the tier
# imports (pip compiled nothing: scripts/compile_imports.py), which leaves the check's imports done
missing=$("$PY" - 2>/dev/null <<'PYEOF' || echo "  - $PY cannot run (create .venv first: bash scripts/setup.sh --test)"
import contextlib
import importlib
import importlib.util
import runpy
from importlib import metadata

with contextlib.suppress(Exception):
    runpy.run_path("scripts/compile_imports.py")["main"](["fidelity"])

try:
    version = metadata.version("vllm")
except metadata.PackageNotFoundError:
    version = None
if version is None:
    print("  - vLLM 0.33.0 is not installed: the whole tier skips")
elif version.split("+")[0] != "0.33.0":
    print(f"  - vLLM {version} is installed, not 0.33.0: the whole tier skips")
else:
    try:
        importlib.import_module("pagedviz.core.vllm_engine.v1")  # vLLM's scheduler and V1 runner
    except ImportError as e:
        print(f"  - {e.name or e} (imported by vLLM 0.33.0) is not installed: the whole tier skips")
    except Exception as e:  # noqa: BLE001 (any failure of vLLM's import is worth a line)
        print(f"  - vLLM 0.33.0 fails to import ({e!r}): the whole tier skips")
if importlib.util.find_spec("triton") is None:
    print("  - Triton is not installed: the Model Runner V2 tests skip")
PYEOF
)
if [ -z "$missing" ]; then
  touch "$stamp"
  exit 0
fi
echo "fidelity-deps: tests/fidelity cannot run all of its tests here, for want of:" >&2
echo "$missing" >&2
if [ "${CI:-}" = "true" ]; then
  echo "fidelity-deps: CI=true, and CI must run the fidelity tier: failing" >&2
  exit 1
fi
echo "fidelity-deps: those tests skip, each saying why; run 'bash scripts/fidelity-deps.sh' again once pip can reach PyPI" >&2
exit 0
