"""What a discovery source reports: the pool's endpoints, as a full set on every change."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

ROLE_ACTIVE = "active"


@dataclass(frozen=True)
class DiscoveredEndpoint:
    """One worker as discovery sees it (before the store has asked it anything).

    ``ready``/``role`` come from the platform (the pod's Ready condition and its
    ``preheat.dev/role`` label); the store routes to an endpoint only when it is ready, its role
    is ``active`` *and* its own ``Status`` says active. ``metrics_url``, when set, is scraped
    for the engine's Prometheus metrics.
    """

    address: str  # host:port of the worker's gRPC server
    id: str = ""  # "" -> the address
    zone: str = ""
    region: str = ""
    ready: bool = True
    role: str = ROLE_ACTIVE
    metrics_url: str = ""

    @property
    def key(self) -> str:
        """The endpoint id the store uses: ``id``, or the address when there is none."""
        return self.id or self.address

    @property
    def routable(self) -> bool:
        return self.ready and self.role == ROLE_ACTIVE


class DiscoverySource(Protocol):
    def changes(self) -> AsyncIterator[tuple[DiscoveredEndpoint, ...]]:
        """Yields the full current set at once, then again whenever it changes. Runs until
        cancelled; an error it cannot recover from is raised (and ends the store's run)."""
        ...
