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
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

# Where the packaged copy of the measurement lives (a copy of
# /work/shared/calibration/llama8b_h100_costs.json, measured 2026-11-22 on one H100).
PACKAGED_CALIBRATION = "llama8b_h100_costs.json"

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


def load_calibration(path: str | Path | None = None) -> dict[str, Any]:
    """The calibration JSON at ``path``, or the packaged copy when ``path`` is None."""
    if path is None:
        text = (
            resources.files("preheat.engine")
            .joinpath("calibration", PACKAGED_CALIBRATION)
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
        return max(floor, compute)

    def prefill_ms(self, new_tokens: int, cached_tokens: int = 0) -> float:
        """One request's prefill of ``new_tokens`` on top of ``cached_tokens`` (batch 1)."""
        if new_tokens <= 0:
            return 0.0
        return self.scale * self._prefill_raw_ms(new_tokens, new_tokens * cached_tokens)

    # --- decode -------------------------------------------------------------------------
    def _decode_raw_ms(self, batch: float, kv_tokens: float) -> float:
        floor = self.decode_floor0_ms + self.decode_floor1_ms * kv_tokens
        fit = self.decode_a_ms + self.decode_b_ms * batch + self.decode_c_ms * kv_tokens
        return max(floor, fit)

    def decode_step_ms(self, batch: int, context: int) -> float:
        """One decode step of ``batch`` sequences of ``context`` tokens each."""
        if batch <= 0:
            return 0.0
        return self.scale * self._decode_raw_ms(batch, batch * context)

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
            return self.scale * self._decode_raw_ms(decodes, decode_kv_tokens) if decodes else 0.0
        ms = self._prefill_raw_ms(new_total, attn)
        if decodes:
            ms += self.decode_b_ms * decodes + self.decode_c_ms * decode_kv_tokens
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
