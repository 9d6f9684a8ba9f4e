"""GPU cost model of the sim engine: milliseconds per prefill, decode step and start-up phase.

Calibrated from one measurement file, ``llama8b_h100_costs.json`` (Llama-3-8B shape, one
H100 80GB HBM3, plain PyTorch; see ``/work/shared/calibration/README.md`` where it was
produced). A copy ships in ``preheat/engine/calibration/`` so that installed workers do not
depend on the measurement folder; :func:`load_calibration` reads either.

Every constant of the model is derived from that file when the model is built
(:meth:`CostModel.from_calibration`), so a new measurement recalibrates it without code
changes. The formulas:

**Prefill** (``new`` uncached tokens on top of ``cached`` tokens already in the KV cache)::

    prefill_ms(new, cached) = max(floor(new), compute(new) + k * new * cached)

- ``compute(new)``: piecewise-linear through the measured ``cached == 0`` points in the
  compute-bound regime (``new >= 1024``), extended below the first point with the first
  segment's slope and beyond the last point (8192) with the last segment's per-token slope.
- ``k``: attention over the cached context (ms per new-token x cached-token), fitted by least
  squares on the measured ``cached > 0`` points in the compute-bound regime.
- ``floor(new)``: the launch/overhead-bound regime of short prefills (about 20-30 ms here,
  eager PyTorch), a least-squares line over every measured point with ``new < 1024``. A
  prefix-cache hit on a short prompt saves nothing measurable there, as in the measurement.

**Decode step** (``batch`` sequences whose contexts sum to ``kv_tokens``)::

    decode_ms = max(floor, a + b * batch + c * kv_tokens)
    floor     = f0 + f1 * kv_tokens      (weights + KV bytes / HBM bandwidth)

``a, b, c`` are a least-squares fit over the measured decode points and ``f0, f1`` a fit of
the file's ``floor_ms`` column; ``decode_step_ms(batch, context)`` is the same with
``kv_tokens = batch * context``.

**Mixed step** (vLLM's chunked prefill: prefill chunks and decodes in one forward pass)::

    step_ms = prefill_ms(sum of chunk tokens, -) + sum_i k * new_i * cached_i
              + b * decodes + c * decode_kv_tokens

i.e. the prefill part as above (with each chunk's cached-context attention), plus the
decodes' *marginal* cost. The fixed per-step overhead (weights read once, kernel launches:
``a``) is counted once, inside the prefill part, because it is one forward pass. Without
prefill chunks the step is a plain decode step.

**Start-up**: ``weight_load_s = load_s_measured * model_bytes / load_bytes`` for a cold or
a warm page cache, plus engine initialisation; warm-up is an assumed constant.

**Engine levers** (issue 20), off by default, each fitted from ``levers_h100.json`` (and
``mixed_step_h100.json``), measured 2026-11-24 on one H100 80GB HBM3 in plain PyTorch with
random weights (``/work/shared/calibration/README.md``, parts 1, 2 and 5; packaged copies in
``preheat/engine/calibration/``). That code is not vLLM and its absolute times sit above
vLLM's, most at small batch; the README says the ratios between levers transfer, so each
lever changes the base model above by what it changed the same file's bf16 step:

- **FP8 weights** (``quantization: fp8``; e4m3 weights, per-tensor scale, as
  ``fp8_tensor``): a decode step is shorter by ``fp8_decode_saving_ms``, the measured
  bf16 - fp8 difference (2.2-2.4 ms at batch 1-128 for the 8B: the 7.0 GB of linear-layer
  weights not read, at about 3 TB/s; the same at every batch, as measured); a prefill's
  compute-bound part takes ``fp8_prefill_ratio`` of its bf16 time (0.73-0.74 at 2k-8k
  tokens: the GEMMs at 62% of the FP8 peak, attention still bf16) and its launch-bound
  floor ``fp8_floor_ratio`` (1.13 at 512 tokens eager: the activation-quantisation kernels
  add launches). The weights freed become KV blocks (:func:`kv_cache_tokens`).
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
  linear layers' cost per token, which rises once B * (k+1) passes ~128 rows: verification
  makes large batches compute-bound, the loss of benefit with batch), plus k draft steps
  (``draft_model``: the measured 1B-shape draft, ``eagle``/``eagle3``: the measured
  EAGLE-style head, both ``d0 + d1 * B``; ``ngram``: a CPU lookup, 0). The sim engine
  still emits one token per sequence per step, so each simulated decode step costs
  ``(k * draft(B) + verify(B)) / E``: right in expectation (throughput, mean ITL), not the
  bursts of E tokens. Prefill is unchanged.
- **A 32B shape** (``model_size: 32b``, ``llama32b_h100_costs.json``, Qwen2.5-32B-like):
  prefill and decode fitted to its own rows as above (its decode rows are all at 2k
  context, so the KV term is the 8B's times 2, its 256 KiB per token against 128 KiB); the
  levers scale by its linear-layer bytes (FP8 saving) and per-token cost (verification);
  no lever was measured on it.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

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


# Prefills of at least this many new tokens are compute-bound in the measurement (1024 new
# tokens: 30.6 ms, beyond the ~20-28 ms eager-launch floor; see the calibration README).
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


def _interp(knots: Sequence[tuple[float, float]], x: float) -> float:
    """Piecewise-linear through ``knots``, constant beyond the first and the last."""
    if x <= knots[0][0]:
        return knots[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(knots):
        if x <= x1:
            return y0 + (x - x0) * (y1 - y0) / (x1 - x0)
    return knots[-1][1]


@dataclass(frozen=True)
class LeverCosts:
    """The levers' constants, each fitted from the measurement when built (:meth:`fit`;
    the module docstring says how each is used)."""

    # FP8 weights (levers_h100.json "fp8"): decode ms saved per step (mean of bf16 -
    # fp8_tensor over batch 1-128 at 2k context); prefill ratio fp8/bf16 (eager) where
    # compute-bound (>= 1024 new tokens) and where launch-bound (< 1024)
    fp8_decode_saving_ms: float
    fp8_prefill_ratio: float
    fp8_floor_ratio: float
    # FP8 KV cache ("kvfp8" decode_step, Triton attention both ways): the KV-read term's
    # factor, least squares of the saved ms on the bf16 cache's read time (42.3 us per 1k KV
    # tokens, mixed_step_h100.json context_slopes at batch 32 and 128)
    kv_fp8_ratio: float
    # speculative verification ("spec" verify rows, Triton attention): fixed ms per step with
    # k > 0, and the linear layers' cost per extra query token u(tokens) in us, from
    # mixed_step_h100.json's added_ms_table (mean over batch, less the chunk's attention)
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
        pre = {(r["new"], r["mode"]): float(r["ms_eager"]) for r in levers["fp8"]["prefill"]}
        news = sorted({n for n, _ in pre})
        ratio = [pre[(n, "fp8_tensor")] / pre[(n, "bf16")] for n in news]
        big = [r for n, r in zip(news, ratio, strict=True) if n >= COMPUTE_BOUND_MIN_NEW]
        small = [r for n, r in zip(news, ratio, strict=True) if n < COMPUTE_BOUND_MIN_NEW]

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

        table = mixed["added_ms_table"]
        cs = sorted({int(c) for per_b in table["0"].values() for c in per_b})
        ab = [(b, c) for b in table["0"] for c in cs]
        alpha = sum(
            (table["4096"][b][str(c)] - table["0"][b][str(c)]) * c * 4096 for b, c in ab
        ) / sum((c * 4096) ** 2 for _, c in ab)
        knots = tuple(
            (
                float(c),
                1000.0 * _mean([table["0"][b][str(c)] - alpha * c * c / 2 for b in table["0"]]) / c,
            )
            for c in cs
        )
        verify = {
            (r["batch"], r["k"]): float(r["ms"])
            for r in levers["spec"]["verify"]
            if r["attention"] == "triton"
        }
        fixed = _mean(
            [
                ms - verify[(b, 0)] - b * k * _interp(knots, b * k) / 1000.0
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
            fp8_floor_ratio=_mean(small) if small else 1.0,
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
        return _interp(self.token_us_knots, tokens) / 1000.0

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
    """Times of one simulated GPU. All derived constants come from the calibration file
    (:meth:`from_calibration`); ``scale`` multiplies every time (1.0 = an H100, 10.0 = ten
    times slower, for demos on slow machines); ``load_s``/``warmup_s`` override start-up."""

    # prefill: compute-bound piecewise-linear knots (new tokens, ms), cached-context term
    compute_knots: tuple[tuple[float, float], ...]
    cached_ms_per_token2: float  # k
    floor_ms0: float  # floor(new) = floor_ms0 + floor_ms_per_token * new
    floor_ms_per_token: float
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

    @classmethod
    def from_calibration(cls, data: Mapping[str, Any], **overrides: Any) -> CostModel:
        """Fit the model to a calibration file's contents (see the module docstring)."""
        prefill = [(float(p["new"]), float(p["cached"]), float(p["ms"])) for p in data["prefill"]]
        base = sorted((n, ms) for n, c, ms in prefill if c == 0 and n >= COMPUTE_BOUND_MIN_NEW)
        if len(base) < 2:
            raise ValueError("calibration: need >= 2 compute-bound prefill points, cached=0")
        knots = tuple(base)
        probe = cls(knots, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0)
        # k: least squares through the origin on the residual of the cached > 0 points
        cached_pts = [(n, c, ms) for n, c, ms in prefill if c > 0 and n >= COMPUTE_BOUND_MIN_NEW]
        if cached_pts:
            num = sum((ms - probe._compute_ms(n)) * n * c for n, c, ms in cached_pts)
            den = sum((n * c) ** 2 for n, c, _ in cached_pts)
            k = max(0.0, num / den)
        else:
            k = 0.0
        small = [(n, ms) for n, _, ms in prefill if n < COMPUTE_BOUND_MIN_NEW]
        f0, f1 = _lstsq([(1.0, n) for n, _ in small], [ms for _, ms in small])

        decode = [
            (float(d["batch"]), float(d["context"]), float(d["ms"]), float(d["floor_ms"]))
            for d in data["decode"]
        ]
        a, b, c = _lstsq([(1.0, bt, bt * ctx) for bt, ctx, _, _ in decode], [d[2] for d in decode])
        fl0, fl1 = _lstsq([(1.0, bt * ctx) for bt, ctx, _, _ in decode], [d[3] for d in decode])

        load_bytes = float(data["load_bytes"])
        # Model bytes: bf16 weights, 2 bytes per parameter ("params" in the file).
        model_bytes = 2.0 * float(data["params"])
        fields: dict[str, Any] = {
            "compute_knots": knots,
            "cached_ms_per_token2": k,
            "floor_ms0": f0,
            "floor_ms_per_token": f1,
            "decode_a_ms": a,
            "decode_b_ms": b,
            "decode_c_ms": c,
            "decode_floor0_ms": fl0,
            "decode_floor1_ms": fl1,
            "model_bytes": model_bytes,
            "load_cold_s_per_byte": float(data["load_cold_s"]) / load_bytes,
            "load_pagecache_s_per_byte": float(data["load_pagecache_s"]) / load_bytes,
        }
        fields.update(overrides)
        return cls(**fields)

    @classmethod
    def default(cls, **overrides: Any) -> CostModel:
        """The model fitted to the packaged H100 / Llama-3-8B measurement."""
        return cls.from_calibration(load_calibration(), **overrides)

    @classmethod
    def from_32b(cls, data: Mapping[str, Any], base: CostModel, **overrides: Any) -> CostModel:
        """The 32B shape (``llama32b_h100_costs.json``): prefill knots through its
        compute-bound rows and a launch-bound floor through its 512-token row and its batch-1
        decode step (a one-token prefill is a decode step); decode ``a + b * batch`` fitted
        to its rows after the KV term, which is the 8B's ``c`` times 2 (256 KiB of KV per
        token against 128: all its rows are at 2k context, so the fit cannot separate them);
        floor fitted to its ``floor_ms``; the 8B's cached-context attention term times 2.5
        (64 layers x 40 heads against 32 x 32); load rates the 8B's, 2 bytes per param."""
        prefill = [(float(p["new"]), float(p["ms"])) for p in data["prefill"]]
        knots = tuple(sorted((n, ms) for n, ms in prefill if n >= COMPUTE_BOUND_MIN_NEW))
        decode = [
            (float(d["batch"]), float(d["context"]), float(d["ms"]), float(d["floor_ms"]))
            for d in data["decode"]
        ]
        (n0, ms0) = min((n, ms) for n, ms in prefill if n < COMPUTE_BOUND_MIN_NEW)
        one = min(decode)[2]  # batch 1
        f1 = (ms0 - one) / (n0 - 1.0)
        c = 2.0 * base.decode_c_ms
        a, b = _lstsq(
            [(1.0, bt) for bt, _, _, _ in decode], [ms - c * bt * ctx for bt, ctx, ms, _ in decode]
        )
        fl0, fl1 = _lstsq([(1.0, bt * ctx) for bt, ctx, _, _ in decode], [d[3] for d in decode])
        fields: dict[str, Any] = {
            "compute_knots": knots,
            "cached_ms_per_token2": 2.5 * base.cached_ms_per_token2,
            "floor_ms0": one - f1,
            "floor_ms_per_token": f1,
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

    # --- prefill ------------------------------------------------------------------------
    @functools.cached_property
    def _knot_xs(self) -> tuple[float, ...]:
        # derived once per model (the router calls prefill_ms per endpoint per request)
        return tuple(x for x, _ in self.compute_knots)

    def _compute_ms(self, new: float) -> float:
        ks = self.compute_knots
        i = bisect.bisect_right(self._knot_xs, new) - 1
        i = min(max(i, 0), len(ks) - 2)  # first/last segment extrapolates linearly
        (x0, y0), (x1, y1) = ks[i], ks[i + 1]
        return y0 + (new - x0) * (y1 - y0) / (x1 - x0)

    def _prefill_raw_ms(self, new_total: float, attn_token2: float) -> float:
        floor = self.floor_ms0 + self.floor_ms_per_token * new_total
        compute = self._compute_ms(new_total) + self.cached_ms_per_token2 * attn_token2
        if self.weights == "fp8":
            floor *= self._levers.fp8_floor_ratio
            compute *= self._levers.fp8_prefill_ratio
        return max(floor, compute)

    def prefill_ms(self, new_tokens: int, cached_tokens: int = 0) -> float:
        """One request's prefill of ``new_tokens`` on top of ``cached_tokens`` (batch 1)."""
        if new_tokens <= 0:
            return 0.0
        return self.scale * self._prefill_raw_ms(new_tokens, new_tokens * cached_tokens)

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
        sequences whose contexts sum to ``decode_kv_tokens`` (formula in the module doc)."""
        new_total = 0
        attn = 0
        for new, cached in chunks:
            new_total += new
            attn += new * cached
        if new_total == 0:
            if not decodes:
                return 0.0
            return self.scale * self._per_token(self._decode_raw_ms(decodes, decode_kv_tokens))
        ms = self._prefill_raw_ms(new_total, attn)
        if decodes:
            ride = self.decode_b_ms * decodes + self._kv_ms(decode_kv_tokens)
            ms += self._per_token(ride + self._spec_extra_ms(decodes))
        return self.scale * ms

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
