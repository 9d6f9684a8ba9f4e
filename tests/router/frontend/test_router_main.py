"""``preheat router`` flags and config: every problem at once; the example config loads."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from preheat.router.app import RouterConfig
from preheat.router.endpoints import StaticDiscovery
from preheat.router.main import (
    add_arguments,
    build_config,
    build_discovery,
    load_config_file,
    serve,
)

EXAMPLE = Path(__file__).parents[3] / "router" / "example-routing.yaml"


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(["--discovery", "static:x.yaml", *argv])


def test_example_config_loads() -> None:
    sched, slo = load_config_file(EXAMPLE.read_text())
    assert sched.policy == "preheat"
    assert slo == {"interactive": 1000.0, "standard": 5000.0}


def test_flags_build_a_config() -> None:
    cfg = build_config(
        _args("--routing-config", str(EXAMPLE), "--policy", "round-robin", "--coalesce-tokens", "8")
    )
    assert cfg.scheduler.policy == "round-robin"
    assert cfg.coalesce.max_tokens == 8
    assert cfg.slo_deadlines_ms["interactive"] == 1000.0


def test_every_problem_reported_at_once(tmp_path: Path) -> None:
    bad = tmp_path / "r.yaml"
    bad.write_text("policy: nope\nsloClasses: {fast: -1}\n")
    with pytest.raises(ValueError, match="policy") as ei:
        build_config(
            _args("--routing-config", str(bad), "--tokenizer", "bpe", "--coalesce-tokens", "0")
        )
    msg = str(ei.value)
    for needle in ("sloClasses.fast", "--tokenizer", "coalesce tokens"):
        assert needle in msg


def test_a_nan_or_infinite_interval_is_refused_with_the_others() -> None:
    # NaN passed the `< 0` checks and the router ran holding requests for NaN seconds
    with pytest.raises(ValueError, match=r"^--queue-timeout-s") as ei:
        build_config(
            _args(
                *("--queue-timeout-s", "nan", "--drain-grace-s", "inf"),
                *("--refresh-interval-s", "nan", "--first-token-timeout-s", "-1"),
            )
        )
    assert str(ei.value) == (
        "--queue-timeout-s must be >= 0 and finite, got nan; "
        "--drain-grace-s must be >= 0 and finite, got inf; "
        "--refresh-interval-s must be > 0 and finite, got nan; "
        "--first-token-timeout-s must be >= 0 and finite, got -1.0"
    )


def test_discovery_spec() -> None:
    assert build_discovery("static:eps.yaml") is not None
    with pytest.raises(ValueError, match="static:FILE"):
        build_discovery("dns:foo")


def test_kubernetes_discovery_spec() -> None:
    from preheat.router.endpoints import KubernetesDiscovery

    source = build_discovery("kubernetes:serving/preheat.dev/pool=llama")
    assert isinstance(source, KubernetesDiscovery)
    assert (source.namespace, source.label_selector) == ("serving", "preheat.dev/pool=llama")
    with pytest.raises(ValueError, match="needs both parts"):
        build_discovery("kubernetes:serving")
    with pytest.raises(ValueError, match="must be static:FILE or kubernetes"):
        build_discovery("consul:x")


def test_the_workers_cache_token_comes_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PREHEAT_CACHE_TOKEN", raising=False)
    assert build_config(_args()).worker_cache_token == ""
    monkeypatch.setenv("PREHEAT_CACHE_TOKEN", "from-env")
    assert build_config(_args()).worker_cache_token == "from-env"
    f = tmp_path / "cache-token"
    f.write_text("from-file\n")
    cfg = build_config(_args("--worker-cache-token-file", str(f)))
    assert cfg.worker_cache_token == "from-file"
    assert "from-file" not in repr(cfg)
    f.write_text("")
    with pytest.raises(ValueError, match=r"--worker-cache-token-file: token file .* is empty"):
        build_config(_args("--worker-cache-token-file", str(f)))


async def test_a_tokenizer_that_cannot_load_stops_the_router_before_it_listens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # loaded at start (off the loop), not by the first request: a bad path is the
    # operator's error, said once at start, not a 400 on every request
    missing = tmp_path / "no-such-tokenizer"
    config = RouterConfig(tokenizer=f"hf:{missing}")
    assert await serve(StaticDiscovery([]), config) == 2
    out, err = capsys.readouterr()
    assert f"cannot load the tokenizer: --tokenizer hf:{missing}: no such file" in err
    assert "router_ready" not in out  # nothing was bound
