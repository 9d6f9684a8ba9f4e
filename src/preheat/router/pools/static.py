"""The multi-pool static discovery file (``--discovery static:FILE``), re-read on change::

    pools:
      - pool: chat            # required, unique (with its namespace)
        namespace: default    # optional
        model: tiny-chat      # required; model names and aliases unique across pools
        aliases: [chat]       # optional: other names requests may give for the model
        routing: {hotspotMarginMs: 100, sloClasses: {interactive: 500}}  # optional
        endpoints:            # the entries of the single-pool file
          - {address: "127.0.0.1:50051", id: w-1, metrics_url: "http://127.0.0.1:8081/metrics"}

``routing`` takes the routing config file's keys (``router/example-routing.yaml``, plus
``sloClasses``, ``defaultTtftTargetMs``, ``maxInFlight``) and an InferencePool's
``spec.routing`` keys (``hotspotMarginMs``; ``sessionTTL``, not used by the router); they
overlay the router's ``--routing-config`` for that pool. The single-pool forms (a list of
endpoints, or a mapping with ``endpoints``) are read as one pool, named by ``--pool`` and
``--model``. Every problem of a file is reported at once (:class:`StaticDiscoveryError`);
a bad edit later is logged and kept in :attr:`StaticPools.last_error`, and the last good
set stays.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

from preheat.router.endpoints.static import (
    StaticDiscoveryError,
    WatchedFile,
    parse_endpoints,
)
from preheat.router.pools.spec import PoolSpec
from preheat.router.settings import parse_routing

log = logging.getLogger(__name__)

POOLS_KEY = "pools"
_POOL_KEYS = ("pool", "namespace", "model", "aliases", "routing", "endpoints")


def is_multi_pool(data: Any) -> bool:
    """Whether decoded file content is the multi-pool form (a mapping with ``pools``)."""
    return isinstance(data, Mapping) and POOLS_KEY in data


def _str_list(v: Any) -> list[str] | None:
    if isinstance(v, list) and all(isinstance(x, str) and x for x in v):
        return list(v)
    return None


def parse_pools(data: Any, *, origin: str, default: PoolSpec) -> tuple[PoolSpec, ...]:
    """The pools of decoded file content; a single-pool form is ``default`` with the
    file's endpoints. Raises :class:`StaticDiscoveryError` naming every problem."""
    if not is_multi_pool(data):
        return (
            PoolSpec(
                name=default.name,
                model=default.model,
                namespace=default.namespace,
                aliases=default.aliases,
                routing=default.routing,
                endpoints=parse_endpoints(data, origin=origin),
            ),
        )
    assert isinstance(data, Mapping)
    problems: list[str] = []
    extra = sorted(str(k) for k in data if k != POOLS_KEY)
    if extra:
        problems.append(f"unknown top-level key(s) {', '.join(extra)} (known: {POOLS_KEY})")
    items = data[POOLS_KEY]
    if items is None:
        items = []
    if not isinstance(items, list):
        raise StaticDiscoveryError(f"{origin}: {POOLS_KEY}: expected a list of pools")
    out: list[PoolSpec] = []
    keys: set[str] = set()
    names: dict[str, str] = {}
    for i, item in enumerate(items):
        where = f"{POOLS_KEY}[{i}]"
        if not isinstance(item, Mapping):
            problems.append(f"{where}: expected a mapping with pool, model and endpoints")
            continue
        unknown = sorted(str(k) for k in item if k not in _POOL_KEYS)
        if unknown:
            problems.append(
                f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(_POOL_KEYS)})"
            )
        pool, model, ns = item.get("pool"), item.get("model"), item.get("namespace", "")
        for key, v, required in (
            ("pool", pool, True),
            ("model", model, True),
            ("namespace", ns, False),
        ):
            if not isinstance(v, str) or (required and not v):
                problems.append(
                    f"{where}.{key}: expected a{' non-empty' if required else ''} string"
                )
        aliases = _str_list(item.get("aliases", []))
        if aliases is None:
            problems.append(f"{where}.aliases: expected a list of non-empty strings")
        routing = item.get("routing", {}) or {}
        if not isinstance(routing, Mapping):
            problems.append(f"{where}.routing: expected a mapping of routing config keys")
            routing = {}
        else:
            try:
                parse_routing(routing)
            except ValueError as e:
                problems.append(f"{where}.routing: {e}")
        try:
            endpoints = parse_endpoints(item.get("endpoints"), origin=f"{where}.endpoints")
        except StaticDiscoveryError as e:
            problems.append(str(e))
            endpoints = ()
        if not (isinstance(pool, str) and pool and isinstance(model, str) and model):
            continue
        spec = PoolSpec(
            name=pool,
            model=model,
            namespace=ns if isinstance(ns, str) else "",
            aliases=tuple(aliases or ()),
            routing=dict(routing),
            endpoints=endpoints,
        )
        if spec.key in keys:
            problems.append(f"{where}: pool {spec.key!r} is listed twice")
        keys.add(spec.key)
        for n in spec.names:
            if n in names and names[n] != spec.key:
                problems.append(f"{where}: model name {n!r} is already pool {names[n]}'s")
            names[n] = spec.key
        out.append(spec)
    if problems:
        raise StaticDiscoveryError(f"{origin}: " + "; ".join(problems))
    return tuple(out)


class StaticPools:
    """Pools from a YAML/JSON file, re-read when its modification time, size or inode
    changes (checked every ``poll_interval_s``). ``default``: the pool a single-pool form
    stands for (its name, model and routing)."""

    def __init__(self, path: Path, default: PoolSpec, *, poll_interval_s: float = 1.0) -> None:
        self.path = path
        self.default = default
        self.poll_interval_s = poll_interval_s
        self._file = WatchedFile(
            path,
            lambda data, origin: parse_pools(data, origin=origin, default=default),
            poll_interval_s=poll_interval_s,
            what="pools",
        )

    @property
    def current(self) -> tuple[PoolSpec, ...]:
        return self._file.current or ()

    @property
    def last_error(self) -> str:
        return self._file.last_error

    async def changes(self) -> AsyncIterator[tuple[PoolSpec, ...]]:
        async for pools in self._file.changes():
            yield pools


class LiteralPools:
    """Pools given in code (tests, benchmarks, embedding): :meth:`set_pools` replaces them."""

    def __init__(self, pools: Iterable[PoolSpec] = ()) -> None:
        self.current = tuple(pools)
        self._changed = asyncio.Event()

    def set_pools(self, pools: Iterable[PoolSpec]) -> None:
        self.current = tuple(pools)
        self._changed.set()

    async def changes(self) -> AsyncIterator[tuple[PoolSpec, ...]]:
        while True:
            self._changed.clear()
            yield self.current
            await self._changed.wait()
