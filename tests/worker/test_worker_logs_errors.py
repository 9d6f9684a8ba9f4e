"""Structured logs and the PreheatError -> gRPC status mapping."""

from __future__ import annotations

import contextvars
import io
import json
import logging

import grpc
import pytest

from preheat.core.errors import ErrorCode
from preheat.process.logs import current_request_id, fields, request_context, setup_logging
from preheat.wire.errors import error_code, grpc_status


@pytest.fixture
def restore_logging() -> object:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield None
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("restore_logging")
def test_json_lines_carry_worker_and_request_id() -> None:
    buf = io.StringIO()
    setup_logging("json", stream=buf, worker_id="w-7")
    log = logging.getLogger("preheat.test")
    with request_context("req-1"):
        log.info("request_done", extra=fields(tokens=3))
    log.info("outside")
    first, second = (json.loads(line) for line in buf.getvalue().splitlines())
    assert first["event"] == "request_done"
    assert first["worker_id"] == "w-7"
    assert first["request_id"] == "req-1"
    assert first["tokens"] == 3
    assert second["worker_id"] == "w-7"
    assert "request_id" not in second


@pytest.mark.usefixtures("restore_logging")
def test_kv_lines_quote_values_with_spaces() -> None:
    buf = io.StringIO()
    setup_logging("kv", stream=buf, worker_id="w-7")
    with request_context("r2"):
        logging.getLogger("x").warning("drain", extra=fields(reason="grace over", n=2))
    line = buf.getvalue().strip()
    assert "level=warning" in line
    assert "event=drain" in line
    assert "worker_id=w-7" in line
    assert "request_id=r2" in line
    assert 'reason="grace over"' in line
    assert "n=2" in line


def test_a_request_context_left_from_another_context_does_not_raise() -> None:
    # an async generator holding it may be closed by a finalizer task in another context
    def scenario() -> None:
        held = request_context("r-3")
        held.__enter__()
        assert current_request_id() == "r-3"
        contextvars.Context().run(held.__exit__, None, None, None)  # must not raise

    contextvars.copy_context().run(scenario)  # nothing leaks into this test's context
    assert current_request_id() is None


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="log format"):
        setup_logging("xml")  # type: ignore[arg-type]


@pytest.mark.parametrize("code", list(ErrorCode))
def test_every_code_maps_to_grpc_and_back(code: ErrorCode) -> None:
    status = grpc_status(code)
    assert isinstance(status, grpc.StatusCode)
    assert error_code(status) is code


def test_unmapped_grpc_status_is_internal() -> None:
    assert error_code(grpc.StatusCode.DATA_LOSS) is ErrorCode.INTERNAL
