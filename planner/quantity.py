"""Kubernetes resource quantities ("80Gi", "40G", "500m", "1e3") as exact numbers.

DRA publishes device capacity as quantities, and DeviceClass selectors compare them with the
Kubernetes CEL quantity library (``quantity("40Gi")``, ``.compareTo()``, ``.isGreaterThan()``…).
Fractions keep the comparisons exact: "0.5Gi" and "512Mi" are equal, as the API server says.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import total_ordering

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exp>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE]?))$"
)

MIB = 2**20
GIB = 2**30


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity."""


@total_ordering
class Quantity:
    """An exact quantity; compares and hashes by value."""

    __slots__ = ("text", "value")

    def __init__(self, value: Fraction | int, text: str | None = None) -> None:
        self.value = Fraction(value)
        self.text = text if text is not None else str(self.value)

    @classmethod
    def parse(cls, text: str) -> Quantity:
        match = _QUANTITY.match(text.strip())
        if not match:
            raise QuantityError(f"{text!r} is not a quantity (e.g. 80Gi, 40G, 500m)")
        number = Fraction(match["number"])
        if match["binary"]:
            number *= _BINARY[match["binary"]]
        elif match["exp"] is not None:
            number *= Fraction(10) ** int(match["exp"])
        else:
            number *= _DECIMAL[match["decimal"] or ""]
        if match["sign"] == "-":
            number = -number
        return cls(number, text.strip())

    @classmethod
    def of(cls, raw: str | int | float | Quantity) -> Quantity:
        if isinstance(raw, Quantity):
            return raw
        if isinstance(raw, bool):
            raise QuantityError("a boolean is not a quantity")
        if isinstance(raw, int | float):
            return cls(Fraction(raw))
        return cls.parse(raw)

    @classmethod
    def from_mib(cls, mib: int) -> Quantity:
        return cls(mib * MIB, f"{mib}Mi")

    def mib(self) -> int:
        """Whole MiB, rounded down (a device never has more memory than it publishes)."""
        return int(self.value // MIB)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Quantity({self.text!r})"


def is_quantity(text: str) -> bool:
    try:
        Quantity.parse(text)
    except QuantityError:
        return False
    return True
