"""OpenAI's finish reasons, and the guard that keeps every other one from a client.

OpenAI's clients know ``stop``, ``length``, ``tool_calls`` and ``content_filter``. vLLM's
OpenAI layer also ends a request with ``"abort"`` (the engine aborted it: a draining worker's
grace ran out) and can say ``"error"`` or ``"repetition"``; the router's gRPC path has
``FINISH_REASON_ABORT``. Such an ending is an error for the client (an error event, or an
error status when nothing was sent), as vLLM's server ends a failed stream, never a
``finish_reason`` it does not know.

:func:`foreign_finish` finds one in bytes as vLLM writes them (SSE events or a JSON body),
without parsing the JSON: the passthrough forwards events whole and looks only for this.
"""

from __future__ import annotations

OPENAI_FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter"})

_KEY = b'"finish_reason":'


def foreign_finish(data: bytes) -> tuple[int, str] | None:
    """The first ``finish_reason`` string in ``data`` that is not OpenAI's, with the offset
    of the SSE event that carries it (0 for a JSON body or the first event); None when there
    is none (``null`` is no finish)."""
    i = data.find(_KEY)
    while i >= 0:
        j = i + len(_KEY)
        while data[j : j + 1] in (b" ", b"\t", b"\n"):
            j += 1
        if data[j : j + 1] == b'"':
            end = data.find(b'"', j + 1)
            value = data[j + 1 : end if end >= 0 else len(data)].decode("utf-8", "replace")
            if value not in OPENAI_FINISH_REASONS:
                start = data.rfind(b"\n\n", 0, i)
                return (0 if start < 0 else start + 2), value
        i = data.find(_KEY, j)
    return None


def aborted_message(value: str) -> str:
    return (
        f"the worker ended the request with finish_reason {value!r}, which is not OpenAI's "
        "(it was aborted: draining or failing)"
    )
