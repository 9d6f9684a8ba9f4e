"""``preheat router --discovery static:FILE``: the file's form picks one pool or many; a
pool's routing keys overlay the router's file, the flags override both."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from preheat.router.endpoints import StaticDiscovery
from preheat.router.main import add_arguments, build_config, build_sources
from preheat.router.pools import PoolSpec, StaticPools, pool_config

EP = {"address": "127.0.0.1:50051", "id": "w-1"}


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(["--discovery", "static:x.yaml", *argv])


def test_a_multi_pool_file_gives_a_pool_source(tmp_path: Path) -> None:
    f = tmp_path / "pools.yaml"
    f.write_text(yaml.safe_dump({"pools": [{"pool": "a", "model": "x", "endpoints": [EP]}]}))
    discovery, pools = build_sources(f"static:{f}", "p", "m")
    assert discovery is None
    assert isinstance(pools, StaticPools)
    f.write_text(yaml.safe_dump([EP]))
    discovery, pools = build_sources(f"static:{f}", "p", "m")
    assert isinstance(discovery, StaticDiscovery)
    assert pools is None
    with pytest.raises(ValueError, match="cannot read"):
        build_sources(f"static:{tmp_path / 'missing.yaml'}")
    f.write_text("pools: [\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        build_sources(f"static:{f}")


def test_a_bad_static_file_is_refused_before_the_router_listens(tmp_path: Path) -> None:
    # checked only by the watcher, a bad address or a duplicate id ended the started router
    # with "unhandled errors in a TaskGroup" and a traceback in its log
    f = tmp_path / "eps.yaml"
    f.write_text(
        yaml.safe_dump(
            [
                {"address": "127.0.0.1:70000", "id": "w1"},
                {"address": "127.0.0.1:9", "id": "w1"},
            ]
        )
    )
    with pytest.raises(ValueError, match=r"^--discovery: ") as e:
        build_sources(f"static:{f}")
    assert str(e.value) == (
        f"--discovery: {f}: 0: address '127.0.0.1:70000' is not host:port; "
        "1: duplicate endpoint id 'w1'"
    )
    f.write_text(yaml.safe_dump({"pools": [{"pool": "a", "model": "x", "endpoints": ["h"]}]}))
    with pytest.raises(ValueError, match=r"^--discovery: .*pools\[0\]\.endpoints: "):
        build_sources(f"static:{f}")


def test_a_pools_routing_overlays_the_routers_file_and_flags_win(tmp_path: Path) -> None:
    r = tmp_path / "routing.yaml"
    r.write_text(
        "hotspotMarginMs: 50\nstalenessSeconds: 9\nsloClasses: {fast: 100}\n"
        "defaultTtftTargetMs: 700\n"
    )
    base = build_config(_args("--routing-config", str(r), "--max-in-flight", "12"))
    spec = PoolSpec(
        name="chat",
        model="m",
        routing={"hotspotMarginMs": 5, "sessionTTL": "5m", "sloClasses": {"slow": 9000}},
    )
    cfg = pool_config(base, spec)
    assert cfg.pool == "chat"
    assert cfg.model == "m"
    assert cfg.scheduler.hotspot_margin_ms == 5  # the pool's
    assert cfg.scheduler.staleness_s == 9  # the router's file
    assert cfg.scheduler.pool == "chat"
    assert cfg.slo_deadlines_ms == {"slow": 9000}  # a key is replaced whole
    assert cfg.admission.default_ttft_target_ms == 700
    assert cfg.admission.max_in_flight == 12  # the flag
    with pytest.raises(ValueError, match="hotspotMarginMs"):
        pool_config(base, PoolSpec(name="bad", model="m", routing={"hotspotMarginMs": -1}))
