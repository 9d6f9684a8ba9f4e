"""Shared fixtures for the vLLM tests: the tiny offline model, built once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from preheat.engine.tinymodel import build_tiny_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))
