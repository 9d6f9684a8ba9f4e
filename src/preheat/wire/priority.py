"""The wire's ``Priority`` enum and the engine's priority value (lower first, vLLM's
convention): the one mapping the router (routing, class priorities) and the worker (what it
asks the engine) share."""

from __future__ import annotations

from preheat.proto.preheat.v1 import inference_pb2

STANDARD = 1  # the engine priority of a request that names none (PRIORITY_UNSPECIFIED)

# wire Priority -> engine priority
ENGINE_PRIORITY: dict[int, int] = {
    inference_pb2.PRIORITY_INTERACTIVE: 0,
    inference_pb2.PRIORITY_UNSPECIFIED: STANDARD,
    inference_pb2.PRIORITY_STANDARD: STANDARD,
    inference_pb2.PRIORITY_BATCH: 2,
}

# a class's priority (engine value) -> the wire's Priority, which the worker maps back
WIRE_PRIORITY: dict[int, inference_pb2.Priority] = {
    0: inference_pb2.PRIORITY_INTERACTIVE,
    1: inference_pb2.PRIORITY_STANDARD,
    2: inference_pb2.PRIORITY_BATCH,
}


def engine_priority(wire: int) -> int:
    """The engine priority of a wire ``Priority`` (an unknown value: standard)."""
    return ENGINE_PRIORITY.get(int(wire), STANDARD)
