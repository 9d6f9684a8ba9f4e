"""`preheat bench router` runs every part end to end at tiny sizes (behaviour, not speed)."""

import json
import re
import subprocess
import sys
from pathlib import Path


def _tiny_mooncake(path: Path) -> None:
    """Ten requests, 1 req/s: three conversations whose turns share leading blocks."""
    rows = []
    for i in range(10):
        conv = i % 3
        n_blocks = 1 + i // 3
        ids = [0, 100 + conv] + [1000 * conv + k for k in range(n_blocks)]
        n_in = 512 * (len(ids) - 1) + 100
        rows.append({"timestamp": 1000 * i, "input_length": n_in, "output_length": 20,
                     "hash_ids": ids})  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _section(text: str, name: str) -> list[str]:
    return text.split(f"<!-- bench:{name} -->")[1].split(f"<!-- /bench:{name} -->")[0].splitlines()


def test_bench_router_all_parts_tiny(tmp_path: Path):
    trace = tmp_path / "trace.jsonl"
    _tiny_mooncake(trace)
    out = tmp_path / "benchmarks.md"
    proc = subprocess.run(
        [
            sys.executable, "-m", "preheat.cli", "bench", "router",
            "--requests", "4", "--rounds", "2", "--repeat", "2", "--concurrency", "1,2",
            "--max-tokens", "4",
            "--streams", "2", "--stream-tokens", "16", "--throughput-s", "0.5",
            "--coalesce", "1:0,8:5",
            "--pick-s", "0.5", "--pick-concurrency", "2", "--endpoints", "4",
            "--inprocess-s", "0.02",
            "--policies", "preheat,round-robin", "--workers", "2", "--trace", str(trace),
            "--trace-start-s", "0", "--trace-duration-s", "10", "--rate-scale", "5",
            "--token-scale", "1", "--gpu-blocks", "1024",
            "--max-output-tokens", "4", "--policy-time-scale", "0.1",
            "--openai-requests", "4", "--openai-coalesce", "1:0,8:5",
            "--pool-counts", "1,3", "--pools-requests", "4", "--pools-idle-s", "0.5",
            "--tracing-requests", "4", "--tracing-loops", "50",
            "--write", str(out),
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    text = out.read_text()
    sections = ("router-overhead", "router-throughput", "router-pick", "router-policies",
                "router-openai", "router-pools", "router-tracing")  # fmt: skip
    for section in sections:
        assert f"<!-- bench:{section} -->" in text
    assert "Failed requests: 0." in text
    assert "Failed streams: 0." in text
    overhead = _section(text, "router-overhead")
    rows = [
        [c.strip() for c in line.split("|")[1:-1]]
        for line in overhead
        if line.startswith(("| 1 |", "| 2 |"))
    ]
    proxy = [cells for cells in rows if len(cells) == 14]
    lookaside = [cells for cells in rows if len(cells) == 15]
    assert len(proxy) == 2, rows
    assert len(lookaside) == 2, rows
    for cells in proxy:
        assert cells[1] == "8"  # 4 requests a level on each of the 2 clusters, pooled
        assert float(cells[4]) > 0  # p50 TTFT through the router
    for cells in lookaside:  # the three lookaside paths measured
        assert float(cells[3]) > 0  # p50 TTFT through Pick, then direct
        assert float(cells[7]) > 0  # p50 TTFT through PickStream, then direct
        assert float(cells[11]) > 0  # p50 TTFT with the embedded router, then direct
        assert cells[14] == "-"  # no router process CPU to count for it
    assert any("the embedded router adds" in line for line in overhead)
    by_run = [
        line for line in overhead if line.startswith("Added p50 at concurrency 1, run by run")
    ]
    assert len(by_run) == 1
    runs = re.findall(
        r"(null hop|proxy|Pick|PickStream|embedded) ([+-]\d+\.\d+), ([+-]\d+\.\d+)[;.]", by_run[0]
    )
    assert [r[0] for r in runs] == ["null hop", "proxy", "Pick", "PickStream", "embedded"]
    pick = _section(text, "router-pick")
    streams = [line for line in pick if "| PickStream (one kept stream) |" in line]
    assert len(streams) == 3  # the null hop, then the router with text and with ids
    assert all(line.rstrip().endswith("| 0 |") for line in streams)  # no errors
    throughput = _section(text, "router-throughput")
    assert len([line for line in throughput if line.startswith(("| 1 |", "| 0.001 |"))]) == 4
    policy_rows = {line.split("|")[1].strip(): line for line in _section(text, "router-policies")
                   if line.startswith(("| preheat |", "| round-robin |"))}  # fmt: skip
    assert set(policy_rows) == {"preheat", "round-robin"}
    for row in policy_rows.values():
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert cells[1] == "10"  # every trace request was sent
        assert cells[2] == "0"  # none failed
    assert "| schedule() | 4 | preheat |" in text
    openai = _section(text, "router-openai")
    latency = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[1:-1]]
               for line in openai if line.startswith(("| gRPC proxy | 4 |",
                                                      "| OpenAI passthrough | 4 |"))}  # fmt: skip
    assert set(latency) == {"gRPC proxy", "OpenAI passthrough"}, openai
    for cells in latency.values():
        assert float(cells[2]) > 0  # p50 direct
        assert float(cells[3]) > 0  # p50 via the router
    streams = [[c.strip() for c in line.split("|")[1:-1]] for line in openai
               if line.startswith(("| gRPC proxy | off", "| gRPC proxy | 8 tokens",
                                   "| OpenAI passthrough | off", "| OpenAI passthrough | 8 tokens"))
               ]  # fmt: skip
    assert len(streams) == 4, openai
    for cells in streams:
        assert int(cells[2]) > 0  # streams done
        assert cells[-1] == "0"  # none failed
    assert any(line.endswith("Failed requests: 0.") for line in openai)
    pools = _section(text, "router-pools")
    pool_rows = [[c.strip() for c in line.split("|")[1:-1]] for line in pools
                 if line.startswith(("| 1 |", "| 3 |"))]  # fmt: skip
    # the single-pool file, then the several-pool form with 1 and 3 pools
    assert [(r[0], r[1]) for r in pool_rows] == [
        ("1", "list + `--pool`/`--model`"), ("1", "`pools:`"), ("3", "`pools:`")
    ], pools  # fmt: skip
    for cells in pool_rows:
        assert cells[2] == "4"  # every request through each router
        assert float(cells[3]) > 0  # p50 TTFT via the router
        assert float(cells[7]) >= 0  # idle router CPU %
        assert int(cells[8].replace(",", "")) > 0  # Pick decisions
        assert cells[12] == "0"  # no Pick error, every pool's model found
    assert any(line.endswith("Failed requests: 0.") for line in pools)
    tracing = _section(text, "router-tracing")
    tracing_rows = [[c.strip() for c in line.split("|")[1:-1]] for line in tracing
                    if line.startswith("| 1 |")]  # fmt: skip
    assert len(tracing_rows) == 1, tracing
    assert tracing_rows[0][1] == "4"  # requests per path
    assert float(tracing_rows[0][2]) > 0  # p50 direct
    spans = [line for line in tracing if line.startswith("Spans the receiver got")]
    assert spans
    assert int(re.findall(r"got from the two traced routers: (\d+)", spans[0])[0]) > 0
    assert any("us per request at 1% sampling" in line for line in tracing)
    assert any(line.endswith("Failed requests: 0.") for line in tracing)
