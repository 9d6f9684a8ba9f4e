"""One GPU's service costs as the autoscaler's capacity estimate reads them (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from preheat.core.piecewise import linear

__all__ = ["ServiceCost"]

# u(T): the linear layers' ms per prefill token when T chunk tokens share a step
# (piecewise-linear through these knots, constant outside them); the engine cost model's
# fit to the graph-replayed H100 files (docs/proposals/0012), rounded.
TOKEN_KNOTS: tuple[tuple[float, float], ...] = (
    (128.0, 0.01338),
    (256.0, 0.01449),
    (512.0, 0.01777),
    (1024.0, 0.01987),
    (2048.0, 0.02204),
    (4096.0, 0.02315),
    (8192.0, 0.02183),
)


@dataclass(frozen=True)
class ServiceCost:
    """One GPU's costs, in ms, as the engine's step is built (proposal 0012: a step is the
    decode step of its batch plus what its prefill chunks add). The defaults are the
    packaged H100 / Llama-3-8B calibration (``preheat.engine.costmodel.CostModel.default()``;
    a test keeps them within 10% of it):

    - decode step of ``B`` sequences of ``context`` tokens: ``a + b * B + c * B * context``;
    - what a prefill of ``n`` new tokens on ``cached`` ones adds to the step it rides in:
      ``n * u(n) + k * n * (cached + n / 2)``; alone in its step it also pays
      ``step_fixed_ms``.

    ``scale`` multiplies every time (the sim engine's ``time_scale``)."""

    step_fixed_ms: float = 6.54
    token_knots: tuple[tuple[float, float], ...] = TOKEN_KNOTS
    attn_ms_per_token2: float = 1.83e-6
    step_ms0: float = 7.74
    step_ms_per_seq: float = 0.00964
    step_ms_per_kv_token: float = 4.25e-5
    max_batch: int = 256  # running sequences (the engine's max_num_seqs, at most)
    kv_tokens: float = 400_000.0  # KV cache (tokens) of one GPU
    scale: float = 1.0

    def __post_init__(self) -> None:
        xs = [x for x, _ in self.token_knots]
        if not xs or xs != sorted(xs) or any(y <= 0 for _, y in self.token_knots):
            raise ValueError("token_knots must be non-empty, by rising tokens, with ms > 0")

    def token_ms(self, tokens: float) -> float:
        """u(T): ms per prefill token (before ``scale``)."""
        return linear(self.token_knots, tokens)

    def added_ms(self, new_tokens: float, cached_tokens: float = 0.0) -> float:
        """What prefilling ``new_tokens`` on ``cached_tokens`` adds to a step."""
        if new_tokens <= 0:
            return 0.0
        attn = self.attn_ms_per_token2 * new_tokens * (cached_tokens + new_tokens / 2.0)
        return self.scale * (new_tokens * self.token_ms(new_tokens) + attn)

    def prefill_ms(self, new_tokens: float, cached_tokens: float = 0.0) -> float:
        """A prefill alone in its step (the router's predicted prefill)."""
        if new_tokens <= 0:
            return 0.0
        return self.scale * self.step_fixed_ms + self.added_ms(new_tokens, cached_tokens)

    def token_step_ms(self, context: float) -> float:
        """What one more decoding sequence of ``context`` tokens adds to a step."""
        return self.scale * (self.step_ms_per_seq + self.step_ms_per_kv_token * context)

    def step_ms(self, batch: float, context: float) -> float:
        """One decode step of ``batch`` sequences of ``context`` tokens each."""
        if batch <= 0:
            return 0.0
        return self.scale * self.step_ms0 + batch * self.token_step_ms(context)
