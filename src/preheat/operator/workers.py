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

The gRPC client itself is :mod:`preheat.wire.workerctl` (shared with ``preheat up``); this module
only turns its retryable errors into kopf's. The operator never imports the worker.
"""

from __future__ import annotations

import kopf

from preheat.wire import workerctl
from preheat.wire.workerctl import ROLE_RPC, WorkerRefused, state_name

RETRY_DELAY_S = 2.0
"""How long kopf waits before a reconcile that found a worker unavailable is retried."""


class WorkerUnavailable(kopf.TemporaryError):
    """The worker cannot take the role now (unreachable, timed out, still loading): retry."""


async def set_role(address: str, role: str, *, timeout_s: float, token: str) -> None:
    """Make the worker whose control port is ``address`` (``host:port``) take ``role``:
    active | standby | draining, with the pool's control ``token``.

    :func:`preheat.wire.workerctl.set_role`, with its retryable errors as kopf temporary errors.
    """
    try:
        await workerctl.set_role(address, role, timeout_s=timeout_s, token=token)
    except workerctl.WorkerUnavailableError as e:
        raise WorkerUnavailable(str(e), delay=RETRY_DELAY_S) from e


__all__ = [
    "RETRY_DELAY_S",
    "ROLE_RPC",
    "WorkerRefused",
    "WorkerUnavailable",
    "set_role",
    "state_name",
]
