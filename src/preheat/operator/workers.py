"""The operator's thin gRPC adapter to workers: put a worker in the role its pod should have.

Workers start as ``standby`` and only an ``active`` worker takes traffic, so a role label
alone changes nothing: :func:`set_role` calls ``preheat.v1.WorkerControl`` (``Promote``
for active, ``Demote`` for standby, ``Drain`` for draining) and converts its errors once:

- unreachable, timed out, or still loading/warming when asked to become active
  -> :class:`WorkerUnavailable` (a ``kopf.TemporaryError`` with a delay: the level-based
  reconcile retries);
- ``FAILED_PRECONDITION`` (an illegal transition, e.g. promoting a draining worker) and other
  refusals a retry cannot fix -> :class:`WorkerRefused` (the caller logs it and posts an
  Event; the operator does not crash).

Only the generated proto modules and grpc: the operator never imports the worker.
"""

from __future__ import annotations

import grpc
import kopf

from preheat.proto.preheat.v1 import worker_pb2, worker_pb2_grpc

RETRY_DELAY_S = 2.0
"""How long kopf waits before a reconcile that found a worker unavailable is retried."""

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


class WorkerUnavailable(kopf.TemporaryError):
    """The worker cannot take the role now (unreachable, timed out, still loading): retry."""


class WorkerRefused(Exception):
    """The worker refused the transition (FAILED_PRECONDITION or similar): do not retry."""


def state_name(state: int) -> str:
    """``LIFECYCLE_STATE_ACTIVE`` -> ``active``."""
    return str(_STATES.Name(state)).removeprefix("LIFECYCLE_STATE_").lower()


async def set_role(address: str, role: str, *, timeout_s: float) -> None:
    """Make the worker at ``address`` (``host:port``) take ``role``: active | standby | draining.

    Idempotent (the worker ignores a transition to the state it is in). Returns once the
    worker is in the role (``Drain`` returns once it is draining, not stopped).
    """
    try:
        rpc = ROLE_RPC[role]
    except KeyError:
        raise ValueError(f"unknown role {role!r}; one of {sorted(ROLE_RPC)}") from None
    what = f"{rpc} {address}"
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = worker_pb2_grpc.WorkerControlStub(channel)
            status = await getattr(stub, rpc)(_REQUESTS[rpc](), timeout=timeout_s)
    except grpc.aio.AioRpcError as e:
        message = f"{what}: {e.code().name}: {e.details() or ''}"
        if e.code() in _TEMPORARY:
            raise WorkerUnavailable(message, delay=RETRY_DELAY_S) from e
        raise WorkerRefused(message) from e
    except (OSError, TimeoutError) as e:
        raise WorkerUnavailable(f"{what}: {type(e).__name__}: {e}", delay=RETRY_DELAY_S) from e
    if role == "active" and status.state in _LOADING:
        raise WorkerUnavailable(
            f"{what}: worker is still {state_name(status.state)}; it becomes active when warm",
            delay=RETRY_DELAY_S,
        )


__all__ = ["RETRY_DELAY_S", "WorkerRefused", "WorkerUnavailable", "set_role", "state_name"]
