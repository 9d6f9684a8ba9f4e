"""StaticDiscovery: literal lists, files, changes, and malformed files."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from endpointkit import eventually

from preheat.router.endpoints import DiscoveredEndpoint, StaticDiscovery, StaticDiscoveryError
from preheat.router.endpoints.static import parse_endpoints


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    st = path.stat()  # make the change visible even within one mtime tick
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


class _Follower:
    """Collects what ``changes()`` yields, in a background task."""

    def __init__(self, source: StaticDiscovery) -> None:
        self.seen: list[tuple[DiscoveredEndpoint, ...]] = []
        self.error: BaseException | None = None
        self._source = source
        self._new = asyncio.Event()

    async def run(self) -> None:
        try:
            async for eps in self._source.changes():
                self.seen.append(eps)
                self._new.set()
        except Exception as e:
            self.error = e
            self._new.set()

    async def next(self, count: int, timeout_s: float = 5.0) -> tuple[DiscoveredEndpoint, ...]:
        async with asyncio.timeout(timeout_s):
            while len(self.seen) < count and self.error is None:
                self._new.clear()
                await self._new.wait()
        if self.error is not None:
            raise self.error
        return self.seen[count - 1]


@contextlib.asynccontextmanager
async def follow(source: StaticDiscovery) -> AsyncIterator[_Follower]:
    f = _Follower(source)
    task = asyncio.create_task(f.run())
    try:
        yield f
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_literal_list_and_set_endpoints() -> None:
    source = StaticDiscovery(["127.0.0.1:1", DiscoveredEndpoint("127.0.0.1:2", id="b")])
    async with follow(source) as f:
        first = await f.next(1)
        assert [e.key for e in first] == ["127.0.0.1:1", "b"]
        source.set_endpoints(["127.0.0.1:3"])
        assert [e.key for e in await f.next(2)] == ["127.0.0.1:3"]


def test_literal_duplicates_rejected() -> None:
    with pytest.raises(StaticDiscoveryError, match="duplicate"):
        StaticDiscovery(["127.0.0.1:1", "127.0.0.1:1"])


async def test_file_changes_are_picked_up(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yaml"
    _write(path, "- {address: '127.0.0.1:1', id: a, zone: z1, region: r1}\n")
    source = StaticDiscovery(path, poll_interval_s=0.02)
    async with follow(source) as f:
        assert await f.next(1) == (DiscoveredEndpoint("127.0.0.1:1", "a", "z1", "r1"),)
        _write(
            path,
            "endpoints:\n  - {address: '127.0.0.1:1', id: a}\n"
            "  - {address: '127.0.0.1:2', id: b, metrics_url: 'http://127.0.0.1:9/metrics'}\n",
        )
        second = await f.next(2)
        assert [e.key for e in second] == ["a", "b"]
        assert second[1].metrics_url == "http://127.0.0.1:9/metrics"


async def test_json_file(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.json"
    _write(path, '[{"address": "127.0.0.1:5", "ready": false, "role": "standby"}]')
    async with follow(StaticDiscovery(path)) as f:
        (e,) = await f.next(1)
        assert (e.key, e.ready, e.role, e.routable) == ("127.0.0.1:5", False, "standby", False)


async def test_malformed_change_keeps_last_good_set(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yaml"
    _write(path, "- address: 127.0.0.1:1\n")
    source = StaticDiscovery(path, poll_interval_s=0.02)
    async with follow(source) as f:
        good = await f.next(1)
        _write(path, "- address: 127.0.0.1:1\n  colour: red\n")
        await eventually(lambda: bool(source.last_error))
        assert str(path) in source.last_error
        assert "colour" in source.last_error
        assert "keeping the last good set" in source.last_error
        assert source.current == good
        assert len(f.seen) == 1
        _write(path, "- address: 127.0.0.1:7\n")  # fixed: picked up, error cleared
        assert [e.key for e in await f.next(2)] == ["127.0.0.1:7"]
        assert source.last_error == ""


async def test_malformed_file_at_start_raises_naming_file(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yaml"
    _write(path, "- {address: [1, 2]\n")
    with pytest.raises(StaticDiscoveryError, match=r"endpoints\.yaml: not valid YAML"):
        async for _ in StaticDiscovery(path).changes():
            pass


async def test_missing_file_at_start_raises(tmp_path: Path) -> None:
    with pytest.raises(StaticDiscoveryError, match="cannot read"):
        async for _ in StaticDiscovery(tmp_path / "nope.yaml").changes():
            pass


@pytest.mark.parametrize(
    ("data", "problems"),
    [
        ([{"id": "a"}], ["0.address: Field required"]),
        ([{"address": "nohost"}], ["address 'nohost' is not host:port"]),
        ([{"address": "h:99999"}], ["is not host:port"]),
        ("just text", ["expected a list"]),
        (
            [{"address": "h:1", "id": "x"}, {"address": "h:2", "id": "x"}],
            ["1: duplicate endpoint id 'x'"],
        ),
        (
            [{"address": "h:1", "zone": 3}, {"address": "h:2", "extra": 1}],
            ["0.zone", "1.extra"],  # every problem at once
        ),
    ],
)
def test_parse_endpoints_errors(data: object, problems: list[str]) -> None:
    with pytest.raises(StaticDiscoveryError) as err:
        parse_endpoints(data, origin="f.yaml")
    assert str(err.value).startswith("f.yaml: ")
    for p in problems:
        assert p in str(err.value)


def test_parse_endpoints_empty_file_is_empty_set() -> None:
    assert parse_endpoints(None) == ()
