#!/usr/bin/env bash
# Runs pytest on TESTS twice more, each time inside a time namespace (`unshare --time`) whose
# clocks read as on another machine:
#   fresh: about 30 s after boot (what CI gets on a machine booted for it), and
#   old:   about 30 days after boot.
# The monotonic and boot-time offsets are computed from this machine's clocks when the script
# runs, and each run checks inside the namespace that the clock reads what was asked.
#
# usage: scripts/test_clocks.sh PYTHON TESTS...   (PYTHON: the virtualenv's interpreter)
#
# A time namespace needs CAP_SYS_ADMIN (root), or an unprivileged user namespace
# (`--map-current-user`, tried next). Where neither is allowed the runs cannot happen: that is
# an error under CI=true, and a loud notice (exit 0) elsewhere.
set -euo pipefail

py=${1:?usage: $0 PYTHON TESTS...}
shift
[ $# -gt 0 ] || { echo "usage: $0 PYTHON TESTS..." >&2; exit 2; }

FRESH_S=30           # seconds since boot on a freshly booted machine
OLD_S=$((30 * 86400)) # seconds since boot on one that has been up for 30 days

ci() { [ "${CI:-}" = "true" ]; }

# Seconds on this machine's clocks now (integers), and the offset that makes each read $1.
monotonic_now() { "$py" -c 'import time; print(int(time.monotonic()))'; }
boottime_now() { "$py" -c 'import time; print(int(time.clock_gettime(time.CLOCK_BOOTTIME)))'; }

# unshare's flags that work here (as root: none; else an unprivileged user namespace).
userns=()
if ! unshare --time --fork --monotonic=0 true 2>/dev/null; then
    if unshare --map-current-user --time --fork --monotonic=0 true 2>/dev/null; then
        userns=(--map-current-user)
    else
        why="unshare --time is not permitted here (needs root or unprivileged user namespaces)"
        if ci; then
            echo "ERROR: $why; CI=true, so the fresh-boot and 30-day clock runs fail" >&2
            exit 1
        fi
        echo "NOTICE: $why: the fresh-boot and 30-day clock runs did NOT run" >&2
        exit 0
    fi
fi

run_at() {
    local name=$1 target=$2
    shift 2
    local mono boot
    mono=$(monotonic_now)
    boot=$(boottime_now)
    local mono_off=$((target - mono)) boot_off=$((target - boot))
    echo "== clock run '$name': monotonic ${mono} s -> about ${target} s (offset ${mono_off} s)"
    # The namespace's clocks, checked before the tests run (a wrong offset is not a pass).
    unshare "${userns[@]}" --time --fork --monotonic="$mono_off" --boottime="$boot_off" \
        "$py" - "$target" <<'EOF'
import sys
import time

target = float(sys.argv[1])
now = time.monotonic()
if not target - 5 <= now <= target + 600:
    sys.exit(f"ERROR: the time namespace's monotonic clock reads {now:.0f} s, not ~{target:.0f} s")
print(f"   monotonic in the namespace: {now:.1f} s")
EOF
    local rc=0
    unshare "${userns[@]}" --time --fork --monotonic="$mono_off" --boottime="$boot_off" \
        "$py" -m pytest -p no:cacheprovider "$@" || rc=$?
    if [ $rc = 5 ]; then
        echo "ERROR: pytest ran no tests in the '$name' clock run: $*" >&2
    elif [ $rc != 0 ]; then
        echo "ERROR: the '$name' clock run failed (pytest exit $rc): $*" >&2
    fi
    return $rc
}

run_at fresh "$FRESH_S" "$@"
run_at old "$OLD_S" "$@"
echo "== both clock runs passed"
