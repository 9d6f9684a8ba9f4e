"""Discovery from a literal list or a YAML/JSON file (``preheat up``, tests, benchmarks).

The file is a list of endpoints, or a mapping with an ``endpoints`` list::

    - {address: "127.0.0.1:50051", id: w-1, zone: a, region: eu}
    - address: 127.0.0.1:50052
      metrics_url: http://127.0.0.1:8081/metrics

Keys: ``address`` (required), ``id``, ``zone``, ``region``, ``ready``, ``role``,
``metrics_url``; any other key is an error. The file is re-read when its modification time,
size or inode changes (checked every ``poll_interval_s``). A file that cannot be read or
parsed at start raises :class:`StaticDiscoveryError`; later, a bad version is logged and
recorded in :attr:`StaticDiscovery.last_error` and the last good set is kept.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from preheat.router.endpoints.discovery import DiscoveredEndpoint

log = logging.getLogger(__name__)


class StaticDiscoveryError(ValueError):
    """An endpoints file is unreadable or malformed; the message names the file and why."""


class _EndpointSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    address: str
    id: str = ""
    zone: str = ""
    region: str = ""
    ready: bool = True
    role: str = "active"
    metrics_url: str = ""


_SPECS = TypeAdapter(list[_EndpointSpec])


def _check_address(address: str) -> str | None:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return f"address {address!r} is not host:port"
    return None


def parse_endpoints(data: Any, *, origin: str = "endpoints") -> tuple[DiscoveredEndpoint, ...]:
    """Validates decoded YAML/JSON into endpoints, reporting every problem at once."""
    if isinstance(data, dict) and set(data) == {"endpoints"}:
        data = data["endpoints"]
    if data is None:
        data = []
    try:
        specs = _SPECS.validate_python(data)
    except ValidationError as e:
        problems = [
            f"{'.'.join(str(p) for p in err['loc']) or '<top>'}: {err['msg']}" for err in e.errors()
        ]
        raise StaticDiscoveryError(
            f"{origin}: expected a list of endpoints ({{address, id?, zone?, region?}}): "
            + "; ".join(problems)
        ) from None
    problems = []
    seen: set[str] = set()
    out: list[DiscoveredEndpoint] = []
    for i, s in enumerate(specs):
        if (bad := _check_address(s.address)) is not None:
            problems.append(f"{i}: {bad}")
        ep = DiscoveredEndpoint(
            address=s.address,
            id=s.id,
            zone=s.zone,
            region=s.region,
            ready=s.ready,
            role=s.role,
            metrics_url=s.metrics_url,
        )
        if ep.key in seen:
            problems.append(f"{i}: duplicate endpoint id {ep.key!r}")
        seen.add(ep.key)
        out.append(ep)
    if problems:
        raise StaticDiscoveryError(f"{origin}: " + "; ".join(problems))
    return tuple(out)


def _as_endpoint(item: DiscoveredEndpoint | str) -> DiscoveredEndpoint:
    return item if isinstance(item, DiscoveredEndpoint) else DiscoveredEndpoint(address=item)


def read_file(path: Path) -> tuple[tuple[int, int, int], str]:
    st = path.stat()
    return (st.st_mtime_ns, st.st_size, st.st_ino), path.read_text(encoding="utf-8")


def file_signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class StaticDiscovery:
    """Endpoints from ``source``: a path (str or PathLike) to a YAML/JSON file, watched for
    changes, or a literal sequence of :class:`DiscoveredEndpoint` or ``"host:port"`` strings
    (which :meth:`set_endpoints` replaces)."""

    def __init__(
        self,
        source: str | os.PathLike[str] | Sequence[DiscoveredEndpoint | str],
        *,
        poll_interval_s: float = 1.0,
    ) -> None:
        self.poll_interval_s = poll_interval_s
        self.path: Path | None = None
        self._current: tuple[DiscoveredEndpoint, ...] = ()
        self._changed = asyncio.Event()
        self.last_error: str = ""
        if isinstance(source, (str, os.PathLike)):
            self.path = Path(source)
        else:
            self._current = self._checked(tuple(_as_endpoint(x) for x in source))

    @staticmethod
    def _checked(eps: tuple[DiscoveredEndpoint, ...]) -> tuple[DiscoveredEndpoint, ...]:
        keys = [e.key for e in eps]
        if len(set(keys)) != len(keys):
            raise StaticDiscoveryError(f"duplicate endpoint ids in {keys}")
        return eps

    @property
    def current(self) -> tuple[DiscoveredEndpoint, ...]:
        return self._current

    def set_endpoints(self, endpoints: Iterable[DiscoveredEndpoint | str]) -> None:
        """Replaces a literal set (not for a file source: edit the file)."""
        if self.path is not None:
            raise TypeError("set_endpoints on a file-backed StaticDiscovery; edit the file")
        self._current = self._checked(tuple(_as_endpoint(x) for x in endpoints))
        self._changed.set()

    def _parse(self, text: str) -> tuple[DiscoveredEndpoint, ...]:
        assert self.path is not None
        origin = str(self.path)
        try:
            data = json.loads(text) if self.path.suffix == ".json" else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as e:
            raise StaticDiscoveryError(f"{origin}: not valid YAML/JSON: {e}") from None
        return parse_endpoints(data, origin=origin)

    async def _load(self) -> tuple[tuple[int, int, int], tuple[DiscoveredEndpoint, ...]]:
        assert self.path is not None
        try:
            sig, text = await asyncio.to_thread(read_file, self.path)
        except OSError as e:
            raise StaticDiscoveryError(f"{self.path}: cannot read: {e}") from None
        return sig, self._parse(text)

    async def changes(self) -> AsyncIterator[tuple[DiscoveredEndpoint, ...]]:
        if self.path is None:
            while True:
                self._changed.clear()
                yield self._current
                await self._changed.wait()
        sig, self._current = await self._load()  # raises at start: nothing good to keep
        yield self._current
        while True:
            await asyncio.sleep(self.poll_interval_s)
            now_sig = await asyncio.to_thread(file_signature, self.path)
            if now_sig is None or now_sig == sig:
                if now_sig is None and not self.last_error:
                    self.last_error = f"{self.path}: file is missing; keeping the last good set"
                    log.warning("endpoints file missing", extra={"path": str(self.path)})
                continue
            try:
                sig, eps = await self._load()
            except StaticDiscoveryError as e:
                sig = now_sig  # do not re-report the same bad version every poll
                self.last_error = f"{e}; keeping the last good set ({len(self._current)})"
                log.error("bad endpoints file: %s", self.last_error)
                continue
            self.last_error = ""
            if eps != self._current:
                self._current = eps
                yield eps
