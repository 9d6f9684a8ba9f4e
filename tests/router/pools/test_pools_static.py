"""The multi-pool static discovery file: parsing (every problem at once) and re-reading."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from preheat.router.endpoints import DiscoveredEndpoint, StaticDiscoveryError
from preheat.router.pools import PoolSpec, StaticPools, is_multi_pool, parse_pools

DEFAULT = PoolSpec(name="p", model="m")
EP = {"address": "127.0.0.1:50051", "id": "w-1", "metrics_url": "http://127.0.0.1:8081/metrics"}


def test_the_multi_pool_form() -> None:
    data = yaml.safe_load(
        """
pools:
  - pool: chat
    namespace: default
    model: tiny-chat
    aliases: [chat]
    routing: {hotspotMarginMs: 100, sessionTTL: 5m, sloClasses: {interactive: 500}}
    endpoints:
      - {address: "127.0.0.1:50051", id: w-1, metrics_url: "http://127.0.0.1:8081/metrics"}
  - pool: code
    model: tiny-code
    endpoints: []
"""
    )
    assert is_multi_pool(data)
    chat, code = parse_pools(data, origin="f", default=DEFAULT)
    assert chat.key == "default/chat"
    assert chat.model == "tiny-chat"
    assert chat.aliases == ("chat",)
    assert chat.routing["hotspotMarginMs"] == 100
    assert chat.endpoints == (
        DiscoveredEndpoint(
            address="127.0.0.1:50051", id="w-1", metrics_url="http://127.0.0.1:8081/metrics"
        ),
    )
    assert code.key == "code"
    assert code.endpoints == ()
    assert code.routing == {}


@pytest.mark.parametrize("data", [[EP], {"endpoints": [EP]}, None])
def test_single_pool_forms_are_the_default_pool(data: Any) -> None:
    assert not is_multi_pool(data)
    (pool,) = parse_pools(data, origin="f", default=DEFAULT)
    assert (pool.name, pool.model) == ("p", "m")
    assert len(pool.endpoints) == (0 if data is None else 1)


def test_every_problem_is_reported_at_once() -> None:
    data = {
        "pools": [
            {"pool": "a", "model": "x", "endpoints": [EP], "replicas": 3},
            {"pool": "", "model": 7, "endpoints": []},
            {"pool": "b", "model": "x", "endpoints": [{"address": "nope"}]},
            {"pool": "a", "model": "y", "aliases": "z", "routing": {"policy": "best"}},
        ],
        "extra": 1,
    }
    with pytest.raises(StaticDiscoveryError) as e:
        parse_pools(data, origin="pools.yaml", default=DEFAULT)
    msg = str(e.value)
    for part in (
        "pools.yaml",
        "extra",
        "pools[0]: unknown key(s) replicas",
        "pools[1].pool",
        "pools[1].model",
        "is not host:port",
        "model name 'x' is already pool a's",
        "pools[3].aliases",
        "pools[3].routing",
        "unknown policy",
        "pool 'a' is listed twice",
    ):
        assert part in msg, part


async def test_a_changed_file_is_read_again_and_a_bad_edit_keeps_the_last_good(
    tmp_path: Path,
) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump({"pools": [{"pool": "a", "model": "x", "endpoints": [EP]}]}))
    source = StaticPools(path, DEFAULT, poll_interval_s=0.02)
    changes = source.changes()
    (first,) = await anext(changes)
    assert first.model == "x"
    path.write_text("pools: [{pool: a}]\n")  # bad: no model
    nxt = asyncio.ensure_future(anext(changes))
    async with asyncio.timeout(5):
        for _ in itertools.count():
            if source.last_error:
                break
            await asyncio.sleep(0.02)
    assert "pools[0].model" in source.last_error
    assert not nxt.done()
    path.write_text(yaml.safe_dump({"pools": [{"pool": "a", "model": "y", "endpoints": []}]}))
    (second,) = await asyncio.wait_for(nxt, 5)
    assert second.model == "y"
    assert source.last_error == ""
    await changes.aclose()


async def test_a_file_that_cannot_be_read_at_start_fails(tmp_path: Path) -> None:
    source = StaticPools(tmp_path / "missing.yaml", DEFAULT)
    with pytest.raises(StaticDiscoveryError, match="cannot read"):
        await anext(source.changes())
