"""The response cache on the OpenAI passthrough: which bodies may be answered from it, the
parameters their key covers, and the answer a finished vLLM response stores.

The passthrough forwards every vLLM parameter, so only what the cache can give back
exactly is cacheable: a deterministic request (``temperature`` 0 or a ``seed``; one
choice) asking for no logprobs, no echo and no tools, with one prompt; and only a whole
(non-streamed) answer of one choice that ended ``stop`` or ``length`` with plain text (no
tool calls, no reasoning) and its usage is stored. A stored answer serves a later request
streamed or not (``http.py`` shapes it, as for the HTTP path's own hits). The key covers
the whole body but what does not change the answer (delivery, routing, accounting, and
the fields the router itself sets: ``priority``, ``cache_salt``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from preheat.core.traffic import respcache
from preheat.proto.preheat.v1 import inference_pb2

# body fields that change nothing in the answer, or that the router sets itself
NOT_IN_KEY = respcache.NOT_IN_KEY | {
    "model",  # keyed by the pool's model
    "request_id",
    "priority",  # the class's, set by the router
    "cache_salt",  # the tenant's, set by the router (the key has the tenant)
}
# what asks for more than text: such a request is never answered from the cache
UNCACHEABLE = (
    "tools",
    "functions",
    "logprobs",
    "top_logprobs",
    "prompt_logprobs",
    "echo",
    "best_of",
    "return_tokens_as_token_ids",
    "return_token_ids",
)
_FINISH = {
    "stop": inference_pb2.FINISH_REASON_STOP,
    "length": inference_pb2.FINISH_REASON_LENGTH,
}


@dataclass(frozen=True)
class StoredAnswer:
    text: str
    finish_reason: int  # the wire's FinishReason
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class StreamWants:
    """What a streamed hit reads of the request: whether the usage chunk is wanted."""

    include_usage: bool


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def cache_params(data: Mapping[str, Any], chat: bool) -> dict[str, Any] | None:
    """The parameters a cacheable passthrough body is keyed by; None: not cacheable."""
    t, seed, n = data.get("temperature"), data.get("seed"), data.get("n")
    if (t is not None and not _number(t)) or (seed is not None and not _number(seed)):
        return None
    if n is not None and not _number(n):
        return None
    if not respcache.deterministic(
        None if t is None else float(t),
        None if seed is None else int(seed),
        None if n is None else int(n),
    ):
        return None
    if any(data.get(k) for k in UNCACHEABLE):
        return None
    if not chat:
        prompt = data.get("prompt")
        one_ids = isinstance(prompt, list) and all(_number(x) for x in prompt)
        if not isinstance(prompt, str) and not one_ids:
            return None  # several prompts: several choices
    return {k: v for k, v in data.items() if k not in NOT_IN_KEY}


def stream_wants(data: Mapping[str, Any]) -> StreamWants:
    opts = data.get("stream_options")
    return StreamWants(isinstance(opts, Mapping) and bool(opts.get("include_usage")))


def stored_answer(raw: bytes, chat: bool) -> StoredAnswer | None:
    """What a whole vLLM answer (JSON) stores; None: nothing the cache can give back."""
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    choices, usage = obj.get("choices"), obj.get("usage")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(usage, dict):
        return None
    c = choices[0]
    if not isinstance(c, dict) or c.get("logprobs"):
        return None
    finish = _FINISH.get(str(c.get("finish_reason")))
    if finish is None:
        return None
    if chat:
        msg = c.get("message")
        if not isinstance(msg, dict) or any(
            msg.get(k) for k in ("tool_calls", "reasoning", "reasoning_content")
        ):
            return None
        text = msg.get("content")
    else:
        text = c.get("text")
    pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not isinstance(text, str) or not isinstance(pt, int) or not isinstance(ct, int):
        return None
    return StoredAnswer(text, finish, pt, ct)
