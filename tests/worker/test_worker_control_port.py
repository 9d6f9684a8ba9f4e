"""WorkerControl's state changes live on the control port, behind the control token.

The data port (what clients and routers reach) serves Status and WatchCache only; Promote,
Demote and Drain there are UNIMPLEMENTED. On the control port every call needs
``authorization: Bearer <token>``: none or a wrong one is UNAUTHENTICATED, and the worker's
state does not change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from workerkit import CONTROL_TOKEN, Authed, Client, gen_request, make_sim_engine, running_worker

from preheat.core.lifecycle import LifecycleState
from preheat.proto.preheat.v1 import worker_pb2, worker_pb2_grpc
from preheat.wire.tokens import TokenError, read_token

REQUESTS = {
    "Promote": worker_pb2.PromoteRequest,
    "Demote": worker_pb2.DemoteRequest,
    "Drain": worker_pb2.DrainRequest,
}


async def _code(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await call  # type: ignore[misc]
    return exc.value.code()


@pytest.mark.parametrize("rpc", sorted(REQUESTS))
async def test_state_changes_are_not_served_on_the_data_port(rpc: str) -> None:
    async with running_worker(make_sim_engine(), start_as=LifecycleState.STANDBY) as c:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await getattr(c.data_control, rpc)(REQUESTS[rpc]())
        assert exc.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "control port" in (exc.value.details() or "")
        # even with the right token: the data port never changes the state
        authed = Authed(c.data_control, CONTROL_TOKEN)
        assert await _code(getattr(authed, rpc)(REQUESTS[rpc]())) == grpc.StatusCode.UNIMPLEMENTED
        assert c.server.state is LifecycleState.STANDBY
        assert c.server.ports is not None
        assert c.server.ports.control not in (0, c.server.ports.grpc)


def _control_stub(c: Client) -> worker_pb2_grpc.WorkerControlStub:
    assert c.server.ports is not None
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{c.server.ports.control}")
    return worker_pb2_grpc.WorkerControlStub(channel)


@pytest.mark.parametrize("rpc", sorted(REQUESTS))
@pytest.mark.parametrize(
    "metadata",
    [
        (),
        (("authorization", "Bearer wrong-token"),),
        (("authorization", CONTROL_TOKEN),),  # no "Bearer "
        (("authorization", f"Bearer {CONTROL_TOKEN}x"),),
        (("authorization", "Bearer "),),
    ],
    ids=["none", "wrong", "no-scheme", "longer", "empty"],
)
async def test_control_port_refuses_without_the_right_token(
    rpc: str, metadata: tuple[tuple[str, str], ...]
) -> None:
    async with running_worker(make_sim_engine(), start_as=LifecycleState.STANDBY) as c:
        stub = _control_stub(c)
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await getattr(stub, rpc)(REQUESTS[rpc](), metadata=metadata)
        assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert CONTROL_TOKEN not in (exc.value.details() or "")
        assert c.server.state is LifecycleState.STANDBY


async def test_control_port_with_the_token_promotes_demotes_and_drains() -> None:
    async with running_worker(make_sim_engine(), start_as=LifecycleState.STANDBY) as c:
        st = await c.control.Promote(worker_pb2.PromoteRequest())
        assert st.state == worker_pb2.LIFECYCLE_STATE_ACTIVE
        assert (await c.generate(gen_request(max_tokens=2)))[-1].usage.completion_tokens == 2
        st = await c.control.Demote(worker_pb2.DemoteRequest())
        assert st.state == worker_pb2.LIFECYCLE_STATE_STANDBY
        st = await c.control.Drain(worker_pb2.DrainRequest())
        assert st.state in (
            worker_pb2.LIFECYCLE_STATE_DRAINING,
            worker_pb2.LIFECYCLE_STATE_STOPPED,
        )


async def test_status_is_open_on_the_data_port_and_needs_the_token_on_the_control_port() -> None:
    async with running_worker(make_sim_engine()) as c:
        st = await c.data_control.Status(worker_pb2.StatusRequest())
        assert st.state == worker_pb2.LIFECYCLE_STATE_ACTIVE
        assert await _code(_control_stub(c).Status(worker_pb2.StatusRequest())) == (
            grpc.StatusCode.UNAUTHENTICATED
        )
        assert (await c.control.Status(worker_pb2.StatusRequest())).worker_id == "w-test"


async def test_without_a_token_no_control_port_is_opened() -> None:
    async with running_worker(make_sim_engine(), control_token="") as c:
        assert c.server.ports is not None
        assert c.server.ports.control == 0
        code = await _code(c.data_control.Drain(worker_pb2.DrainRequest()))
        assert code == grpc.StatusCode.UNIMPLEMENTED
        assert c.server.state is LifecycleState.ACTIVE


async def _first_event(stub: object, metadata: tuple[tuple[str, str], ...] = ()) -> object:
    call = stub.WatchCache(worker_pb2.WatchCacheRequest(), metadata=metadata)  # type: ignore[attr-defined]
    try:
        return await call.read()
    finally:
        call.cancel()


async def test_watch_cache_on_the_data_port_needs_the_cache_token_when_one_is_set() -> None:
    async with running_worker(make_sim_engine(), cache_token="cache-secret") as c:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await _first_event(c.data_control)
        assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await _first_event(c.data_control, (("authorization", "Bearer guess"),))
        assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
        for token in ("cache-secret", CONTROL_TOKEN):
            ev = await _first_event(c.data_control, (("authorization", f"Bearer {token}"),))
            assert ev.snapshot  # type: ignore[attr-defined]


async def test_watch_cache_on_the_data_port_is_open_without_a_cache_token() -> None:
    async with running_worker(make_sim_engine()) as c:
        ev = await _first_event(c.data_control)
        assert ev.snapshot  # type: ignore[attr-defined]


def test_read_token_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREHEAT_CONTROL_TOKEN", " from-env\n")
    assert read_token("", "PREHEAT_CONTROL_TOKEN") == "from-env"
    f = tmp_path / "token"
    f.write_text("from-file\n")
    assert read_token(str(f), "PREHEAT_CONTROL_TOKEN") == "from-file"
    f.write_text("  \n")
    with pytest.raises(TokenError, match="is empty"):
        read_token(str(f), "PREHEAT_CONTROL_TOKEN")
    with pytest.raises(TokenError, match="cannot read token file"):
        read_token(str(tmp_path / "missing"), "PREHEAT_CONTROL_TOKEN")


def test_the_cli_binds_loopback_by_default_and_opens_the_control_port_with_a_token() -> None:
    """``preheat worker`` as a process: data ports on 127.0.0.1 unless told otherwise, the
    control port (ephemeral here) opened because PREHEAT_CONTROL_TOKEN is set."""
    env = {**os.environ, "PREHEAT_CONTROL_TOKEN": "cli-token"}
    env.pop("PREHEAT_CONTROL_TOKEN_FILE", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "preheat.cli",
            "worker",
            "--grpc-port",
            "0",
            "--http-port",
            "0",
            "--control-port",
            "0",
            "--sim-load-s",
            "0",
            "--sim-warmup-s",
            "0",
            "--log-format",
            "json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stderr is not None
        ready = json.loads(proc.stdout.readline())
        assert ready["control_port"] > 0
        assert ready["control_port"] not in (ready["grpc_port"], ready["http_port"])
        listening = None
        for line in proc.stderr:
            if '"worker_listening"' in line:
                listening = json.loads(line)
                break
        assert listening is not None
        assert listening["host"] == "127.0.0.1"
        assert listening["control_host"] == "127.0.0.1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_tokens_are_not_in_the_configs_repr() -> None:
    from preheat.worker.server import WorkerConfig

    text = repr(WorkerConfig(worker_id="w", control_token="ctl-secret", cache_token="c-secret"))
    assert "ctl-secret" not in text
    assert "c-secret" not in text
