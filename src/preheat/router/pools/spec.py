"""What the router knows of one pool, as a discovery source reports it.

A :class:`PoolSpec` is one pool's name, the model it serves (and the aliases it also
answers to), its routing settings (the raw camelCase mapping of the routing config file:
the router's ``--routing-config`` keys, overlaid on the router's own file) and its
endpoints. Multi-pool sources yield the full set of pools on every change.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from preheat.router.endpoints.discovery import DiscoveredEndpoint


@dataclass(frozen=True)
class PoolSpec:
    name: str
    model: str = ""  # "" (single-pool use only): any model, the workers' word
    namespace: str = ""
    aliases: tuple[str, ...] = ()
    # routing config keys (camelCase, the --routing-config file's shape) for this pool
    routing: Mapping[str, Any] = field(default_factory=dict)
    endpoints: tuple[DiscoveredEndpoint, ...] = ()

    @property
    def key(self) -> str:
        """Unique among the router's pools: ``namespace/name`` (``name`` without one)."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def names(self) -> tuple[str, ...]:
        """Every model name a request may give for this pool: the model, then aliases."""
        return tuple(n for n in (self.model, *self.aliases) if n)

    def settings_differ(self, other: PoolSpec) -> bool:
        """True when anything but the endpoints changed."""
        return (self.model, self.aliases, dict(self.routing)) != (
            other.model,
            other.aliases,
            dict(other.routing),
        )


class PoolSource(Protocol):
    def changes(self) -> AsyncIterator[tuple[PoolSpec, ...]]:
        """Yields the full current set of pools at once, then again whenever it changes
        (a pool, its settings or its endpoints). Runs until cancelled; an error it cannot
        recover from is raised (and ends the router's discovery)."""
        ...
