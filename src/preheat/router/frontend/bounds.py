"""Bounds on the wire fields of a ``GenerateRequest`` that ``preheat.core.validation`` does
not look at, checked where a request enters the router (gRPC Generate, Pick and the HTTP
API alike, in :meth:`Dispatcher.prepare`).

The proto's own types bound the integers (``max_tokens`` and ``ttft_deadline_ms`` are
uint32, ``seed`` uint64); what is left: ``priority`` (proto3 enums are open, so any int
arrives), ``coalesce`` (its bounds), and the lengths of the free-form strings, which end up
in logs and labels. Every problem is reported at once, naming the field and what it accepts.
"""

from __future__ import annotations

import math

from preheat.core.errors import ErrorCode, PreheatError
from preheat.proto.preheat.v1 import inference_pb2
from preheat.wire.coalesce import MAX_COALESCE_DELAY_S, MAX_COALESCE_TOKENS

MAX_ID_CHARS = 1024  # request_id, session_id (an OpenAI body's user), slo_class, model

_PRIORITIES = {
    int(v.number): v.name for v in inference_pb2.DESCRIPTOR.enum_types_by_name["Priority"].values
}


def request_problems(req: inference_pb2.GenerateRequest) -> list[str]:
    """Every out-of-range wire field of ``req``, as sentences; empty when all are fine."""
    problems: list[str] = []
    if int(req.priority) not in _PRIORITIES:
        allowed = ", ".join(f"{n} ({name})" for n, name in sorted(_PRIORITIES.items()))
        problems.append(f"priority must be one of {allowed}, got {int(req.priority)}")
    if req.HasField("coalesce"):
        c = req.coalesce
        if c.max_tokens > MAX_COALESCE_TOKENS:
            problems.append(
                f"coalesce.max_tokens must be in [0, {MAX_COALESCE_TOKENS}], got {c.max_tokens}"
            )
        limit_ms = MAX_COALESCE_DELAY_S * 1e3
        if not (math.isfinite(c.max_delay_ms) and 0 <= c.max_delay_ms <= limit_ms):
            problems.append(
                f"coalesce.max_delay_ms must be a number in [0, {limit_ms:g}], "
                f"got {c.max_delay_ms:g}"
            )
    for name in ("request_id", "session_id", "slo_class", "model"):
        n = len(getattr(req, name))
        if n > MAX_ID_CHARS:
            problems.append(f"{name} must be at most {MAX_ID_CHARS} characters, got {n}")
    return problems


def check_request(req: inference_pb2.GenerateRequest) -> None:
    """Raises ``PreheatError(INVALID_ARGUMENT)`` listing every problem, if there is any."""
    problems = request_problems(req)
    if problems:
        raise PreheatError(ErrorCode.INVALID_ARGUMENT, "invalid request: " + "; ".join(problems))
