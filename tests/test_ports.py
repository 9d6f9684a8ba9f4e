"""ReservedPort (``preheat.ports``): a free port that nobody else can take until released,
and that the server it is for binds, in this process or in a child."""

from __future__ import annotations

import asyncio
import errno
import socket
import sys

import grpc
import pytest
from aiohttp import ClientSession, web

from preheat.ports import ReservedPort

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
