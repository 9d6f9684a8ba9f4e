"""Traffic for the cluster in a box: OpenAI chat completions through the router's Service,
each answer kept whole (status, the worker that served it, the streamed text, how it
ended)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp

WORKER_HEADER = "X-Preheat-Worker"


@dataclass
class Answer:
    status: int
    worker: str = ""
    chunks: int = 0
    text: str = ""
    finish_reason: str | None = None
    done: bool = False  # the stream ended with data: [DONE]
    error: Any = None
    body: Any = field(default=None, repr=False)

    @property
    def complete(self) -> bool:
        """Streamed to its end: 200, [DONE], a finish reason and no error event."""
        return (
            self.status == 200 and self.done and self.finish_reason is not None and not self.error
        )


async def chat(
    session: aiohttp.ClientSession,
    base: str,
    model: str,
    *,
    max_tokens: int = 16,
    stream: bool = True,
    timeout_s: float = 60.0,
    session_id: str = "",
) -> Answer:
    """One chat completion; never raises for an HTTP or stream error (it is in the answer)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Say something about warm pools."}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    headers = {"x-session-id": session_id} if session_id else {}
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with session.post(
            f"{base}/v1/chat/completions", json=body, headers=headers, timeout=timeout
        ) as resp:
            answer = Answer(status=resp.status, worker=resp.headers.get(WORKER_HEADER, ""))
            if not stream or resp.status != 200:
                answer.body = await resp.json(content_type=None)
                if resp.status == 200:
                    choice = answer.body["choices"][0]
                    answer.text = choice["message"]["content"]
                    answer.finish_reason = choice.get("finish_reason")
                    answer.done = True
                return answer
            async for raw in resp.content:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line.removeprefix("data:").strip()
                if data == "[DONE]":
                    answer.done = True
                    break
                event = json.loads(data)
                if "error" in event:
                    answer.error = event["error"]
                    continue
                answer.chunks += 1
                for choice in event.get("choices") or []:
                    answer.text += (choice.get("delta") or {}).get("content") or ""
                    answer.finish_reason = choice.get("finish_reason") or answer.finish_reason
            return answer
    except (aiohttp.ClientError, TimeoutError) as e:
        return Answer(status=0, error=f"{type(e).__name__}: {e}")
