import pytest

from preheat.core.errors import ErrorCode, PreheatError, http_status


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (ErrorCode.INVALID_ARGUMENT, 400),
        (ErrorCode.RESOURCE_EXHAUSTED, 429),
        (ErrorCode.UNAVAILABLE, 503),
        (ErrorCode.DEADLINE_EXCEEDED, 504),
    ],
)
def test_http_status(code: ErrorCode, status: int):
    assert http_status(code) == status


def test_every_code_has_an_http_status():
    for code in ErrorCode:
        assert 400 <= http_status(code) < 600


def test_error_carries_code_and_message():
    err = PreheatError(ErrorCode.RESOURCE_EXHAUSTED, "engine full", retry_after_s=1.5)
    assert (err.code, err.message, err.retry_after_s, str(err)) == (
        ErrorCode.RESOURCE_EXHAUSTED,
        "engine full",
        1.5,
        "engine full",
    )
