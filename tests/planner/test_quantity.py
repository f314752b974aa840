"""Kubernetes quantities, exact."""

from __future__ import annotations

from fractions import Fraction

import pytest

from planner.quantity import Quantity, QuantityError, is_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("80Gi", 80 * 2**30),
        ("512Mi", 512 * 2**20),
        ("0.5Gi", 2**29),
        ("40G", 40 * 10**9),
        ("500m", Fraction(1, 2)),
        ("1e3", 1000),
        ("1E-3", Fraction(1, 1000)),
        ("100", 100),
        ("-1Ki", -1024),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
    ],
)
def test_parse(text: str, value: Fraction | int) -> None:
    assert Quantity.parse(text).value == value


@pytest.mark.parametrize("text", ["", "Gi", "80GB", "eighty", "1.2.3", "80 Gi"])
def test_not_a_quantity(text: str) -> None:
    assert not is_quantity(text)
    with pytest.raises(QuantityError):
        Quantity.parse(text)


def test_compare_and_convert() -> None:
    assert Quantity.parse("0.5Gi") == Quantity.parse("512Mi")
    assert Quantity.parse("80Gi") > Quantity.parse("40Gi")
    assert hash(Quantity.parse("1Ki")) == hash(Quantity.of(1024))
    assert Quantity.from_mib(81920) == Quantity.parse("80Gi")
    assert Quantity.parse("80Gi").mib() == 81920
    assert Quantity.of(Quantity.parse("1")) == Quantity.of("1")
    with pytest.raises(QuantityError):
        Quantity.of(True)
