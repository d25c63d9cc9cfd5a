"""Byte sizes given as ints or strings such as ``"512MiB"``, ``"2G"`` or ``"64MB"``.

Strings are parsed by the C++ library (``libshard_support/units.h``), the same parser as the command
line's, so both accept the same spellings with the same meaning.
"""

from __future__ import annotations

from typing import Union

from . import _core
from ._core import InvalidArgumentError


def parse_bytes(value: Union[int, str], what: str) -> int:
    """Bytes from an int or a string like the command line accepts ("4GiB", "512M", "64MB").

    Raises ``InvalidArgumentError`` (a ``ValueError``) naming ``what`` for anything else.
    """
    if isinstance(value, bool):
        raise InvalidArgumentError(
            f"{what} must be a byte count (int or a string like '2GiB'), got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise InvalidArgumentError(f"{what} must be at least 1 byte, got {value}")
        return value
    if isinstance(value, str):
        try:
            return _core.parse_byte_size(value)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{what}: {e}") from None
    raise InvalidArgumentError(
        f"{what} must be a byte count (int or a string like '2GiB'), got {value!r}")
