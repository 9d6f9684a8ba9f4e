"""Structured logs: ``key=value`` lines or JSON objects, with context on every line.

Usage::

    setup_logging("json", worker_id="w-1")
    log = logging.getLogger(__name__)
    with request_context("abc123"):
        log.info("request_done", extra=fields(tokens=12, outcome="ok"))

Every line carries ``ts``, ``level``, ``logger``, ``event`` (the message), the process-wide
context set by :func:`setup_logging` (e.g. ``worker_id``), the current request id (a
``contextvars`` variable, so concurrent asyncio tasks each see their own) and the record's
``fields``.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import logging
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any, Literal, TextIO

LogFormat = Literal["kv", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("kv", "json")

_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "preheat_request_id", default=None
)
_FIELDS_ATTR = "preheat_fields"


def fields(**kv: Any) -> dict[str, Any]:
    """``extra=`` for a log call: structured fields printed after the event."""
    return {_FIELDS_ATTR: kv}


@contextlib.contextmanager
def request_context(request_id: str) -> Iterator[None]:
    """Within this block (this task and tasks it starts), log lines carry ``request_id``."""
    token = _request_id.set(request_id)
    try:
        yield
    finally:
        # an async generator closed from another context (a finalizer task) set the
        # variable in a context that is not this one: nothing to restore here
        with contextlib.suppress(ValueError):
            _request_id.reset(token)


def pseudonym(value: str) -> str | None:
    """A short stable hash of ``value`` (a session id, an OpenAI ``user``: often an e-mail
    address) for logs, which must not carry it; None for "". Lines of the same session share
    it, so they can still be followed."""
    if not value:
        return None
    return hashlib.blake2b(b"preheat-session\0" + value.encode(), digest_size=6).hexdigest()


def current_request_id() -> str | None:
    return _request_id.get()


class _Formatter(logging.Formatter):
    def __init__(self, fmt: LogFormat, static: Mapping[str, Any]) -> None:
        super().__init__()
        self._fmt_kind = fmt
        self._static = dict(static)

    def _record_fields(self, record: logging.LogRecord) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        out.update(self._static)
        rid = _request_id.get()
        if rid is not None:
            out["request_id"] = rid
        extra = getattr(record, _FIELDS_ATTR, None)
        if isinstance(extra, Mapping):
            out.update(extra)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return out

    def format(self, record: logging.LogRecord) -> str:
        data = self._record_fields(record)
        if self._fmt_kind == "json":
            return json.dumps(data, default=str, separators=(",", ":"))
        return " ".join(f"{k}={_kv_value(v)}" for k, v in data.items())


def _kv_value(v: Any) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    if s == "" or any(c in s for c in ' ="\n\t'):
        return json.dumps(s)
    return s


def setup_logging(
    fmt: LogFormat = "kv",
    *,
    level: int | str = logging.INFO,
    stream: TextIO | None = None,
    **static: Any,
) -> logging.Handler:
    """Configures the root logger to write structured lines to ``stream`` (stderr).

    ``static`` fields (``worker_id=...``, ``pool=...``) go on every line. Returns the handler
    (replacing any handler a previous call installed).
    """
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_preheat", False):
            root.removeHandler(h)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(_Formatter(fmt, static))
    handler._preheat = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    return handler
