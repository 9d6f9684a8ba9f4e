"""``preheat bench vllm-serve``: vLLM's own serving benchmark client through the router.

vLLM's ``vllm.benchmarks.serve`` (the client behind ``vllm bench serve``) runs against a
router in front of a fixed pool of sim workers on loopback, with its ``prefix_repetition``
dataset (every prompt = one of a few shared prefixes + a random suffix), at each load, for
each routing policy, with fresh workers and a fresh router per run (every run starts cold).
Policies and loads are interleaved inside each round, so the machine's load drifts over
all of them alike; the table gives the median of the rounds.

The client needs vLLM (``--vllm-python``: a Python with the ``vllm`` package; the vLLM CPU
build is enough, the client loads no model) and a local tokenizer folder. The sim workers
count one token per whitespace-separated word, so the benchmark writes a word-level
tokenizer (``tokenizer.json``, ``WordLevel`` model, whitespace split; no download) whose
tokens are words: the client's 512-token prompts are 512 sim tokens, and equal prefixes are
equal blocks for the workers' prefix cache and the router's.

Figures: TTFT, TPOT (time per output token after the first) and end-to-end latency
percentiles as the client computes them; hit rate = the workers' prefix-cache hits /
queries (token counters); requests per worker from the workers' ``vllm:request_success``
counters.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from preheat.bench.router_bench import cluster
from preheat.core.routing.config import DEFAULT_SCORERS
from preheat.report.markdown import write_section

DECODE = "decode-interference"
NO_CLOCK = "noclock"  # preheat@noclock: the step clock off (stepClock: false)

#: the client's entry point (the module has no ``__main__``; ``vllm bench serve`` is the
#: console script, which the CPU build's distribution name breaks: see NOTES)
CLIENT = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "p = FlexibleArgumentParser()\n"
    "add_cli_args(p)\n"
    "main(p.parse_args(sys.argv[1:]))\n"
)
VOCAB = 8000
METRICS = ("ttft", "tpot", "e2el")
COLUMNS = (
    ("p50_ttft_ms", "TTFT p50"),
    ("p95_ttft_ms", "TTFT p95"),
    ("p50_tpot_ms", "TPOT p50"),
    ("p95_tpot_ms", "TPOT p95"),
    ("p50_e2el_ms", "e2e p50"),
    ("p95_e2el_ms", "e2e p95"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--policies",
        default=f"preheat,preheat@{NO_CLOCK},round-robin,least-request",
        help="routing policies; preheat@W: preheat with the decode-interference scorer at "
        f"weight W (preheat@0: without it); preheat@{NO_CLOCK}: preheat with the queue "
        "term's step clock off (half a decode step on average)",
    )
    p.add_argument("--rates", default="5,8", help="request rates (req/s), comma-separated")
    p.add_argument("--rounds", type=int, default=3, help="runs of every policy at every rate")
    p.add_argument("--num-prompts", type=int, default=200)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--prefix-len", type=int, default=256)
    p.add_argument("--suffix-len", type=int, default=256)
    p.add_argument("--num-prefixes", type=int, default=10)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument(
        "--vllm-python",
        default=os.environ.get("PREHEAT_VLLM_PYTHON", "../main/.venv-vllm/bin/python"),
        help="a Python with vllm installed (env PREHEAT_VLLM_PYTHON)",
    )
    p.add_argument(
        "--worker-arg", action="append", default=[], help="extra `preheat worker` argument"
    )
    p.add_argument("--out", type=Path, default=None, help="keep the client's JSON results here")
    p.add_argument("--write", type=Path, default=None, help="update this benchmarks.md")


def write_word_tokenizer(folder: Path, vocab_size: int = VOCAB) -> Path:
    """A Hugging Face tokenizer folder whose tokens are words (``t3``, ``t4``, ...)."""
    folder.mkdir(parents=True, exist_ok=True)
    special = ("<unk>", "<s>", "</s>")
    vocab = {t: i for i, t in enumerate(special)}
    vocab.update({f"t{i:x}": i for i in range(len(special), vocab_size)})
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": t,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, t in enumerate(special)
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<unk>",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "model_max_length": 1 << 20,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def client_args(
    args: argparse.Namespace, base_url: str, tokenizer: Path, rate: float, seed: int, out: Path
) -> list[str]:
    """The vLLM benchmark client's command line (after ``python -c CLIENT``)."""
    return [
        "--backend",
        "openai",
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "prefix_repetition",
        "--prefix-repetition-prefix-len",
        str(args.prefix_len),
        "--prefix-repetition-suffix-len",
        str(args.suffix_len),
        "--prefix-repetition-num-prefixes",
        str(args.num_prefixes),
        "--prefix-repetition-output-len",
        str(args.output_len),
        "--num-prompts",
        str(args.num_prompts),
        "--request-rate",
        f"{rate:g}",
        "--seed",
        str(seed),
        "--percentile-metrics",
        ",".join(METRICS),
        "--metric-percentiles",
        "50,95",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(out.parent),
        "--result-filename",
        out.name,
    ]


@dataclass
class RunResult:
    policy: str
    rate: float
    round: int
    metrics: dict[str, float]
    hit_rate: float
    per_worker: list[int]
    failed: int
    wall_s: float


@dataclass
class Table:
    runs: list[RunResult] = field(default_factory=list)

    def cell(self, policy: str, rate: float) -> list[RunResult]:
        return [r for r in self.runs if r.policy == policy and r.rate == rate]


async def _counters(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    async with session.get(url) as resp:
        text = await resp.text()
    want = ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries", "vllm:request_success")
    got = dict.fromkeys(want, 0.0)
    for fam in text_string_to_metric_families(text):
        if fam.name in got:
            got[fam.name] += sum(s.value for s in fam.samples if not s.name.endswith("_created"))
    return got


async def _one(
    args: argparse.Namespace, policy: str, rate: float, rnd: int, tokenizer: Path, out: Path
) -> RunResult:
    worker_args = [*args.worker_arg]
    router_args = ["--log-level", "WARNING", *_policy_args(policy, out.parent)]
    async with cluster(worker_args, args.workers, router_args) as c:
        urls = [f"{w.http_url}/metrics" for w in c.workers]
        async with aiohttp.ClientSession() as session:
            before = [await _counters(session, u) for u in urls]
            t0 = time.monotonic()
            # the same seed for every policy in a round: the same prompts in the same order
            cmd = [args.vllm_python, "-c", CLIENT]
            cmd += client_args(args, c.router.http_url, tokenizer, rate, 1000 + rnd, out)
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
            )
            text, _ = await proc.communicate()
            wall = time.monotonic() - t0
            if proc.returncode != 0:
                tail = text.decode(errors="replace")[-3000:]
                raise RuntimeError(f"vLLM benchmark client failed ({proc.returncode}):\n{tail}")
            after = [await _counters(session, u) for u in urls]
    data = _read_json(out)
    hits = sum(
        a["vllm:prefix_cache_hits"] - b["vllm:prefix_cache_hits"]
        for a, b in zip(after, before, strict=True)
    )
    queries = sum(
        a["vllm:prefix_cache_queries"] - b["vllm:prefix_cache_queries"]
        for a, b in zip(after, before, strict=True)
    )
    per = [
        round(a["vllm:request_success"] - b["vllm:request_success"])
        for a, b in zip(after, before, strict=True)
    ]
    metrics = {k: float(data[k]) for k, _ in COLUMNS}
    failed = int(data.get("failed", args.num_prompts - int(data.get("completed", 0))))
    r = RunResult(policy, rate, rnd, metrics, hits / queries if queries else 0.0, per, failed, wall)
    print(
        f"  round {rnd} {rate:g} req/s {policy}: "
        + ", ".join(f"{label} {metrics[k]:.1f}" for k, label in COLUMNS)
        + f"; hit {100 * r.hit_rate:.1f}%; per worker {per}; failed {failed}",
        flush=True,
    )
    return r


def _read_json(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:  # small, local: no need for a thread
        data = json.load(f)
    if not isinstance(data, dict):
        raise RuntimeError(f"{path}: expected a JSON object")
    return data


def _label(policy: str) -> str:
    name, _, variant = policy.partition("@")
    if variant == NO_CLOCK:
        return f"{name}, step clock off"
    return f"{name}, {DECODE} weight {variant}" if variant else policy


def _policy_args(policy: str, folder: Path) -> list[str]:
    """``--policy NAME``, or for ``preheat@W`` the preheat policy with the
    ``decode-interference`` scorer at weight W, for ``preheat@noclock`` with the step clock
    off (a routing config file in ``folder``)."""
    name, _, variant = policy.partition("@")
    if not variant:
        return ["--policy", name]
    config: dict[str, Any] = {"policy": name}
    if variant == NO_CLOCK:
        config["stepClock"] = False
    else:
        config["scorers"] = [
            {"name": n, "weight": float(variant) if n == DECODE else w} for n, w in DEFAULT_SCORERS
        ]
    path = folder / f"routing-{name}-{variant}.json"
    path.write_text(json.dumps(config))
    return ["--routing-config", str(path)]


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _command(args: argparse.Namespace) -> str:
    defaults = argparse.ArgumentParser()
    add_arguments(defaults)
    base = vars(defaults.parse_args([]))
    out = "preheat bench vllm-serve"
    for key, value in sorted(vars(args).items()):
        if key in ("write", "out", "bench", "command", "func", "vllm_python"):
            continue
        if key in base and base[key] != value:
            out += f" --{key.replace('_', '-')} {value}"
    return out + " --vllm-python ../main/.venv-vllm/bin/python --write docs/benchmarks.md"


def render(
    args: argparse.Namespace,
    table: Table,
    policies: list[str],
    rates: list[float],
    load_before: float,
    load_after: float,
    started: str,
    wall_s: float,
) -> tuple[str, bool]:
    lines = [
        "## Router: vLLM's serving benchmark, prefix_repetition (decode interference)",
        "",
        f"Command: `{_command(args)}`. Machine: {platform.machine()}, {os.cpu_count()} cores "
        f"(shared with other work: the figures are noisy), Python {platform.python_version()}, "
        f"measured {started} UTC over {wall_s / 60:.0f} minutes; 1-minute load average "
        f"{load_before:.1f} before and {load_after:.1f} after.",
        "",
        f"Client: vLLM's `vllm.benchmarks.serve` (`--backend openai --endpoint /v1/completions"
        f" --dataset-name prefix_repetition --num-prompts {args.num_prompts}`, Poisson "
        f"arrivals at `--request-rate`; {args.num_prefixes} prefixes of {args.prefix_len} "
        f"tokens, suffixes of {args.suffix_len}, {args.output_len} output tokens), run "
        "through the router's OpenAI HTTP front end on loopback. Pool: "
        f"{args.workers} sim workers (calibrated H100, Llama-3-8B, defaults), fresh workers and "
        "router for every run. Each round runs every rate and policy in turn with the same "
        f"prompts (seed 1000 + round); {args.rounds} rounds, **medians** of the rounds below "
        "(every run is printed by the command). TPOT: time per output token after the first; "
        "e2e: the whole request. Hit rate: the workers' prefix-cache hits / queries. "
        "Requests per worker: the most and fewest any worker served (median of the rounds). "
        f"`preheat, {DECODE} weight W`: the preheat policy with that scorer at weight W "
        "(0: without it); `preheat, step clock off`: the preheat policy whose queue term "
        "waits half a decode step on average instead of reading the step's phase from the "
        "streamed tokens (as before the step clock existed), for comparison.",
        "",
    ]
    ok = True
    for rate in rates:
        lines += [
            f"### {rate:g} req/s",
            "",
            "| policy | "
            + " | ".join(f"{label} ms" for _, label in COLUMNS)
            + " | hit rate | requests per worker (max / min) | failed |",
            "|---|" + "---:|" * (len(COLUMNS) + 3),
        ]
        med: dict[str, dict[str, float]] = {}
        for p in policies:
            runs = table.cell(p, rate)
            if not runs:
                continue
            m = {k: _median([r.metrics[k] for r in runs]) for k, _ in COLUMNS}
            med[p] = m
            hit = _median([r.hit_rate for r in runs])
            hi = _median([max(r.per_worker) for r in runs])
            lo = _median([min(r.per_worker) for r in runs])
            failed = sum(r.failed for r in runs)
            name = f"**{p}**" if p == "preheat" else _label(p)
            lines.append(
                f"| {name} | "
                + " | ".join(f"{m[k]:,.1f}" for k, _ in COLUMNS)
                + f" | {100 * hit:.1f}% | {hi:.0f} / {lo:.0f} | {failed} |"
            )
        lines.append("")
        if "preheat" in med and len(med) > 1:
            ours = med["preheat"]
            others = {p: m for p, m in med.items() if not p.startswith("preheat")}
            ahead = all(
                ours[k] < m[k] for m in others.values() for k in ("p50_ttft_ms", "p95_ttft_ms")
            )
            no_worse = all(
                ours[k] <= m[k] for m in others.values() for k in ("p95_tpot_ms", "p95_e2el_ms")
            )
            ok &= ahead and no_worse
            lines += [
                f"- Target, preheat's TTFT p50 and p95 ahead of every baseline: "
                f"{'**met**' if ahead else '**missed**'}.",
                f"- Target, preheat's TPOT p95 and e2e p95 no worse than any baseline's: "
                f"{'**met**' if no_worse else '**missed**'}.",
                "",
            ]
    return "\n".join(lines), ok


def main(args: argparse.Namespace) -> int:
    if not os.path.exists(args.vllm_python):
        print(
            f"--vllm-python {args.vllm_python}: no such file (a Python with vllm installed)",
            file=sys.stderr,
        )
        return 2
    return asyncio.run(run(args))


async def run(args: argparse.Namespace) -> int:
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    rates = [float(x) for x in args.rates.split(",") if x.strip()]
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    load_before = os.getloadavg()[0]
    t0 = time.monotonic()
    table = Table()
    with tempfile.TemporaryDirectory(prefix="preheat-vllm-serve-") as tmp:
        tokenizer = write_word_tokenizer(Path(tmp) / "tokenizer")
        out_dir = args.out if args.out is not None else Path(tmp) / "results"
        out_dir.mkdir(parents=True, exist_ok=True)
        for rnd in range(1, args.rounds + 1):
            for rate in rates:
                for p in policies:
                    out = (out_dir / f"r{rnd}-{rate:g}-{p}.json").resolve()
                    out.unlink(missing_ok=True)
                    table.runs.append(await _one(args, p, rate, rnd, tokenizer, out))
    body, ok = render(
        args,
        table,
        policies,
        rates,
        load_before,
        os.getloadavg()[0],
        started,
        time.monotonic() - t0,
    )
    print()
    print(body)
    if args.write is not None:
        write_section(args.write, "router-vllm-serve", body)
        print(f"\nwrote {args.write}")
    return 0 if ok else 1
