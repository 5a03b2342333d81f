#!/usr/bin/env bash
# CI stand-in for `docker build` + `docker run`: the Dockerfile's install steps in a fresh virtual
# environment (non-editable install, run from another directory), the image's command on a free
# port, then /healthz and one run end to end.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'kill "${PID:-0}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
python3 -m venv "$WORK/venv"
bash "$SRC/scripts/docker-install.sh" "$WORK/venv/bin/python" "$SRC"
PORT=$("$WORK/venv/bin/python" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
cd "$WORK"
"$WORK/venv/bin/pagedviz" serve --host 0.0.0.0 --port "$PORT" > "$WORK/server.log" 2>&1 &
PID=$!
up=0
for _ in $(seq 1 90); do
  if "$WORK/venv/bin/python" -c "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:$PORT/healthz', timeout=2).status != 200)" 2>/dev/null; then
    up=1
    break
  fi
  kill -0 "$PID" 2>/dev/null || break
  sleep 1
done
if [ "$up" != 1 ]; then
  echo "docker steps: the server did not come up; its log:" >&2
  cat "$WORK/server.log" >&2
  exit 1
fi
"$WORK/venv/bin/python" - "$PORT" <<'PYEOF'
import io, json, sys, urllib.request
import numpy as np
base = f"http://127.0.0.1:{sys.argv[1]}"
health = json.load(urllib.request.urlopen(base + "/healthz"))
assert health["status"] == "ok", health
preset = json.load(urllib.request.urlopen(base + "/api/presets/seed-001"))["scenario"]
req = urllib.request.Request(base + "/api/runs", data=json.dumps(preset).encode(),
                             headers={"Content-Type": "application/json"}, method="POST")
run = json.load(urllib.request.urlopen(req))
raw = urllib.request.urlopen(f"{base}/api/runs/{run['run_id']}/steps/2/arrays/slot_mapping?format=npy").read()
slots = np.load(io.BytesIO(raw)).tolist()
assert slots == [5, 14, 13, 16, 17], slots
page = urllib.request.urlopen(base + "/").read().decode()
assert "pagedviz" in page
print(f"docker steps: healthz ok ({health['device']}), seed-001 step 2 slot_mapping {slots}, page served")
PYEOF
