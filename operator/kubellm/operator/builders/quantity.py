"""Kubernetes resource quantities ("8Gi", "500M", "1.5Ti", 4) as bytes, and back.

Only what the builders add up (memory and storage sizes): binary and decimal suffixes
and plain numbers. The `kubernetes` client has a parser, but that package (the sync
client, ~30 MB installed) would come in for these twenty lines.
"""
from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

GI = 1024 ** 3
MI = 1024 ** 2
_SUFFIXES = {"": 1, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15,
             "E": 10 ** 18, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40,
             "Pi": 2 ** 50, "Ei": 2 ** 60, "m": Decimal("0.001")}
_QUANTITY = re.compile(r"^([+]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


class QuantityError(ValueError):
    """Not a quantity the API server would accept for a size."""


def to_bytes(value: int | float | str, field: str) -> int:
    """``value`` in bytes (rounded up); QuantityError naming ``field`` when malformed."""
    if isinstance(value, bool):
        raise QuantityError(f"{field}: {value!r} is not a quantity")
    if isinstance(value, (int, float)):
        number, suffix = Decimal(str(value)), ""
    else:
        match = _QUANTITY.match(str(value).strip())
        if not match or match[2] not in _SUFFIXES:
            raise QuantityError(f"{field}: {value!r} is not a quantity (e.g. 8Gi, 500Mi)")
        try:
            number, suffix = Decimal(match[1]), match[2]
        except InvalidOperation:
            raise QuantityError(f"{field}: {value!r} is not a quantity") from None
    return math.ceil(number * Decimal(_SUFFIXES[suffix]))


def format_bytes(size: int) -> str:
    """The shortest exact binary spelling: 8Gi, 1536Mi, or bytes."""
    for suffix, unit in (("Ti", 2 ** 40), ("Gi", GI), ("Mi", MI), ("Ki", 1024)):
        if size % unit == 0 and size >= unit:
            return f"{size // unit}{suffix}"
    return str(size)


def round_up_gib(size: float) -> int:
    """``size`` bytes rounded up to a whole GiB, in bytes."""
    return math.ceil(size / GI) * GI
