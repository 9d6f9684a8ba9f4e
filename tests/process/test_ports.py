"""ReservedPort (``preheat.process.ports``): a free port that nobody else can take until released,
and that the server it is for binds, in this process or in a child."""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import shutil
import socket
import subprocess
import sys

import grpc
import pytest
from aiohttp import ClientSession, web

from preheat.process.ports import ReservedPort

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="ports are held on Linux only"
)


def _plain_bind(port: int) -> int:
    """errno of a bind without SO_REUSEADDR (what a program that picks ports does); 0: it
    got the port."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            return e.errno or -1
    return 0


def test_a_held_port_is_nobody_elses_until_released() -> None:
    reserved = ReservedPort()
    assert reserved.held
    assert reserved.port > 0
    assert _plain_bind(reserved.port) == errno.EADDRINUSE
    reserved.release()
    reserved.release()  # idempotent
    assert not reserved.held
    assert _plain_bind(reserved.port) == 0


def test_nothing_answers_on_a_held_port() -> None:
    with ReservedPort() as reserved, pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", reserved.port), timeout=5).close()


async def test_aiohttp_and_grpc_servers_bind_a_held_port() -> None:
    with ReservedPort() as http_port, ReservedPort() as grpc_port:

        async def here(_: web.Request) -> web.Response:
            return web.Response(text="here")

        app = web.Application()
        app.router.add_get("/", here)
        runner = web.AppRunner(app)
        await runner.setup()
        server = grpc.aio.server()
        try:
            await web.TCPSite(runner, "127.0.0.1", http_port.port).start()
            assert server.add_insecure_port(grpc_port.address) == grpc_port.port
            await server.start()
            async with ClientSession() as http, http.get(f"http://{http_port.address}/") as resp:
                assert await resp.text() == "here"
            assert _plain_bind(http_port.port) == errno.EADDRINUSE
        finally:
            await server.stop(None)
            await runner.cleanup()


async def test_a_child_process_binds_a_held_port() -> None:
    child_code = (
        "import socket, sys\n"
        "s = socket.socket()\n"
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('127.0.0.1', int(sys.argv[1])))\n"
        "s.listen()\n"
        "print('listening', flush=True)\n"
        "c, _ = s.accept()\n"
        "c.sendall(b'hello')\n"
        "c.close()\n"
    )
    with ReservedPort() as reserved:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", child_code, str(reserved.port), stdout=asyncio.subprocess.PIPE
        )
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert line == b"listening\n"
            reader, writer = await asyncio.open_connection("127.0.0.1", reserved.port)
            assert await reader.read() == b"hello"
            writer.close()
            assert await asyncio.wait_for(proc.wait(), 60) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


# In a network namespace of its own whose ephemeral range is two ports, one held: binds of
# port 0 (with and without SO_REUSEADDR) and outgoing connections exhaust the range and
# never get the held port.
_EXHAUST = """
import errno, json, socket, subprocess
from preheat.process.ports import ReservedPort

subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as f:
    f.write("40000 40001")
held = ReservedPort()
listener = socket.create_server(("127.0.0.1", 39999))
got, keep = [], []
for how in ("bind", "bind-reuseaddr", "bind", "bind-reuseaddr", "connect", "connect"):
    s = socket.socket()
    keep.append(s)
    try:
        if how == "connect":
            s.connect(("127.0.0.1", 39999))
        else:
            if how == "bind-reuseaddr":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
        got.append(s.getsockname()[1])
    except OSError as e:
        got.append(errno.errorcode[e.errno])
print(json.dumps({"held": held.port, "got": got}))
"""


def test_port_zero_binds_and_connections_never_get_a_held_port() -> None:
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    why = "no unshare or ip command"
    if unshare is not None and ip is not None:
        argv = [unshare, "--net", "--fork", sys.executable, "-c", _EXHAUST]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        why = "" if proc.returncode == 0 else f"unshare --net failed: {proc.stderr[-300:]}"
    if why:
        why = f"no network namespace of its own here ({why.strip()})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why}; CI=true, so this fails instead of skipping")
        pytest.skip(why)
    out = json.loads(proc.stdout)
    held, got = out["held"], out["got"]
    assert held in (40000, 40001)
    assert held not in got
    other = 40001 if held == 40000 else 40000
    # the one other port goes to the first bind; every later one finds the range exhausted
    assert got[0] == other
    assert got[1:] == ["EADDRINUSE"] * 3 + ["EADDRNOTAVAIL"] * 2


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        ("worker", "--grpc-port"),
        ("worker", "--http-port"),
        ("worker", "--control-port"),
        ("router", "--grpc-port"),
        ("router", "--http-port"),
        ("operator", "--health-port"),
        ("up", "--router-grpc-port"),
        ("up", "--router-http-port"),
    ],
)
@pytest.mark.parametrize("value", ["70000", "-1", "80x"])
def test_a_port_flag_out_of_range_is_refused_by_name(
    command: str, flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # gRPC took --grpc-port 70000 without a word and the server ran; --http-port -1 ended in
    # a socket traceback. The command line is parsed, not run: a flag let through fails
    # here instead of starting a server
    from preheat.cli import build_parser

    parser, _ = build_parser(command)
    with pytest.raises(SystemExit) as e:
        parser.parse_args([command, flag, value])
    assert e.value.code == 2
    assert f"argument {flag}: '{value}' is not a TCP port (0-65535)" in capsys.readouterr().err


def test_the_port_types_take_the_whole_range() -> None:
    from preheat.process.ports import port_number, port_or_off

    assert [port_number(v) for v in ("0", "1", "65535")] == [0, 1, 65535]
    assert port_or_off("-1") == -1
    with pytest.raises(argparse.ArgumentTypeError, match=r"'-1' is not a TCP port \(0-65535\)"):
        port_number("-1")
