"""Library errors name a setting the way the caller spells it: libshard.pack()'s keywords from
Python ("part='4/4'", "'max_decompressed'", "'append'"), the flags from `libshard pack`
("--part 4/4", "--max-decompressed"). No CLI syntax reaches a Python caller. The advice to
resume an interrupted write (a dataset another writer holds, an unfinished write opened, an
interrupted s3:// write) names libshard.Writer / resume=True to Python and `libshard pack
--resume` to the CLI (libshard/caller.h)."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import fcntl
import gzip
import os
import shutil
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


DATA = Path(__file__).resolve().parents[1] / "data"
PYTHON_RESUME = "libshard.Writer on the same directory (it resumes by itself), or " \
    "libshard.pack(..., resume=True)"


def hold_lock(out: Path):
    """Holds OUT's dataset lock as another writer would (its note left empty)."""
    out.mkdir(parents=True, exist_ok=True)
    f = open(out / ".libshard.lock", "a+")
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return f


def unfinished_write(tmp_path: Path) -> Path:
    """A directory with the journal of an interrupted write and no manifest (FORMAT.md §6)."""
    out = tmp_path / "unfinished"
    shutil.copytree(DATA / "golden_v3_journal", out)
    return out


def test_a_held_dataset_names_the_python_ways_to_resume(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    write_sources(src)
    with hold_lock(out):
        with pytest.raises(libshard.AlreadyExistsError) as writer_info:
            with libshard.Writer(out) as w:
                w.write({"input_ids": torch.arange(4)}, key="a")
        with pytest.raises(libshard.AlreadyExistsError) as pack_info:
            libshard.pack(src, out)
    for info in (writer_info, pack_info):
        msg = python_wording(info.value, tmp_path)
        assert "is being written by another process" in msg, msg
        assert "continue its work with " + PYTHON_RESUME in msg, msg


def test_opening_an_unfinished_write_names_the_python_ways_to_resume(tmp_path):
    out = unfinished_write(tmp_path)
    with pytest.raises(FileNotFoundError) as info:
        libshard.open(out)
    msg = python_wording(info.value, tmp_path)
    assert "this is an unfinished write" in msg and "resume it with " + PYTHON_RESUME in msg, msg


def test_the_cli_names_pack_resume(tmp_path):
    cli = os.environ.get("LIBSHARD_CLI")
    if not cli:
        pytest.skip("LIBSHARD_CLI is not set")
    src, out = tmp_path / "src", tmp_path / "out"
    write_sources(src)
    with hold_lock(out):
        r = subprocess.run([cli, "pack", str(src), "-o", str(out), "-q"], capture_output=True,
                           text=True)
    assert r.returncode != 0, r.stderr
    assert "continue its work with `libshard pack --resume`;" in r.stderr, r.stderr
    assert "libshard.Writer" not in r.stderr and "Writer::Resume" not in r.stderr, r.stderr
    unfinished = unfinished_write(tmp_path)
    r = subprocess.run([cli, "info", str(unfinished)], capture_output=True, text=True)
    assert r.returncode != 0, r.stderr
    assert "unfinished write" in r.stderr and "resume it with `libshard pack --resume`" in r.stderr, \
        r.stderr


def test_the_cli_spells_in_flight_bytes_and_keeps_window(tmp_path):
    cli = os.environ.get("LIBSHARD_CLI")
    if not cli:
        pytest.skip("LIBSHARD_CLI is not set")
    src = tmp_path / "src"
    write_sources(src)
    for flag in ("--in-flight-bytes", "--window"):
        out = tmp_path / flag.strip("-")
        subprocess.run([cli, "pack", str(src), "-o", str(out), "-q", flag, "64MiB"], check=True)
        assert len(libshard.open(out)) == 2
    r = subprocess.run([cli, "pack", "--help"], capture_output=True, text=True)
    assert "--in-flight-bytes" in r.stdout, r.stdout
