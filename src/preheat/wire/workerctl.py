"""The gRPC control client of a worker: put it in a role (active, standby, draining).

Workers start as ``standby`` and only an ``active`` worker takes traffic, so whoever owns
the pool (the operator for pods, ``preheat up`` for local processes) tells each worker its
role with ``preheat.v1.WorkerControl`` (``Promote`` for active, ``Demote`` for standby,
``Drain`` for draining) on the worker's control port, with the pool's control token as
``authorization: Bearer <token>`` metadata. :func:`set_role` converts its errors once:

- unreachable, timed out, or still loading/warming when asked to become active
  -> :class:`WorkerUnavailableError` (retry later);
- ``FAILED_PRECONDITION`` (an illegal transition, e.g. promoting a draining worker) and other
  refusals a retry cannot fix -> :class:`WorkerRefused`.

Only the generated proto modules and grpc: neither the operator nor ``preheat up`` imports
the worker. The operator wraps :class:`WorkerUnavailableError` in a kopf ``TemporaryError``
(:mod:`preheat.operator.workers`).
"""

from __future__ import annotations

import grpc

from preheat.proto.preheat.v1 import worker_pb2, worker_pb2_grpc
from preheat.wire.controltls import TLSFiles, channel_credentials
from preheat.wire.tokens import auth_metadata

_STATES = worker_pb2.LifecycleState
_LOADING = frozenset({_STATES.LIFECYCLE_STATE_LOADING, _STATES.LIFECYCLE_STATE_WARMING})
_TEMPORARY = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.ABORTED,
    }
)
ROLE_RPC = {"active": "Promote", "standby": "Demote", "draining": "Drain"}
_REQUESTS = {
    "Promote": worker_pb2.PromoteRequest,
    "Demote": worker_pb2.DemoteRequest,
    "Drain": worker_pb2.DrainRequest,
}


class WorkerUnavailableError(Exception):
    """The worker cannot take the role now (unreachable, timed out, still loading): retry."""


class WorkerRefused(Exception):
    """The worker refused the transition (FAILED_PRECONDITION or similar): do not retry."""


def state_name(state: int) -> str:
    """``LIFECYCLE_STATE_ACTIVE`` -> ``active``."""
    return str(_STATES.Name(state)).removeprefix("LIFECYCLE_STATE_").lower()


def _channel(address: str, tls: TLSFiles | None, server_name: str) -> grpc.aio.Channel:
    if tls is None:
        return grpc.aio.insecure_channel(address)
    options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
    return grpc.aio.secure_channel(address, channel_credentials(tls), options=options)


async def set_role(
    address: str,
    role: str,
    *,
    timeout_s: float,
    token: str,
    tls: TLSFiles | None = None,
    server_name: str = "",
) -> None:
    """Make the worker whose control port is ``address`` (``host:port``) take ``role``:
    active | standby | draining, authenticating with the control ``token``.

    Idempotent (the worker ignores a transition to the state it is in). Returns once the
    worker is in the role (``Drain`` returns once it is draining, not stopped). A wrong
    token is UNAUTHENTICATED: :class:`WorkerRefused`. ``tls``: mutual TLS to a worker
    started with ``--control-tls-*``, checking its certificate under ``server_name``.
    """
    try:
        rpc = ROLE_RPC[role]
    except KeyError:
        raise ValueError(f"unknown role {role!r}; one of {sorted(ROLE_RPC)}") from None
    what = f"{rpc} {address}"
    try:
        async with _channel(address, tls, server_name) as channel:
            stub = worker_pb2_grpc.WorkerControlStub(channel)
            status = await getattr(stub, rpc)(
                _REQUESTS[rpc](), timeout=timeout_s, metadata=auth_metadata(token)
            )
    except grpc.aio.AioRpcError as e:
        message = f"{what}: {e.code().name}: {e.details() or ''}"
        if e.code() in _TEMPORARY:
            raise WorkerUnavailableError(message) from e
        raise WorkerRefused(message) from e
    except (OSError, TimeoutError) as e:
        raise WorkerUnavailableError(f"{what}: {type(e).__name__}: {e}") from e
    if role == "active" and status.state in _LOADING:
        raise WorkerUnavailableError(
            f"{what}: worker is still {state_name(status.state)}; it becomes active when warm"
        )


async def status(address: str, *, timeout_s: float, token: str = "") -> worker_pb2.WorkerStatus:
    """The worker's ``Status`` (lifecycle state, load); raises WorkerUnavailableError.

    ``Status`` is served on the data port without a token and on the control port with one.
    """
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = worker_pb2_grpc.WorkerControlStub(channel)
            answer: worker_pb2.WorkerStatus = await stub.Status(
                worker_pb2.StatusRequest(), timeout=timeout_s, metadata=auth_metadata(token)
            )
            return answer
    except grpc.aio.AioRpcError as e:
        raise WorkerUnavailableError(f"Status {address}: {e.code().name}") from e
    except (OSError, TimeoutError) as e:
        raise WorkerUnavailableError(f"Status {address}: {type(e).__name__}: {e}") from e


__all__ = [
    "ROLE_RPC",
    "WorkerRefused",
    "WorkerUnavailableError",
    "auth_metadata",
    "set_role",
    "state_name",
    "status",
]
