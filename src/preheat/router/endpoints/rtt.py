"""Round-trip time to an endpoint: an EWMA of health pings and of time-to-first-byte minus
server time, unless a fixed value was injected (tests, benchmarks)."""

from __future__ import annotations


class Ewma:
    """Exponentially weighted moving average; the first sample seeds it."""

    def __init__(self, alpha: float) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self.value: float | None = None

    def update(self, sample: float) -> float:
        self.value = (
            sample if self.value is None else self.value + self.alpha * (sample - self.value)
        )
        return self.value


class RttEstimator:
    """``value_ms``: the injected RTT if any, else the EWMA of samples (None: no sample yet)."""

    def __init__(self, alpha: float) -> None:
        self._ewma = Ewma(alpha)
        self.injected_ms: float | None = None

    def sample(self, rtt_ms: float) -> None:
        self._ewma.update(max(0.0, rtt_ms))

    def inject(self, rtt_ms: float | None) -> None:
        if rtt_ms is not None and rtt_ms < 0:
            raise ValueError(f"rtt_ms must be >= 0, got {rtt_ms}")
        self.injected_ms = rtt_ms

    @property
    def measured_ms(self) -> float | None:
        return self._ewma.value

    @property
    def value_ms(self) -> float | None:
        return self.injected_ms if self.injected_ms is not None else self._ewma.value
