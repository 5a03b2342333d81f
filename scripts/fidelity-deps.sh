#!/usr/bin/env bash
# Install what the differential suite (tests/fidelity) needs into .venv: the vLLM 0.33.0 wheel
# without its dependencies (its CUDA build pulls torch 2.14 and GPU kernels), plus the few pure
# packages that vllm.v1's scheduler, KV cache manager and GPU model runners import, and Triton
# (Model Runner V2 prepares inputs with Triton kernels; the V2 group runs them under Triton's
# interpreter on the CPU; 3.9.0 works with torch 2.13.0's CPU build). Idempotent:
# a stamp named after this script's content skips the work on later runs. Never fails the
# caller: if the wheel cannot be installed the suite skips and says why.
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
ok=1
if ! "$PY" -m pip install -q --no-deps "${pkgs[@]}" >"$log" 2>&1; then
  ok=0
  echo "fidelity-deps: could not install the vLLM 0.33.0 wheel and its imports; tests/fidelity will skip" >&2
  tail -3 "$log" >&2
fi
# apart, so that without Triton only the V2 group skips
if ! "$PY" -m pip install -q --no-deps "triton==3.9.0" >"$log" 2>&1; then
  ok=0
  echo "fidelity-deps: could not install triton; the Model Runner V2 group of tests/fidelity will skip" >&2
  tail -3 "$log" >&2
fi
[ "$ok" = 1 ] && touch "$stamp"
rm -f "$log"
exit 0
