"""Byte sizes in Python options are parsed by the library's one parser (libshard_support/units.h)."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import pytest

import libshard
from libshard._units import parse_bytes

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40


def test_ints_pass_through():
    assert parse_bytes(1, "x") == 1
    assert parse_bytes(4096, "x") == 4096
    assert parse_bytes(3 * GiB + 7, "x") == 3 * GiB + 7


@pytest.mark.parametrize("text,want", [
    ("4096", 4096), ("4096B", 4096),
    ("512K", 512 * KiB), ("512M", 512 * MiB), ("4G", 4 * GiB), ("2T", 2 * TiB),
    ("64KiB", 64 * KiB), ("64MiB", 64 * MiB), ("4GiB", 4 * GiB), ("1TiB", TiB),
    ("64Ki", 64 * KiB), ("64Mi", 64 * MiB), ("4Gi", 4 * GiB), ("1Ti", TiB),
    ("1KB", 1000), ("100MB", 100 * 1000**2), ("2GB", 2 * 1000**3), ("3TB", 3 * 1000**4),
    ("512m", 512 * MiB), ("4gib", 4 * GiB), ("2gb", 2 * 1000**3), (" 4 GiB ", 4 * GiB),
    ("1.5G", 3 * GiB // 2), ("0.5K", 512),
])
def test_strings_as_the_command_line_reads_them(text, want):
    assert parse_bytes(text, "x") == want
    assert libshard._core.parse_byte_size(text) == want


@pytest.mark.parametrize("value", [
    "", "G", "12X", "4 G i B", "0", "0.1", "-5", "1..5G", "4PiB", "99999999999999999999", "1e3",
    0, -1, True, 1.5, None, b"4GiB",
])
def test_bad_input_names_the_option(value):
    with pytest.raises(libshard.InvalidArgumentError, match="memory_budget") as info:
        parse_bytes(value, "memory_budget")
    assert isinstance(info.value, ValueError)


def test_bad_strings_quote_the_value():
    with pytest.raises(libshard.InvalidArgumentError, match=r"read_size: invalid size '12X'"):
        parse_bytes("12X", "read_size")


def test_loader_options_use_the_parser(eagle_dataset):
    with pytest.raises(libshard.InvalidArgumentError, match="memory_budget'?: invalid size '2Gigs'"):
        libshard.Loader(eagle_dataset, memory_budget="2Gigs")
    with pytest.raises(libshard.InvalidArgumentError, match="read_size"):
        libshard.Loader(eagle_dataset, read_size="0")
    libshard.Loader(eagle_dataset, memory_budget="8Mi", read_size="64Ki").close()
