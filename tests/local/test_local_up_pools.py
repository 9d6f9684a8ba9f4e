"""`preheat up -f chat.yaml -f code.yaml`: two pools of sim workers behind one router, end to
end through the official `openai` client: each model is answered by its own pool's worker
(streamed too), `/v1/models` lists both, a model nobody serves gets 404 `model_not_found`;
each pool keeps its own run record; SIGINT drains both pools and the router and leaves no
process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

MODELS = {"chat": "sim-chat", "code": "sim-code"}


def _pool(name: str, model: str) -> str:
    return f"""\
apiVersion: preheat.dev/v1alpha1
kind: InferencePool
metadata: {{name: {name}}}
spec:
  model: {{name: {model}}}
  engine:
    kind: sim
    args: {{loadTime: 100ms, warmupTime: 100ms}}
  replicas: {{min: 1, max: 1, warmStandby: 0}}
"""


def _json(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    except (OSError, ValueError):
        return {}


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    tmp = tmp_path_factory.mktemp("pools")
    files = []
    for name, model in MODELS.items():
        path = tmp / f"{name}.yaml"
        path.write_text(_pool(name, model))
        files += ["-f", str(path)]
    run = tmp / "run"
    log = (tmp / "up.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "preheat.cli", "up", *files, "--out", str(run), "--no-ui"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not _json(run / "up.json").get("ready"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"not ready: {(tmp / 'up.log').read_text()[-3000:]}")
            time.sleep(0.2)
        yield proc, run
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        log.close()


def _client(run: Path) -> openai.OpenAI:
    http = _json(run / "up.json")["router"]["http"]
    return openai.OpenAI(base_url=f"{http}/v1", api_key="unused", timeout=20.0, max_retries=0)


def test_each_model_is_served_by_its_own_pool(up: tuple[subprocess.Popen[bytes], Path]) -> None:
    _, run = up
    client = _client(run)
    assert sorted(m.id for m in client.models.list()) == sorted(MODELS.values())
    for pool, model in MODELS.items():
        answer = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=4
        )
        assert answer.model == model
        assert answer.choices[0].message.content
        worker = (answer.model_extra or {})["preheat"]["worker_id"]
        assert worker.startswith(f"{pool}-w-"), worker
        assert worker in _json(run / pool / "up.json")["workers"]
        chunks = list(
            client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": "stream"}],
                max_tokens=4,
                stream=True,
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text
        assert all(c.model == model for c in chunks)


def test_a_model_nobody_serves_is_404_model_not_found(
    up: tuple[subprocess.Popen[bytes], Path],
) -> None:
    _, run = up
    with pytest.raises(openai.NotFoundError) as err:
        _client(run).chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    assert err.value.status_code == 404
    assert err.value.code == "model_not_found"


def test_a_killed_router_is_restarted_and_serves_both_pools_again(
    up: tuple[subprocess.Popen[bytes], Path],
) -> None:
    _, run = up
    before = _json(run / "up.json")["router"]
    os.kill(before["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while _json(run / "up.json")["router"].get("restarts", 0) < 1:
        assert time.monotonic() < deadline, _json(run / "up.json")
        time.sleep(0.2)
    after = _json(run / "up.json")["router"]
    assert after["pid"] != before["pid"]
    assert after["http"] == before["http"]  # the same ports, kept reserved for it
    client = _client(run)
    deadline = time.monotonic() + 30
    while True:  # until the new router has read the pools and their workers
        try:
            served = {
                m: client.chat.completions.create(
                    model=m, messages=[{"role": "user", "content": "again"}], max_tokens=2
                ).model
                for m in MODELS.values()
            }
            break
        except (openai.APIConnectionError, openai.APIStatusError):
            assert time.monotonic() < deadline, "the restarted router did not serve both pools"
            time.sleep(0.3)
    assert served == {m: m for m in MODELS.values()}


def test_sigint_drains_every_pool_and_the_router(up: tuple[subprocess.Popen[bytes], Path]) -> None:
    proc, run = up
    state = _json(run / "up.json")
    pids = [state["router"]["pid"]]
    for pool in MODELS:
        pids += _json(run / pool / "up.json")["pids"]
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0
    assert _json(run / "up.json")["stopped"] is True
    for pool in MODELS:
        kinds = [json.loads(line)["kind"] for line in (run / pool / "events.jsonl").open()]
        assert {"promote", "shutdown"} <= set(kinds), kinds
        assert _json(run / pool / "up.json")["stopped"] is True
    assert [p for p in pids if not _gone(p)] == []
