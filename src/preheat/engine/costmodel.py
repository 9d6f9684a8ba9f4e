"""GPU cost model of the sim engine: milliseconds per engine step, prefill and start-up phase.

Calibrated from the H100 measurements in ``/work/shared/calibration/`` (README.md there says
how each was produced; copies ship in ``preheat/engine/calibration/`` so that installed
workers do not depend on the measurement folder; :func:`load_calibration` reads either):

- ``levers_h100.json`` and ``mixed_step_h100.json`` (2026-11-24, README parts 1-5 and
  *Chunked-prefill interference and decode vs context*): every step replayed from a CUDA
  graph, RoPE tables built once per step as engines do, and a prefill chunk timed *inside* a
  decode step as vLLM's chunked prefill schedules it. They set the base (docs/proposals/0012).
- ``llama8b_h100_costs.json`` (2026-11-22, README first section): prefills beyond 2,048
  tokens (compute-bound, unchanged between the files: 8k tokens 246.6 ms there, 247.4 ms in
  ``levers_h100.json``) and the weight-load rates. Its short prefills ran eagerly
  (a 20-30 ms launch floor) and its decode step built RoPE per layer (+1.2 ms), so the rest
  of it no longer sets the model.

Every constant is derived from those files when the model is built
(:meth:`CostModel.from_calibration`), so a new measurement recalibrates it without code
changes. The formulas (8B shape, Llama-3-8B-like, bf16):

**One engine step** carrying ``B`` decoding sequences (contexts summing to ``kv_tokens``)
and prefill chunks of ``C_i`` new tokens on top of ``P_i`` tokens of their prompts already
in the KV cache: one forward pass reads the weights once, and the chunks ride on it::

    step_ms       = decode_step(B, kv_tokens) + added(chunks)        (B >= 1)
                  = step_fixed_ms + added(chunks)                     (B == 0)
    decode_step   = max(floor, a + b * B + c * kv_tokens)
    added(chunks) = T * u(T) + k * sum_i C_i * (P_i + C_i / 2),   T = sum_i C_i
    prefill_ms(new, cached) = step_ms([(new, cached)], 0, 0)

- ``a, b, c``: least squares over every bf16 decode-only step of the graph-replayed files
  (``levers_h100.json``: ``fp8.decode`` bf16 rows, ``kvfp8.decode_step`` bf16/bf16 rows,
  ``spec.verify`` k = 0 rows; ``mixed_step_h100.json``: ``context`` rows and the mixed grid's
  chunk-0 rows): 7.74 + 0.0096 x B + 0.0425 us x kv_tokens, within 3.2% of each row.
  ``floor``: (weights + KV bytes) / HBM bandwidth, a fit of the ``context`` rows' ``floor_ms``.
- ``k``: the chunk's attention, ms per chunk token per key attended (1.83e-6 ms: 1.8 us per
  token per thousand keys), least squares of the mixed grid's ``added_ms_table`` on 4,096
  cached tokens less the same chunk on none (README: "1.85 us x C x (P + C/2)").
- ``u(T)``: the linear layers' cost per chunk token, piecewise-linear in T: through the
  ``added_ms_table`` less the attention term, mean over batch 1-128 and both cached
  lengths, at T = 128 ... 2,048 (13.4 / 14.5 / 17.8 / 19.9 / 22.0 us: small chunks partly
  ride on the weight read the step pays anyway), then through ``llama8b_h100_costs.json``'s
  compute-bound prefills beyond 2,048 (4,096 and 8,192 tokens, as ``step_fixed_ms + T * u
  + k * T^2 / 2``), constant below the first and beyond the last knot (so beyond 8,192
  tokens a prefill grows by ``u`` per token plus its attention, which is quadratic).
  ``u`` is taken at the step's total chunk tokens: all chunk tokens go through each linear
  layer as one matrix product (only one chunk per step was measured).
- ``step_fixed_ms``: the step a chunk pays when no sequence decodes (weights read, lm head,
  launches), a least-squares fit of relative error over the grid's chunk-alone rows (batch 0,
  ``mixed_step_h100.json``): 6.5 ms, against 7.7 ms for a decode step of one sequence (whose
  decode attention kernels the chunk-alone step does not launch).
- The router's predicted prefill (``prefill_ms``) and the sim engine's step share this one
  formula; ``chunk_shared_ms`` of the router's decode-interference term is
  ``step_fixed_ms`` (what a chunk's own step pays that the decode step it joins pays anyway).

**Start-up**: ``weight_load_s = load_s_measured * model_bytes / load_bytes`` for a cold or
a warm page cache (``llama8b_h100_costs.json``), plus engine initialisation; warm-up is an
assumed constant.

**Engine levers** (issue 20), off by default, each fitted from ``levers_h100.json`` (and
``mixed_step_h100.json``; README parts 1, 2 and 5) on one H100 80GB HBM3 in plain PyTorch
with random weights. The base above was measured by the same code, so every lever is
checked against the files' absolute step times (``tests/engine/test_costmodel_levers.py``):

- **FP8 weights** (``quantization: fp8``; e4m3 weights, per-tensor scale, as
  ``fp8_tensor``): a decode step (and ``step_fixed_ms``) is shorter by
  ``fp8_decode_saving_ms``, the measured bf16 - fp8 difference (2.2-2.4 ms at batch 1-128
  for the 8B: the 7.0 GB of linear-layer weights not read, at about 3 TB/s; the same at
  every batch, as measured); the chunks' ``added`` takes ``fp8_prefill_ratio`` of its bf16
  time (0.71-0.74 for graph-replayed prefills of 2k-8k tokens: the GEMMs at 62% of the FP8
  peak, attention still bf16). The weights freed become KV blocks (:func:`kv_cache_tokens`).
- **FP8 KV cache** (``kv_cache_dtype: fp8``): the per-token KV-read term of a decode step
  (``c * kv_tokens``) is multiplied by ``kv_fp8_ratio`` (least squares over the whole-step
  rows, 0.6-0.8 of the bf16 cache's time: the fp8 kernel moves 1.5-2.6 TB/s, not 2x; at
  batch 1 no gain); twice the tokens fit in the same memory. Prefill is unchanged (the
  cast on write was not measured; it is one small kernel per layer).
- **Speculative decoding** (``speculative_config``: method, ``num_speculative_tokens``
  k, and the expected tokens per step ``E``, vLLM's ``synthetic_acceptance_length`` or
  ``1 + sum(synthetic_acceptance_rates)``; an acceptance rate ``a`` per drafted token gives
  ``E = (1 - a^(k+1)) / (1 - a)``): one verification step of batch B is the decode step
  plus ``spec_fixed_ms`` plus ``B * k`` extra query tokens at ``u(B * k)`` each (the
  linear layers' cost per token above, which rises once B * (k+1) passes ~128 rows:
  verification makes large batches compute-bound, the loss of benefit with batch), plus k
  draft steps (``draft_model``: the measured 1B-shape draft, ``eagle``/``eagle3``: the
  measured EAGLE-style head, both ``d0 + d1 * B``; ``ngram``: a CPU lookup, 0). The sim
  engine still emits one token per sequence per step, so each simulated decode step costs
  ``(k * draft(B) + verify(B)) / E``: right in expectation (throughput, mean ITL), not the
  bursts of E tokens. Prefill is unchanged.
- **A 32B shape** (``model_size: 32b``, ``llama32b_h100_costs.json``, Qwen2.5-32B-like,
  README part 3; measured by the same code as ``levers_h100.json``: decode steps and the
  ``ms_graph`` prefills replayed from a CUDA graph, RoPE once per step): decode ``a + b * B``
  fitted to its rows after the KV term, which is the 8B's ``c`` times 2 (256 KiB of KV per
  token against 128: all its rows are at 2k context, so the fit cannot separate them).
  Its chunks were not measured inside decode steps, so (an assumption, :meth:`CostModel.from_32b`):
  ``step_fixed_ms`` is the 8B's times the ratio of the two decode intercepts ``a``; ``k`` the
  8B's times 2.5 (64 layers x 40 heads against 32 x 32); ``u(T)`` the 8B's times a ratio
  piecewise-linear through the 32B/8B ratios of ``T * u(T)`` at its measured prefills (512,
  2,048, 8,192 tokens), so that each of them is met. The levers scale by its linear-layer
  bytes (FP8 saving) and per-token cost (verification); no lever was measured on it.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from preheat.core.piecewise import linear

# Where the packaged copy of the measurement lives (a copy of
# /work/shared/calibration/llama8b_h100_costs.json, measured 2026-11-22 on one H100).
PACKAGED_CALIBRATION = "llama8b_h100_costs.json"
# The levers' measurements (copies of /work/shared/calibration/*.json, 2026-11-24, one H100)
PACKAGED_LEVERS = "levers_h100.json"
PACKAGED_MIXED = "mixed_step_h100.json"
PACKAGED_32B = "llama32b_h100_costs.json"

MODEL_SIZES = ("8b", "32b")
SPEC_METHODS = ("ngram", "draft_model", "eagle", "eagle3")
# KV bytes per token of context: 2 (K, V) x layers x kv heads x head dim x 2 bytes (bf16)
KV_BYTES_PER_TOKEN = {"8b": 2 * 32 * 8 * 128 * 2, "32b": 2 * 64 * 8 * 128 * 2}
# Weight bytes in bf16, and the linear layers' share (what FP8 halves; the embedding and the
# lm head stay bf16, as in vLLM's FP8 checkpoints): 8B 16.06 GB, 15.0 GB read per decode step
# of which 7.0 GB saved in FP8 (calibration README part 1); 32B 65.53 GB, linear layers
# 32.76e9 - 2 x 152064 x 5120 params.
WEIGHT_BYTES = {"8b": 16.06e9, "32b": 65.53e9}
FP8_SAVED_BYTES = {"8b": 7.0e9, "32b": (32.76e9 - 2 * 152064 * 5120) * 1.0}  # 1 byte/param
# Linear-layer parameters (what a token's GEMMs cost in proportion to): 8B 8.03e9 - 2 x
# 128256 x 4096, 32B as above; the 32B's verification tokens cost this much more.
LINEAR_PARAMS = {"8b": 8.03e9 - 2 * 128256 * 4096, "32b": 32.76e9 - 2 * 152064 * 5120}
HBM_BYTES_PER_MS = 3.35e9  # H100 SXM HBM3: 3.35 TB/s (the calibration's floors)
# The KV cache of the default replica: 25,000 blocks of 16 tokens (SimConfig.num_gpu_blocks,
# vLLM's log for Llama-3-8B bf16 at gpu_memory_utilization 0.9 on an 80 GB H100).
DEFAULT_KV_BYTES = 25_000 * 16 * KV_BYTES_PER_TOKEN["8b"]


def kv_cache_tokens(model_size: str = "8b", weights: str = "bf16", kv: str = "bf16") -> int:
    """Tokens of KV cache one H100 holds for this shape and formats: the default replica's
    KV memory plus what lighter (or minus what heavier) weights leave, divided by the bytes
    per token (halved by an FP8 cache). The 32B in bf16 leaves ~3 GB (11k tokens)."""
    weight_bytes = WEIGHT_BYTES[model_size] - (
        FP8_SAVED_BYTES[model_size] if weights == "fp8" else 0.0
    )
    free = DEFAULT_KV_BYTES + WEIGHT_BYTES["8b"] - weight_bytes
    per_token = KV_BYTES_PER_TOKEN[model_size] * (0.5 if kv == "fp8" else 1.0)
    return max(0, int(free // per_token))


# Prefills of at least this many new tokens are compute-bound (graph-replayed 2,048-token
# prefill 57.2 ms at 519 TFLOP/s; levers_h100.json part 1): where the FP8 prefill ratio is read.
COMPUTE_BOUND_MIN_NEW = 1024

# Engine initialisation before weights load: `import torch` 5.3 s + CUDA init 0.4 s
# (calibration README, measured on the same H100 host).
ENGINE_INIT_S = 5.7

# Warm-up (memory profiling, CUDA-graph capture, a first request). NOT measured: an
# assumption, consistent with public reports of 40-90 s cold vLLM starts for 8-32B models
# once image pull and the phases above are added (calibration README).
WARMUP_S = 10.0


def load_calibration(
    path: str | Path | None = None, packaged: str = PACKAGED_CALIBRATION
) -> dict[str, Any]:
    """The calibration JSON at ``path``, or the packaged copy ``packaged`` when ``path`` is
    None."""
    if path is None:
        text = (
            resources.files("preheat.engine")
            .joinpath("calibration", packaged)
            .read_text(encoding="utf-8")
        )
    else:
        text = Path(path).read_text(encoding="utf-8")
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"calibration {path}: expected a JSON object")
    return data


def _lstsq(rows: Sequence[Sequence[float]], ys: Sequence[float]) -> list[float]:
    """Least squares by the normal equations (tiny systems; no numpy dependency)."""
    n = len(rows[0])
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(n)] for i in range(n)]
    aty = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(n)]
    # Gauss-Jordan elimination with partial pivoting.
    m = [[*row, v] for row, v in zip(ata, aty, strict=True)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[piv] = m[piv], m[col]
        if m[col][col] == 0.0:
            raise ValueError("calibration: degenerate fit (too few distinct points)")
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [a - f * b for a, b in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _decode_rows(
    levers: Mapping[str, Any], mixed: Mapping[str, Any]
) -> list[tuple[float, float, float]]:
    """(batch, context, ms) of every bf16 decode-only step in the graph-replayed files:
    ``levers_h100.json`` ``fp8.decode`` (mode bf16), ``kvfp8.decode_step`` (bf16 KV and
    weights, both attention kernels), ``spec.verify`` (k = 0, both kernels);
    ``mixed_step_h100.json`` ``context`` (rows timed or extrapolated) and the mixed grid's
    chunk-0 rows (calibration README parts 1, 2, 5 and *decode vs context*)."""
    rows = [
        (r["batch"], r["context"], r["ms"]) for r in levers["fp8"]["decode"] if r["mode"] == "bf16"
    ]
    rows += [
        (r["batch"], r["context"], r["ms"])
        for r in levers["kvfp8"]["decode_step"]
        if r["kv"] == "bf16" and r["weights"] == "bf16"
    ]
    rows += [(r["batch"], r["context"], r["ms"]) for r in levers["spec"]["verify"] if r["k"] == 0]
    rows += [(r["batch"], r["context"], r["ms"]) for r in mixed["context"] if "ms" in r]
    rows += [
        (r["batch"], r["decode_context"], r["ms"])
        for r in mixed["mixed"]
        if r["chunk"] == 0 and r["batch"] > 0
    ]
    return [(float(b), float(c), float(ms)) for b, c, ms in rows]


def fit_chunk_terms(
    mixed: Mapping[str, Any],
) -> tuple[float, tuple[tuple[float, float], ...]]:
    """The chunk's attention ``k`` (ms per chunk token per key attended) and the linear
    layers' cost per chunk token ``u`` at each measured chunk size (tokens, ms per token),
    from ``mixed_step_h100.json``'s ``added_ms_table`` (README, *Chunked-prefill
    interference*: added_ms ~ C x u(C) + k x C x (P + C/2)). ``k``: least squares through the
    origin of (added on 4,096 cached - added on 0) against C x 4096 over every batch and C;
    ``u(C)``: the mean over batch and cached length of (added - attention) / C."""
    table = mixed["added_ms_table"]
    cached = sorted(table, key=int)
    p_hi = cached[-1]
    batches = list(table[cached[0]])
    sizes = sorted({int(c) for per_b in table[cached[0]].values() for c in per_b})
    pairs = [(b, c) for b in batches for c in sizes]
    p = float(p_hi)
    k = sum((table[p_hi][b][str(c)] - table[cached[0]][b][str(c)]) * c * p for b, c in pairs) / sum(
        (c * p) ** 2 for _, c in pairs
    )
    knots = tuple(
        (
            float(c),
            _mean(
                [
                    (table[pc][b][str(c)] - k * c * (float(pc) + c / 2)) / c
                    for pc in cached
                    for b in batches
                ]
            ),
        )
        for c in sizes
    )
    return k, knots


@dataclass(frozen=True)
class LeverCosts:
    """The levers' constants, each fitted from the measurement when built (:meth:`fit`;
    the module docstring says how each is used)."""

    # FP8 weights (levers_h100.json "fp8"): decode ms saved per step (mean of bf16 -
    # fp8_tensor over batch 1-128 at 2k context); the prefill ratio fp8/bf16 of the
    # graph-replayed ("ms_graph") prefills where compute-bound (>= 1024 new tokens), applied
    # to a step's chunk time (the fixed part saves fp8_decode_saving_ms instead)
    fp8_decode_saving_ms: float
    fp8_prefill_ratio: float
    # FP8 KV cache ("kvfp8" decode_step, Triton attention both ways): the KV-read term's
    # factor, least squares of the saved ms on the bf16 cache's read time (42.3 us per 1k KV
    # tokens, mixed_step_h100.json context_slopes at batch 32 and 128)
    kv_fp8_ratio: float
    # speculative verification ("spec" verify rows, Triton attention): fixed ms per step with
    # k > 0, and the linear layers' cost per extra query token u(tokens) in us, from
    # mixed_step_h100.json's added_ms_table (fit_chunk_terms: the base's u(T))
    spec_fixed_ms: float
    token_us_knots: tuple[tuple[float, float], ...]
    # draft steps ("spec" draft_decode, 2k context): method -> (ms at 0, ms per sequence)
    draft_ms: tuple[tuple[str, float, float], ...]

    @classmethod
    def fit(cls, levers: Mapping[str, Any], mixed: Mapping[str, Any]) -> LeverCosts:
        dec = levers["fp8"]["decode"]
        by = {(r["batch"], r["mode"]): float(r["ms"]) for r in dec}
        batches = sorted({r["batch"] for r in dec})
        saving = _mean([by[(b, "bf16")] - by[(b, "fp8_tensor")] for b in batches])
        pre = {(r["new"], r["mode"]): float(r["ms_graph"]) for r in levers["fp8"]["prefill"]}
        news = sorted({n for n, _ in pre})
        big = [
            pre[(n, "fp8_tensor")] / pre[(n, "bf16")] for n in news if n >= COMPUTE_BOUND_MIN_NEW
        ]

        slopes = mixed["context_slopes"]
        kv_ms = _mean([float(slopes[b]["us_per_1k_kv_tokens"]) for b in ("32", "128")]) / 1e6
        steps = {
            (r["batch"], r["context"], r["kv"], r["weights"]): float(r["ms"])
            for r in levers["kvfp8"]["decode_step"]
            if r["attention"] == "triton"
        }
        num = den = 0.0
        for (b, ctx, kv, w), ms in steps.items():
            if kv == "fp8":
                x = kv_ms * b * ctx
                num += (steps[(b, ctx, "bf16", w)] - ms) * x
                den += x * x
        kv_ratio = 1.0 - num / den

        _, per_token = fit_chunk_terms(mixed)
        knots = tuple((c, 1000.0 * ms) for c, ms in per_token)
        verify = {
            (r["batch"], r["k"]): float(r["ms"])
            for r in levers["spec"]["verify"]
            if r["attention"] == "triton"
        }
        fixed = _mean(
            [
                ms - verify[(b, 0)] - b * k * linear(knots, b * k) / 1000.0
                for (b, k), ms in verify.items()
                if k > 0
            ]
        )
        drafts = []
        for name, method in (("1b", "draft_model"), ("eagle8b", "eagle")):
            rows = [r for r in levers["spec"]["draft_decode"] if r["model"] == name]
            d0, d1 = _lstsq([(1.0, float(r["batch"])) for r in rows], [r["ms"] for r in rows])
            drafts.append((method, d0, d1))
        return cls(
            fp8_decode_saving_ms=saving,
            fp8_prefill_ratio=_mean(big),
            kv_fp8_ratio=kv_ratio,
            spec_fixed_ms=fixed,
            token_us_knots=knots,
            draft_ms=tuple(drafts),
        )

    @classmethod
    def default(cls) -> LeverCosts:
        return _default_levers()

    def token_ms(self, tokens: float) -> float:
        """ms per extra token through the linear layers when ``tokens`` ride one step."""
        return linear(self.token_us_knots, tokens) / 1000.0

    def draft_step_ms(self, method: str, batch: int) -> float:
        """One draft step for ``batch`` sequences (``ngram``: a CPU lookup, 0)."""
        name = "eagle" if method == "eagle3" else method
        for m, d0, d1 in self.draft_ms:
            if m == name:
                return d0 + d1 * batch
        return 0.0


@functools.cache
def _default_levers() -> LeverCosts:
    return LeverCosts.fit(
        load_calibration(packaged=PACKAGED_LEVERS), load_calibration(packaged=PACKAGED_MIXED)
    )


def acceptance_length(k: int, rate: float) -> float:
    """Expected tokens per verification step for k drafted tokens each accepted with
    probability ``rate`` given the ones before (README part 2's worked example)."""
    if rate >= 1.0:
        return float(k + 1)
    return (1.0 - rate ** (k + 1)) / (1.0 - rate)


@dataclass(frozen=True)
class CostModel:
    """Times of one simulated GPU. All derived constants come from the calibration files
    (:meth:`from_calibration`); ``scale`` multiplies every time (1.0 = an H100, 10.0 = ten
    times slower, for demos on slow machines); ``load_s``/``warmup_s`` override start-up."""

    # chunks: the linear layers' ms per chunk token u(T), piecewise-linear knots (tokens,
    # ms per token), and the chunk's attention k (ms per chunk token per key attended)
    chunk_token_knots: tuple[tuple[float, float], ...]
    attn_ms_per_token2: float
    # the step a chunk pays when nothing decodes (weights read, lm head, launches)
    step_fixed_ms: float
    # decode: a + b*batch + c*kv_tokens, floor f0 + f1*kv_tokens
    decode_a_ms: float
    decode_b_ms: float
    decode_c_ms: float
    decode_floor0_ms: float
    decode_floor1_ms: float
    # start-up
    model_bytes: float
    load_cold_s_per_byte: float
    load_pagecache_s_per_byte: float
    engine_init_s: float = ENGINE_INIT_S
    default_warmup_s: float = WARMUP_S
    # knobs
    scale: float = 1.0
    load_s: float | None = None  # overrides the whole loading phase (before scale)
    warmup_s: float | None = None  # overrides the warm-up phase (before scale)
    page_cache: bool = False  # weights already in the host page cache
    # engine levers (module docstring); their constants from levers_h100.json
    levers: LeverCosts | None = None  # None: LeverCosts.default() when a lever is on
    model_size: str = "8b"  # "8b" | "32b": which shape the constants above were fitted to
    weights: str = "bf16"  # "bf16" | "fp8" (vLLM quantization=fp8)
    kv_dtype: str = "bf16"  # "bf16" | "fp8" (vLLM kv_cache_dtype=fp8*)
    spec_method: str = ""  # "" (off) | ngram | draft_model | eagle | eagle3
    spec_tokens: int = 0  # k, vLLM's num_speculative_tokens
    spec_accept_len: float = 1.0  # E: tokens per sequence per verification step, in [1, k+1]

    def __post_init__(self) -> None:
        """ValueError for a knob out of range: a time scale of 0 or less (every step free,
        or negative) and negative or non-finite start-up overrides."""
        problems: list[str] = []
        if not (math.isfinite(self.scale) and self.scale > 0):
            problems.append(f"time_scale must be > 0 and finite, got {self.scale}")
        for name in ("load_s", "warmup_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                problems.append(f"{name} must be >= 0 and finite, got {value}")
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def from_calibration(cls, data: Mapping[str, Any], **overrides: Any) -> CostModel:
        """:meth:`fit` to ``llama8b_h100_costs.json``'s contents ``data`` and the packaged
        copies of ``levers_h100.json`` and ``mixed_step_h100.json``."""
        return cls.fit(
            data,
            load_calibration(packaged=PACKAGED_LEVERS),
            load_calibration(packaged=PACKAGED_MIXED),
            **overrides,
        )

    @classmethod
    def fit(
        cls,
        data: Mapping[str, Any],
        levers: Mapping[str, Any],
        mixed: Mapping[str, Any],
        **overrides: Any,
    ) -> CostModel:
        """Fit the model (module docstring) to ``llama8b_h100_costs.json``'s contents
        ``data`` (prefills beyond the mixed grid's largest chunk, weight loading) and the
        graph-replayed ``levers_h100.json`` (``levers``) and ``mixed_step_h100.json``
        (``mixed``)."""
        # decode: every bf16 decode-only step of the graph-replayed files
        steps = _decode_rows(levers, mixed)
        a, b, c = _lstsq([(1.0, bt, bt * ctx) for bt, ctx, _ in steps], [ms for *_, ms in steps])
        floors = [
            (float(r["batch"]) * float(r["context"]), float(r["floor_ms"]))
            for r in mixed["context"]
            if "ms" in r
        ]
        fl0, fl1 = _lstsq([(1.0, kv) for kv, _ in floors], [f for _, f in floors])
        # chunks: k and u(C) from the mixed grid; the fixed step from its chunk-alone rows
        k, knots = fit_chunk_terms(mixed)
        alone = [
            (float(r["chunk"]), float(r["chunk_cached"]), float(r["ms"]))
            for r in mixed["mixed"]
            if r["batch"] == 0 and r["chunk"] > 0
        ]
        if not alone:
            raise ValueError("calibration: mixed_step has no chunk-alone (batch 0) rows")
        probe = dict(knots)

        def added(n: float, p: float) -> float:
            return n * probe[n] + k * n * (p + n / 2)

        # least squares of the relative error: sum ((fixed + added - ms) / ms)^2
        fixed = sum((ms - added(n, p)) / ms**2 for n, p, ms in alone) / sum(
            1.0 / ms**2 for _, _, ms in alone
        )
        # beyond the largest chunk: the older file's compute-bound prefills (cached == 0)
        largest = knots[-1][0]
        longer = sorted(
            (float(p["new"]), float(p["ms"]))
            for p in data["prefill"]
            if p["cached"] == 0 and float(p["new"]) > largest
        )
        knots += tuple((n, (ms - fixed - k * n * n / 2) / n) for n, ms in longer)

        load_bytes = float(data["load_bytes"])
        # Model bytes: bf16 weights, 2 bytes per parameter ("params" in the file).
        fields: dict[str, Any] = {
            "chunk_token_knots": knots,
            "attn_ms_per_token2": k,
            "step_fixed_ms": fixed,
            "decode_a_ms": a,
            "decode_b_ms": b,
            "decode_c_ms": c,
            "decode_floor0_ms": fl0,
            "decode_floor1_ms": fl1,
            "model_bytes": 2.0 * float(data["params"]),
            "load_cold_s_per_byte": float(data["load_cold_s"]) / load_bytes,
            "load_pagecache_s_per_byte": float(data["load_pagecache_s"]) / load_bytes,
        }
        fields.update(overrides)
        return cls(**fields)

    @classmethod
    def default(cls, **overrides: Any) -> CostModel:
        """The model fitted to the packaged H100 / Llama-3-8B measurements."""
        return cls.from_calibration(load_calibration(), **overrides)

    @classmethod
    def from_32b(cls, data: Mapping[str, Any], base: CostModel, **overrides: Any) -> CostModel:
        """The 32B shape (``llama32b_h100_costs.json``, README part 3), on the 8B ``base``.
        Measured: decode ``a + b * batch`` fitted to its rows after the KV term, which is the
        8B's ``c`` times 2 (256 KiB of KV per token against 128: all its rows are at 2k
        context, so the fit cannot separate them); floor fitted to its ``floor_ms``; its
        graph-replayed prefills (``ms_graph``, 512 / 2,048 / 8,192 tokens). Assumed, since
        no 32B chunk was timed inside a decode step: ``step_fixed_ms`` is the 8B's times
        the ratio of the decode intercepts (the weights read once and the launches, both
        in ``a``); the attention term the 8B's times 2.5 (64 layers x 40 heads against
        32 x 32); ``u(T)`` the 8B's times a ratio, piecewise-linear in T through the
        32B/8B ratios of ``T * u(T)`` at the measured prefills (constant outside them), so
        that every measured prefill is met; load rates the 8B's, 2 bytes per param."""
        decode = [
            (float(d["batch"]), float(d["context"]), float(d["ms"]), float(d["floor_ms"]))
            for d in data["decode"]
        ]
        c = 2.0 * base.decode_c_ms
        a, b = _lstsq(
            [(1.0, bt) for bt, _, _, _ in decode], [ms - c * bt * ctx for bt, ctx, ms, _ in decode]
        )
        fl0, fl1 = _lstsq([(1.0, bt * ctx) for bt, ctx, _, _ in decode], [d[3] for d in decode])
        fixed = base.step_fixed_ms * a / base.decode_a_ms
        k = 2.5 * base.attn_ms_per_token2
        prefill = sorted(
            (float(p["new"]), float(p.get("ms_graph", p["ms"])))
            for p in data["prefill"]
            if p.get("cached", 0) == 0
        )
        if not prefill:
            raise ValueError("calibration: the 32B file has no prefill rows with cached == 0")
        ratios = tuple(
            (n, (ms - fixed - k * n * n / 2) / (n * base._token_ms(n))) for n, ms in prefill
        )
        xs = sorted({x for x, _ in base.chunk_token_knots} | {n for n, _ in prefill})
        knots = tuple((x, base._token_ms(x) * linear(ratios, x)) for x in xs)
        fields: dict[str, Any] = {
            "chunk_token_knots": knots,
            "attn_ms_per_token2": k,
            "step_fixed_ms": fixed,
            "decode_a_ms": a,
            "decode_b_ms": b,
            "decode_c_ms": c,
            "decode_floor0_ms": fl0,
            "decode_floor1_ms": fl1,
            "model_bytes": 2.0 * float(data["params"]),
            "load_cold_s_per_byte": base.load_cold_s_per_byte,
            "load_pagecache_s_per_byte": base.load_pagecache_s_per_byte,
            "model_size": "32b",
        }
        fields.update(overrides)
        return cls(**fields)

    @classmethod
    def for_shape(cls, model_size: str = "8b", **overrides: Any) -> CostModel:
        """The packaged model of ``model_size`` (8b or 32b) with ``overrides``."""
        if model_size == "8b":
            return cls.default(**overrides)
        if model_size == "32b":
            return cls.from_32b(load_calibration(packaged=PACKAGED_32B), cls.default(), **overrides)
        raise ValueError(
            f"unknown model size {model_size!r}; choose one of {', '.join(MODEL_SIZES)}"
        )

    @functools.cached_property
    def _levers(self) -> LeverCosts:
        return self.levers if self.levers is not None else LeverCosts.default()

    @functools.cached_property
    def _token_scale(self) -> float:
        return LINEAR_PARAMS[self.model_size] / LINEAR_PARAMS["8b"]

    def with_(self, **changes: Any) -> CostModel:
        return dataclasses.replace(self, **changes)

    # --- prefill chunks -----------------------------------------------------------------
    @functools.cached_property
    def _knot_xs(self) -> tuple[float, ...]:
        # derived once per model (the router calls prefill_ms per endpoint per request)
        return tuple(x for x, _ in self.chunk_token_knots)

    def _token_ms(self, tokens: float) -> float:
        """u(T): the linear layers' ms per chunk token when T chunk tokens share a step
        (piecewise-linear through the knots, constant beyond the first and the last)."""
        ks = self.chunk_token_knots
        i = bisect.bisect_right(self._knot_xs, tokens)
        if i == 0:
            return ks[0][1]
        if i == len(ks):
            return ks[-1][1]
        (x0, y0), (x1, y1) = ks[i - 1], ks[i]
        return y0 + (tokens - x0) * (y1 - y0) / (x1 - x0)

    def _chunks_ms(self, chunks: Iterable[tuple[int, int]]) -> float:
        """added(chunks): what the chunks add to the step they ride in (before ``scale``)."""
        total = 0
        attn = 0.0
        for new, cached in chunks:
            if new > 0:
                total += new
                attn += new * (cached + new / 2)
        if total == 0:
            return 0.0
        ms = total * self._token_ms(total) + self.attn_ms_per_token2 * attn
        if self.weights == "fp8":
            ms *= self._levers.fp8_prefill_ratio
        return ms

    def _fixed_ms(self) -> float:
        """The step a chunk pays when no sequence decodes (before ``scale``)."""
        if self.weights == "fp8":
            saved = FP8_SAVED_BYTES[self.model_size] / FP8_SAVED_BYTES["8b"]
            return self.step_fixed_ms - self._levers.fp8_decode_saving_ms * saved
        return self.step_fixed_ms

    def prefill_ms(self, new_tokens: int, cached_tokens: int = 0) -> float:
        """One request's prefill of ``new_tokens`` on top of ``cached_tokens``, alone in its
        step: ``step_ms([(new_tokens, cached_tokens)], 0, 0)``."""
        if new_tokens <= 0:
            return 0.0
        return self.step_ms(((new_tokens, cached_tokens),), 0, 0)

    # --- decode -------------------------------------------------------------------------
    def _decode_raw_ms(self, batch: float, kv_tokens: float) -> float:
        floor = self.decode_floor0_ms + self.decode_floor1_ms * kv_tokens
        fit = self.decode_a_ms + self.decode_b_ms * batch + self._kv_ms(kv_tokens)
        if self.weights == "fp8":
            saved = FP8_SAVED_BYTES[self.model_size]
            floor -= saved / HBM_BYTES_PER_MS
            fit -= self._levers.fp8_decode_saving_ms * saved / FP8_SAVED_BYTES["8b"]
        if self.kv_dtype == "fp8":
            floor -= 0.5 * self.decode_floor1_ms * kv_tokens
        return max(floor, fit) + self._spec_extra_ms(batch)

    def _kv_ms(self, kv_tokens: float) -> float:
        ratio = self._levers.kv_fp8_ratio if self.kv_dtype == "fp8" else 1.0
        return self.decode_c_ms * ratio * kv_tokens

    def _spec_extra_ms(self, batch: float) -> float:
        """What a verification step adds to the decode step, and the k draft steps."""
        k = self.spec_tokens
        if not self.spec_method or k <= 0 or batch <= 0:
            return 0.0
        lv = self._levers
        extra = batch * k
        verify = lv.spec_fixed_ms + extra * lv.token_ms(extra) * self._token_scale
        return verify + k * lv.draft_step_ms(self.spec_method, round(batch))

    def _per_token(self, ms: float) -> float:
        """A verification step's ms per token it yields (E tokens per sequence)."""
        if not self.spec_method or self.spec_tokens <= 0:
            return ms
        return ms / max(1.0, self.spec_accept_len)

    def verify_step_ms(self, batch: int, context: int) -> float:
        """One whole speculative step (k draft steps + verification) of ``batch`` sequences
        of ``context`` tokens, before dividing by E (:meth:`decode_step_ms` divides)."""
        if batch <= 0:
            return 0.0
        return self.scale * self._decode_raw_ms(batch, batch * context)

    def decode_step_ms(self, batch: int, context: int) -> float:
        """One decode step of ``batch`` sequences of ``context`` tokens each."""
        if batch <= 0:
            return 0.0
        return self.scale * self._per_token(self._decode_raw_ms(batch, batch * context))

    # --- one engine iteration -----------------------------------------------------------
    def step_ms(
        self, chunks: Iterable[tuple[int, int]], decodes: int, decode_kv_tokens: int
    ) -> float:
        """One iteration: prefill ``chunks`` of ``(new, cached)`` tokens plus ``decodes``
        sequences whose contexts sum to ``decode_kv_tokens``: the decode step (or, with no
        decodes, ``step_fixed_ms``) plus what the chunks add (module docstring)."""
        added = self._chunks_ms(chunks)
        if decodes:
            base = self._per_token(self._decode_raw_ms(decodes, decode_kv_tokens))
        elif added:
            base = self._fixed_ms()
        else:
            return 0.0
        return self.scale * (base + added)

    # --- start-up -----------------------------------------------------------------------
    def weight_load_s(self, model_bytes: float | None = None, *, cold: bool = True) -> float:
        """Weights from local disk to GPU: the measured seconds per byte (cold page cache,
        1.6 GB/s; or from the page cache) times ``model_bytes`` (default: the measured
        model, 16.06 GB bf16)."""
        nbytes = self.model_bytes if model_bytes is None else model_bytes
        per_byte = self.load_cold_s_per_byte if cold else self.load_pagecache_s_per_byte
        return self.scale * nbytes * per_byte

    def loading_s(self) -> float:
        """The whole loading phase: engine init + weight load (or the ``load_s`` override)."""
        if self.load_s is not None:
            return self.scale * self.load_s
        return self.scale * self.engine_init_s + self.weight_load_s(cold=not self.page_cache)

    def warming_s(self) -> float:
        """The warm-up phase (or the ``warmup_s`` override)."""
        base = self.default_warmup_s if self.warmup_s is None else self.warmup_s
        return self.scale * base
