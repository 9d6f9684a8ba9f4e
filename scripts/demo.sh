#!/usr/bin/env bash
# `make demo`: a whole pool on this machine under a burst, then its report.
#   1. preheat up -f examples/pool.yaml     (sim workers + router, autoscaled; in the background)
#   2. preheat load                          (a slice of the Mooncake trace, time-compressed)
#   3. wait for the scale-down, Ctrl-C (SIGINT) preheat up: it drains everything
#   4. preheat report                        (table + PNG plots in the run folder)
# Knobs (environment): RUN (run folder), TRACE, TIME_SCALE, DURATION_S, MAX_OUTPUT_TOKENS.
set -euo pipefail

PREHEAT=${PREHEAT:-.venv/bin/preheat}
PY=${PY:-.venv/bin/python}
RUN=${RUN:-runs/demo}
POOL=${POOL:-examples/pool.yaml}
TRACE=${TRACE:-../shared/data/mooncake_conversation_trace.jsonl}
TIME_SCALE=${TIME_SCALE:-0.4}
DURATION_S=${DURATION_S:-40}
MAX_OUTPUT_TOKENS=${MAX_OUTPUT_TOKENS:-64}
TOKEN_SCALE=${TOKEN_SCALE:-0.5}
MAX_INPUT_TOKENS=${MAX_INPUT_TOKENS:-12000}
TTFT_OBJECTIVE_MS=${TTFT_OBJECTIVE_MS:-1000}

if [[ ! -r "$TRACE" ]]; then
  echo "demo: trace $TRACE not found (the shared data folder is ../shared/data; set TRACE=...)" >&2
  exit 2
fi

state() {  # state KEY: a field of up.json (router.grpc, ready, desired, counts.active, ...)
  "$PY" - "$RUN/up.json" "$1" <<'PYEOF'
import json, sys
try:
    value = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print(""); sys.exit(0)
for key in sys.argv[2].split("."):
    value = value.get(key, "") if isinstance(value, dict) else ""
print(json.dumps(value) if isinstance(value, bool) else value)
PYEOF
}

rm -rf "$RUN"
mkdir -p "$RUN"
echo "demo: preheat up -f $POOL --out $RUN   (log: $RUN/up.log)"
"$PREHEAT" up -f "$POOL" --out "$RUN" --no-ui >"$RUN/up.log" 2>&1 &
UP=$!
stop_up() {
  if kill -0 "$UP" 2>/dev/null; then
    kill -INT "$UP" 2>/dev/null || true
    wait "$UP" 2>/dev/null || true
  fi
}
trap stop_up EXIT

for _ in $(seq 1 120); do
  [[ "$(state ready)" == "true" ]] && break
  if ! kill -0 "$UP" 2>/dev/null; then
    echo "demo: preheat up exited; its log:" >&2
    tail -20 "$RUN/up.log" >&2
    exit 1
  fi
  sleep 0.5
done
if [[ "$(state ready)" != "true" ]]; then
  echo "demo: the pool was not ready after 60 s; see $RUN/up.log" >&2
  exit 1
fi
TARGET=$(state router.grpc)
echo "demo: pool ready ($(state counts.active) active, $(state counts.standby) standby); router $TARGET"

echo "demo: preheat load: $TRACE, time x$TIME_SCALE, prompts x$TOKEN_SCALE (<= $MAX_INPUT_TOKENS), outputs <= $MAX_OUTPUT_TOKENS tokens, ${DURATION_S} s"
"$PREHEAT" load --target "$TARGET" --trace "$TRACE" --time-scale "$TIME_SCALE" \
  --duration "$DURATION_S" --max-output-tokens "$MAX_OUTPUT_TOKENS" \
  --token-scale "$TOKEN_SCALE" --max-input-tokens "$MAX_INPUT_TOKENS" \
  --ttft-objective-ms "$TTFT_OBJECTIVE_MS" --out "$RUN"

echo "demo: load done; waiting for the pool to scale back down"
for _ in $(seq 1 90); do
  [[ "$(state desired)" == "1" && "$(state counts.active)" == "1" ]] && break
  sleep 0.5
done
sleep 2  # a moment at rest, so that the plot shows the pool scaled down
stop_up
trap - EXIT
echo "demo: scaling events (from $RUN/events.jsonl):"
"$PY" - "$RUN/events.jsonl" <<'PYEOF'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["kind"] in ("scale_up", "scale_down", "promote", "demote", "drain", "crash", "restart"):
        who = e["worker"] or ""
        print(f"  {e['t_s']:7.1f} s  {e['kind']:<10} {who:<5} {e['reason'][:110]}")
PYEOF
"$PREHEAT" report "$RUN"
