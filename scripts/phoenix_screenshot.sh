#!/usr/bin/env bash
# Takes docs/img/phoenix_trace.png: a budgetmix trace as Arize Phoenix shows it.
#   bash scripts/phoenix_screenshot.sh [out.png]
# Installs Phoenix (scripts/install_phoenix.sh) and, as root, Debian's chromium if it is
# missing; starts `phoenix serve` on a free 127.0.0.1 port with a temporary sqlite
# folder and telemetry off; exports examples/traces_in_a_backend.py into it (content
# captured); opens the first support episode's trace with its answering chat turn
# selected in headless chromium and saves the screenshot. Nothing leaves 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-docs/img/phoenix_trace.png}"
bash scripts/install_phoenix.sh
if ! command -v chromium >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] || { echo "phoenix_screenshot: needs chromium (apt-get install chromium)" >&2; exit 1; }
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core >/dev/null
fi
WORK="$(mktemp -d)"
PORT="$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
GRPC="$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
PHOENIX_HOST=127.0.0.1 PHOENIX_PORT="$PORT" PHOENIX_GRPC_PORT="$GRPC" PHOENIX_WORKING_DIR="$WORK" \
  PHOENIX_TELEMETRY_ENABLED=false .venv-phoenix/bin/phoenix serve >"$WORK/phoenix.log" 2>&1 &
PHOENIX_PID=$!
trap 'kill "$PHOENIX_PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT
URL="http://127.0.0.1:$PORT"
for _ in $(seq 1 180); do
  curl -sf "$URL/healthz" >/dev/null 2>&1 && break
  sleep 1
done
.venv/bin/python examples/traces_in_a_backend.py "$URL"
PAGE="$(.venv/bin/python - "$URL" <<'PY'
import sys, time
import httpx

url = sys.argv[1]
api = httpx.Client(base_url=url, trust_env=False)
for _ in range(60):  # ingestion is asynchronous
    reply = api.get("/v1/projects/budgetmix/spans", params={"limit": 100})
    spans = reply.json()["data"] if reply.status_code == 200 else []
    if len(spans) >= 11:
        break
    time.sleep(0.5)
project = next(p for p in api.get("/v1/projects").json()["data"] if p["name"] == "budgetmix")
answer = next(
    s for s in spans
    if s["span_kind"] == "LLM"
    and s["attributes"].get("llm.output_messages.0.message.content") == "It ships today."
)
print(f"{url}/projects/{project['id']}/traces/{answer['context']['trace_id']}"
      f"?selectedSpanNodeId={answer['id']}")
PY
)"
echo "phoenix_screenshot: $PAGE"
mkdir -p "$(dirname "$OUT")"
chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1600,1000 \
  --virtual-time-budget=20000 --screenshot="$OUT" "$PAGE" >/dev/null 2>&1
echo "phoenix_screenshot: wrote $OUT"
