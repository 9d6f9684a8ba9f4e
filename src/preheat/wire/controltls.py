"""Optional mutual TLS on a worker's control port (on top of the control token).

A worker given ``--control-tls-cert``, ``--control-tls-key`` and ``--control-tls-ca``
serves its control port over TLS and accepts only clients whose certificate the CA
signed; a caller (:func:`preheat.wire.workerctl.set_role` with ``tls=``) presents its own
certificate and checks the worker's against the same CA, under ``server_name`` (the name
in the worker's certificate: callers dial pod IPs, not names). The control token is still
required. Neither the operator nor ``preheat up`` sets this up yet (worker/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc


class TLSFileError(Exception):
    """A certificate, key or CA file that cannot be read; the message names the file."""


@dataclass(frozen=True)
class TLSFiles:
    """PEM files: this side's certificate chain and key, and the CA that signs the peer."""

    cert: str
    key: str
    ca: str

    def read(self) -> tuple[bytes, bytes, bytes]:
        out: list[bytes] = []
        for what, path in (("certificate", self.cert), ("key", self.key), ("CA", self.ca)):
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError as e:
                raise TLSFileError(f"cannot read the {what} {path}: {type(e).__name__}") from None
            if not data.strip():
                raise TLSFileError(f"the {what} file {path} is empty")
            out.append(data)
        return out[0], out[1], out[2]


def tls_files(cert: str, key: str, ca: str) -> TLSFiles | None:
    """The three flags as :class:`TLSFiles`: None when none is given; all or none."""
    given = [n for n, v in (("cert", cert), ("key", key), ("ca", ca)) if v]
    if not given:
        return None
    if len(given) != 3:
        missing = sorted({"cert", "key", "ca"} - set(given))
        raise TLSFileError(f"mTLS needs a cert, a key and a CA; missing: {', '.join(missing)}")
    return TLSFiles(cert=cert, key=key, ca=ca)


def server_credentials(files: TLSFiles) -> grpc.ServerCredentials:
    cert, key, ca = files.read()
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=True
    )


def channel_credentials(files: TLSFiles) -> grpc.ChannelCredentials:
    cert, key, ca = files.read()
    return grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=key, certificate_chain=cert
    )


__all__ = ["TLSFileError", "TLSFiles", "channel_credentials", "server_credentials", "tls_files"]
