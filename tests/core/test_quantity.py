from decimal import Decimal

import pytest

from preheat.core.quantity import QuantityError, parse_quantity, same_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("0.5", Decimal("0.5")),
        ("2", Decimal(2)),
        (2, Decimal(2)),
        ("1Gi", Decimal(1024**3)),
        ("1024Mi", Decimal(1024**3)),
        ("1k", Decimal(1000)),
        ("1e3", Decimal(1000)),
        ("1E-3", Decimal("0.001")),
        ("100n", Decimal("0.0000001")),
        ("+.5", Decimal("0.5")),
        ("-1M", Decimal(-1_000_000)),
    ],
)
def test_parse_quantity(text: str | int, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1 Gi", "1gi", "1KiB", "1.2.3", "--1", "1Ki2"])
def test_not_a_quantity_is_an_error_that_quotes_it(text: str) -> None:
    with pytest.raises(QuantityError, match=repr(text).replace(".", r"\.")):
        parse_quantity(text)


def test_same_quantity() -> None:
    assert same_quantity("0.5", "500m")
    assert same_quantity("1Gi", "1024Mi")
    assert not same_quantity("1G", "1Gi")
    assert not same_quantity("x", "x")
    assert not same_quantity(True, "1")
    assert not same_quantity(None, "1")
