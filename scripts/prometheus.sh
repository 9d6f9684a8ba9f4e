#!/usr/bin/env bash
# Makes sure a `prometheus` server binary is on PATH, for the autoscaler's integration tests
# (tests/autoscaler/test_autoscaler_prometheus.py starts its own on 127.0.0.1).
#   scripts/prometheus.sh          # installs Debian's `prometheus` package when missing
# The package's postinst tries to start a service; without systemd that fails harmlessly
# and the binary stays. Needs root (CI runs as root) or passwordless sudo; otherwise it
# says what to run and fails (the tests then skip, or fail under CI=true).
set -euo pipefail

if command -v prometheus >/dev/null 2>&1; then
  echo "prometheus already installed: $(prometheus --version 2>&1 | head -n1)"
  exit 0
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "prometheus is not installed and this is not root (no passwordless sudo):" >&2
    echo "  apt-get install -y --no-install-recommends prometheus" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# A failing service start must not fail the install; the binary is what we need.
$SUDO apt-get install -y -q --no-install-recommends prometheus || true
if ! command -v prometheus >/dev/null 2>&1; then
  echo "apt-get install prometheus did not put a prometheus binary on PATH" >&2
  exit 1
fi
echo "installed: $(prometheus --version 2>&1 | head -n1)"
