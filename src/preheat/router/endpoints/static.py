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
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from preheat.process import yamlfile
from preheat.router.endpoints.discovery import DiscoveredEndpoint

T = TypeVar("T")

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


class WatchedFile(Generic[T]):
    """A YAML/JSON file, re-read when its modification time, size or inode changes
    (checked every ``poll_interval_s``) and parsed by ``parse(data, origin)``.

    :meth:`changes` yields the value at start (raising :class:`StaticDiscoveryError` when
    the file cannot be read or parsed: nothing good to keep) and again each time it changes
    to another value; later, a missing or bad version is logged and kept in
    :attr:`last_error` and the last good value stays. ``what`` names the items in messages
    ("endpoints", "pools"). The one watcher of the endpoints and the pools files.
    """

    def __init__(
        self,
        path: Path,
        parse: Callable[[Any, str], T],
        *,
        poll_interval_s: float,
        what: str,
        count: Callable[[T], int] = len,  # type: ignore[assignment]
    ) -> None:
        self.path = path
        self.parse = parse
        self.poll_interval_s = poll_interval_s
        self.what = what
        self.count = count
        self.current: T | None = None
        self.last_error = ""

    async def _load(self) -> tuple[tuple[int, int, int], T]:
        try:
            sig, text = await asyncio.to_thread(read_file, self.path)
        except OSError as e:
            raise StaticDiscoveryError(f"{self.path}: cannot read: {e}") from None
        return sig, self.parse(decode(self.path, text), str(self.path))

    async def changes(self) -> AsyncIterator[T]:
        sig, current = await self._load()  # raises at start: nothing good to keep
        self.current = current
        yield current
        while True:
            await asyncio.sleep(self.poll_interval_s)
            now_sig = await asyncio.to_thread(file_signature, self.path)
            if now_sig is None or now_sig == sig:
                if now_sig is None and not self.last_error:
                    self.last_error = f"{self.path}: file is missing; keeping the last good set"
                    log.warning(f"{self.what} file missing", extra={"path": str(self.path)})
                continue
            try:
                sig, value = await self._load()
            except StaticDiscoveryError as e:
                sig = now_sig  # do not re-report the same bad version every poll
                self.last_error = (
                    f"{e}; keeping the last good set ({self.count(current)} {self.what})"
                )
                log.error("bad %s file: %s", self.what, self.last_error)
                continue
            self.last_error = ""
            if value != current:
                self.current = current = value
                yield value


def decode(path: Path, text: str) -> Any:
    """A file's text as YAML (JSON when it is ``*.json``)."""
    try:
        return json.loads(text) if path.suffix == ".json" else yamlfile.load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise StaticDiscoveryError(f"{path}: not valid YAML/JSON: {e}") from None


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
        self._file: WatchedFile[tuple[DiscoveredEndpoint, ...]] | None = None
        if isinstance(source, (str, os.PathLike)):
            self.path = Path(source)
            self._file = WatchedFile(
                self.path,
                lambda data, origin: parse_endpoints(data, origin=origin),
                poll_interval_s=poll_interval_s,
                what="endpoints",
            )
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

    @property
    def last_error(self) -> str:
        """The file's last problem ("" when it was read well; always "" for a literal set)."""
        return self._file.last_error if self._file is not None else ""

    async def changes(self) -> AsyncIterator[tuple[DiscoveredEndpoint, ...]]:
        if self._file is None:
            while True:
                self._changed.clear()
                yield self._current
                await self._changed.wait()
        async for eps in self._file.changes():
            self._current = eps
            yield eps
