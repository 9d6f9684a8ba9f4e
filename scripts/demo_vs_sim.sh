#!/usr/bin/env bash
# The live demo and its simulation side by side: scripts/demo.sh (preheat up + preheat load
# into $RUN), then preheat simulate on the same pool and trace slice twice: with that run's
# settings (--from-run $RUN) and with the simulator's defaults (a production start-up).
# Prints one line: TTFT SLO attainment of each. Same knobs (environment) as scripts/demo.sh.
set -euo pipefail

PREHEAT=${PREHEAT:-.venv/bin/preheat}
PY=${PY:-.venv/bin/python}
export RUN=${RUN:-runs/demo}
POOL=${POOL:-examples/pool.yaml}
TRACE=${TRACE:-../shared/data/mooncake_conversation_trace.jsonl}
SLICE=(--trace "$TRACE" --time-scale "${TIME_SCALE:-0.4}" --duration "${DURATION_S:-40}"
  --max-output-tokens "${MAX_OUTPUT_TOKENS:-64}" --token-scale "${TOKEN_SCALE:-0.5}"
  --max-input-tokens "${MAX_INPUT_TOKENS:-12000}" --ttft-objective-ms "${TTFT_OBJECTIVE_MS:-1000}")

PREHEAT=$PREHEAT PY=$PY POOL=$POOL TRACE=$TRACE scripts/demo.sh
"$PREHEAT" simulate --from-run "$RUN" "${SLICE[@]}" --out "$RUN-sim-from-run" --no-plots
"$PREHEAT" simulate --pool "$POOL" "${SLICE[@]}" --out "$RUN-sim-defaults" --no-plots
"$PY" - "$RUN" "$RUN-sim-from-run" "$RUN-sim-defaults" <<'PYEOF'
import sys
from preheat.report.record import read_run
from preheat.report.summary import summarize

names = ("live", "simulated --from-run", "simulated, defaults")
parts = []
for name, folder in zip(names, sys.argv[1:]):
    s = summarize(read_run(folder))
    parts.append(f"{name} {100 * (s.slo_attainment or 0):.1f}% (n={s.ok + s.rejected + s.error})")
print("demo_vs_sim: TTFT within the objective: " + "; ".join(parts))
PYEOF
