"""One GPU's service costs as the autoscaler's capacity estimate reads them (pure)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ServiceCost"]


@dataclass(frozen=True)
class ServiceCost:
    """One GPU's costs, in ms. The defaults are a fit of the packaged H100 / Llama-3-8B
    calibration (``preheat.engine.costmodel.CostModel.default()``; a test keeps them
    within 10% of it): prefill ``max(p0 + p1 * n, q0 + q1 * n)`` for ``n`` new tokens,
    decode step ``a + b * batch + c * kv_tokens``. ``scale`` multiplies every time (the sim
    engine's ``time_scale``)."""

    prefill_ms0: float = 6.1
    prefill_ms_per_token: float = 0.0178
    prefill_compute_ms0: float = -4.08
    prefill_compute_ms_per_token: float = 0.0306
    step_ms0: float = 7.74
    step_ms_per_seq: float = 0.00964
    step_ms_per_kv_token: float = 4.25e-5
    max_batch: int = 256  # running sequences (the engine's max_num_seqs, at most)
    kv_tokens: float = 400_000.0  # KV cache (tokens) of one GPU
    scale: float = 1.0

    def prefill_ms(self, new_tokens: float) -> float:
        if new_tokens <= 0:
            return 0.0
        floor = self.prefill_ms0 + self.prefill_ms_per_token * new_tokens
        compute = self.prefill_compute_ms0 + self.prefill_compute_ms_per_token * new_tokens
        return self.scale * max(floor, compute)

    def step_ms(self, batch: float, context: float) -> float:
        """One decode step of ``batch`` sequences of ``context`` tokens each."""
        if batch <= 0:
            return 0.0
        return self.scale * self.step_ms0 + self.ride_ms(batch, context)

    def ride_ms(self, batch: float, context: float) -> float:
        """What ``batch`` decodes of ``context`` tokens add to a step that also prefills."""
        if batch <= 0:
            return 0.0
        kv = batch * context
        return self.scale * (self.step_ms_per_seq * batch + self.step_ms_per_kv_token * kv)
