"""``preheat operator`` and ``preheat release-pools`` with no cluster to talk to: one line
saying so and exit status 2 (a kubernetes_asyncio traceback before, which named a missing
kubeconfig "Invalid kube-config file. Expected key current-context")."""

from __future__ import annotations

from pathlib import Path

import pytest

from preheat.cli import main


@pytest.fixture(autouse=True)
def _outside_a_pod(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config


@pytest.mark.parametrize("command", [["operator", "--standalone"], ["release-pools"]])
def test_the_commands_exit_2_with_the_reason(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, "--kubeconfig", "/nonexistent", "--log-format", "json"]) == 2
    said = capsys.readouterr()
    text = said.out + said.err
    assert '"event":"no_cluster"' in text.replace(" ", "")
    assert "--kubeconfig /nonexistent: no such file" in text
    assert "Traceback" not in text
