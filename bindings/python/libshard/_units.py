"""Parsing of byte sizes given as ints or strings such as ``"512MiB"`` or ``"2G"``."""

from __future__ import annotations

import re
from typing import Union

_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kib": 1 << 10, "kb": 1000,
    "m": 1 << 20, "mib": 1 << 20, "mb": 1000**2,
    "g": 1 << 30, "gib": 1 << 30, "gb": 1000**3,
    "t": 1 << 40, "tib": 1 << 40, "tb": 1000**4,
}


def parse_bytes(value: Union[int, str], what: str) -> int:
    """Bytes from an int or a string like the command line accepts ("4GiB", "512M", "64MB")."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a byte count (int or a string like '2GiB'), got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"{what} must be at least 1 byte, got {value}")
        return value
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", value)
        if m and m.group(2).lower() in _UNITS:
            n = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
            if n >= 1:
                return n
    raise ValueError(f"{what} must be a byte count such as 2147483648, '2GiB', '512M' or '64MB', "
                     f"got {value!r}")
