"""Optional mutual TLS on the control port: a worker given a certificate, a key and a CA
talks only to callers whose certificate that CA signed (and who send the token).

Certificates are made per test with the ``openssl`` command line (a throwaway CA, a worker
certificate for the name ``preheat-worker``, a client certificate, and a second CA whose
client the worker must refuse).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from workerkit import CONTROL_TOKEN, make_sim_engine, running_worker

from preheat.core.lifecycle import LifecycleState
from preheat.wire import workerctl
from preheat.wire.controltls import TLSFileError, TLSFiles, tls_files

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
SERVER_NAME = "preheat-worker"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
        "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN={name}", cwd=d,
    )  # fmt: skip


def _leaf(d: Path, name: str, ca: str, san: str) -> None:
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
        f"{name}.csr", "-subj", f"/CN={name}", cwd=d,
    )  # fmt: skip
    (d / f"{name}.ext").write_text(f"subjectAltName=DNS:{san}\n")
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
        cwd=d,
    )  # fmt: skip


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    _ca(d, "ca")
    _ca(d, "other-ca")
    _leaf(d, "worker", "ca", SERVER_NAME)
    _leaf(d, "client", "ca", "client")
    _leaf(d, "stranger", "other-ca", "stranger")
    return d


def _files(d: Path, name: str) -> TLSFiles:
    return TLSFiles(cert=str(d / f"{name}.crt"), key=str(d / f"{name}.key"), ca=str(d / "ca.crt"))


async def test_a_client_with_a_certificate_from_the_ca_and_the_token_promotes(
    certs: Path,
) -> None:
    engine = make_sim_engine()
    async with running_worker(
        engine, start_as=LifecycleState.STANDBY, control_tls=_files(certs, "worker")
    ) as c:
        assert c.server.ports is not None
        address = f"127.0.0.1:{c.server.ports.control}"
        client = _files(certs, "client")
        await workerctl.set_role(
            address,
            "active",
            timeout_s=10,
            token=CONTROL_TOKEN,
            tls=client,
            server_name=SERVER_NAME,
        )
        assert c.server.state is LifecycleState.ACTIVE
        # the certificate is not enough: the token is still needed
        with pytest.raises(workerctl.WorkerRefused, match="UNAUTHENTICATED"):
            await workerctl.set_role(
                address, "standby", timeout_s=10, token="wrong", tls=client, server_name=SERVER_NAME
            )
        assert c.server.state is LifecycleState.ACTIVE


async def test_plain_and_foreign_clients_cannot_reach_a_tls_control_port(certs: Path) -> None:
    engine = make_sim_engine()
    async with running_worker(
        engine, start_as=LifecycleState.STANDBY, control_tls=_files(certs, "worker")
    ) as c:
        assert c.server.ports is not None
        address = f"127.0.0.1:{c.server.ports.control}"
        with pytest.raises(workerctl.WorkerUnavailableError):  # no TLS: no handshake
            await workerctl.set_role(address, "active", timeout_s=3, token=CONTROL_TOKEN)
        stranger = TLSFiles(
            cert=str(certs / "stranger.crt"),
            key=str(certs / "stranger.key"),
            ca=str(certs / "ca.crt"),  # trusts the worker, but its own CA is another
        )
        with pytest.raises(workerctl.WorkerUnavailableError):
            await workerctl.set_role(
                address,
                "active",
                timeout_s=3,
                token=CONTROL_TOKEN,
                tls=stranger,
                server_name=SERVER_NAME,
            )
        assert c.server.state is LifecycleState.STANDBY


def test_the_three_files_come_together_and_unreadable_ones_are_named(tmp_path: Path) -> None:
    assert tls_files("", "", "") is None
    with pytest.raises(TLSFileError, match="missing: ca, key"):
        tls_files("c.pem", "", "")
    files = tls_files(str(tmp_path / "c.pem"), str(tmp_path / "k.pem"), str(tmp_path / "a.pem"))
    assert files is not None
    with pytest.raises(TLSFileError, match=r"cannot read the certificate .*c\.pem"):
        files.read()
