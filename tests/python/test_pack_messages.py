"""Library errors name a setting the way the caller spells it: libshard.pack()'s keywords from
Python ("part='4/4'", "'max_decompressed'", "'append'"), the flags from `libshard pack`
("--part 4/4", "--max-decompressed"). No CLI syntax reaches a Python caller."""

from __future__ import annotations

import gzip
import os
import subprocess
from pathlib import Path

import pytest
import torch

import libshard

LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")


def write_sources(root: Path, n: int = 2, tokens: int = 8) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        torch.save({"input_ids": torch.arange(tokens + i, dtype=torch.int64)}, root / f"s_{i}.pt")


def python_wording(err: BaseException, tmp_path: Path) -> str:
    """The message without the paths in it (which are the test's, not the library's words)."""
    msg = str(err).replace(str(tmp_path), "TMP")
    assert "--" not in msg, msg
    assert "libshard pack" not in msg, msg
    return msg


def test_part_is_named_as_the_keyword(tmp_path):
    src = tmp_path / "src"
    write_sources(src)
    with pytest.raises(ValueError) as info:
        libshard.pack(src, tmp_path / "out", part="4/4")
    msg = python_wording(info.value, tmp_path)
    assert "part='4/4'" in msg and "I must be smaller than N" in msg, msg


def test_part_auto_without_a_launcher_is_named_as_the_keyword(tmp_path, monkeypatch):
    for var in list(os.environ):
        if var in LAUNCHER_VARS or var.startswith("SLURM_"):
            monkeypatch.delenv(var)
    src = tmp_path / "src"
    write_sources(src)
    with pytest.raises(ValueError) as info:
        libshard.pack(src, tmp_path / "out", part="auto")
    msg = python_wording(info.value, tmp_path)
    assert "part='auto'" in msg and "part='I/N'" in msg, msg


def test_the_gzip_limit_is_named_as_the_keyword(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    buf = tmp_path / "big.pt"
    torch.save({"input_ids": torch.zeros(1 << 16, dtype=torch.int64)}, buf)
    (src / "big.pt.gz").write_bytes(gzip.compress(buf.read_bytes()))
    with pytest.raises(libshard.Error) as info:
        libshard.pack(src, tmp_path / "out", max_decompressed=4096)
    msg = python_wording(info.value, tmp_path)
    assert "big.pt.gz" in msg and "'max_decompressed'" in msg, msg


def test_an_existing_dataset_names_append_as_the_keyword(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    write_sources(src)
    libshard.pack(src, out)
    with pytest.raises(libshard.Error) as info:
        libshard.pack(src, out)
    msg = python_wording(info.value, tmp_path)
    assert "already holds a dataset" in msg and "'append'" in msg, msg


def test_the_cli_still_names_its_flags(tmp_path):
    cli = os.environ.get("LIBSHARD_CLI")
    if not cli:
        pytest.skip("LIBSHARD_CLI is not set")
    src = tmp_path / "src"
    write_sources(src)
    r = subprocess.run([cli, "pack", str(src), "-o", str(tmp_path / "out"), "--part", "4/4"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--part 4/4" in r.stderr, r.stderr
    out = tmp_path / "done"
    subprocess.run([cli, "pack", str(src), "-o", str(out), "-q"], check=True)
    r = subprocess.run([cli, "pack", str(src), "-o", str(out), "-q"], capture_output=True, text=True)
    assert r.returncode != 0 and "--append" in r.stderr, r.stderr
