"""How bursty a pool's arrivals are, as two counters any scraper can difference.

Arrivals are counted in bins of ``bin_s`` seconds (1 s); :class:`ArrivalBins` keeps the
running sum of the squared differences of consecutive bins' counts, ``sum (N_t -
N_{t-1})^2`` (the routers export it as ``preheat_router_arrival_burst_total``, beside
``preheat_router_arrivals_total``). Over any window, the increase of the two gives the
arrivals' index of dispersion (:func:`dispersion`)::

    D = increase(burst) / (2 * increase(arrivals))

which is 1 for Poisson arrivals at any rate, ``E[X^2] / E[X]`` for batches of size ``X``
arriving at one instant (``2 m - 1`` for geometric batches of mean ``m``), and is not
moved by a rate that rises or falls slowly over the window (the differences of
consecutive bins cancel a trend; a plain variance of the counts would count the trend as
burstiness). The autoscaler's capacity estimate reads it (``capacity.burst_size``).

A bin is closed when a later arrival comes or when the counters are read (:meth:`flush`,
with the reader's ``now``): the bins no arrival fell in count as zeros, so a burst's rise
and its fall are both counted. Pure: ``now`` comes in (any monotonic clock).
"""

from __future__ import annotations

import math

__all__ = ["BIN_S", "ArrivalBins", "dispersion"]

#: Seconds per bin.
BIN_S = 1.0


class ArrivalBins:
    """Arrivals per bin, and the running sum of the squared differences of consecutive
    bins' counts (:attr:`burst`), closed up to ``now`` by :meth:`observe` and
    :meth:`flush`."""

    def __init__(self, bin_s: float = BIN_S) -> None:
        if not bin_s > 0:
            raise ValueError(f"bin_s must be > 0, got {bin_s}")
        self.bin_s = bin_s
        self.burst = 0.0  # sum over closed bins of (count - previous count)^2
        self._bin: int | None = None  # the open bin's index; None before the first arrival
        self._count = 0  # arrivals in the open bin
        self._previous = 0  # the count of the bin before it

    def observe(self, now: float, n: int = 1) -> None:
        """``n`` arrivals at ``now`` (an arrival earlier than the open bin counts in it)."""
        self.flush(now)
        if self._bin is None:
            self._bin = self._index(now)
        self._count += n

    def flush(self, now: float) -> float:
        """Closes every bin that ended by ``now``; the running sum (:attr:`burst`)."""
        if self._bin is None:
            return self.burst
        current = self._index(now)
        if current <= self._bin:
            return self.burst
        self.burst += float((self._count - self._previous) ** 2)
        if current > self._bin + 1:  # the empty bins after it: one fall to zero
            self.burst += float(self._count**2)
            self._previous = 0
        else:
            self._previous = self._count
        self._bin, self._count = current, 0
        return self.burst

    def _index(self, now: float) -> int:
        return math.floor(now / self.bin_s)


def dispersion(burst_increase: float, arrivals_increase: float) -> float | None:
    """The index of dispersion over a window from the two counters' increases over it
    (None: no arrivals, nothing to say)."""
    if arrivals_increase <= 0 or burst_increase < 0:
        return None
    return burst_increase / (2.0 * arrivals_increase)
