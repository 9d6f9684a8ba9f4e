"""Workload helpers for simulations: more traffic from one trace, by superposition."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from preheat.workload.traces import TraceRequest, check_trace_size


def superpose(trace: Sequence[TraceRequest], copies: int) -> list[TraceRequest]:
    """``copies`` copies of ``trace`` over the same span: ``copies`` times the rate.

    Copy ``k`` is shifted by ``k * span / copies`` and wrapped around the span, so the load
    stays spread like the original's. Each copy is a different population of users: its
    prefix block ids and session ids are its own (no cache hits across copies), the
    request lengths are the original's.
    """
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    if copies == 1 or not trace:
        return list(trace)
    check_trace_size(len(trace) * copies, f"{copies:,} copies of {len(trace):,} requests")
    span = max(t.arrival_s for t in trace) + 1e-3
    id_range = 1 + max((max(t.prefix_block_ids, default=0) for t in trace), default=0)
    out: list[TraceRequest] = []
    for k in range(copies):
        shift = k * span / copies
        for t in trace:
            out.append(
                replace(
                    t,
                    arrival_s=(t.arrival_s + shift) % span,
                    prefix_block_ids=tuple(b + k * id_range for b in t.prefix_block_ids),
                    session_id=f"{t.session_id}~{k}" if t.session_id and k else t.session_id,
                )
            )
    out.sort(key=lambda t: (t.arrival_s, t.index))
    return [replace(t, index=i) for i, t in enumerate(out)]
