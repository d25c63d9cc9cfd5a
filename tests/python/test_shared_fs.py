"""Shared and network file systems (issue 24): a dataset is read in place, with O_DIRECT where the
file system takes it (alignment from statx STATX_DIOALIGN) and buffered where it refuses O_DIRECT
at open or only at the first read (some NFS/FUSE mounts), the loader's stats saying which.
LIBSHARD_IO_REFUSE_DIRECT stands in for such a file system on the test's tmpfs or disk."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

from pathlib import Path

import pytest

import libshard
from conftest import assert_sample_equal, pack_dir, write_eagle_dir


@pytest.fixture(scope="module")
def shm_dataset(tmp_path_factory):
    shm = Path("/dev/shm")
    base = Path(tmp_path_factory.mktemp("sharedfs"))
    src = base / "src"
    write_eagle_dir(src, 20, seed=9)
    root = shm / f"libshard-sharedfs-{base.name}" if shm.is_dir() else base
    out = pack_dir(src, root / "ds", shard_size="64KiB")
    yield out
    import shutil
    shutil.rmtree(root if root != base else out, ignore_errors=True)


def epoch(ds_path, **kw):
    ds = libshard.open(ds_path)
    with libshard.Loader(ds_path, shuffle=False, return_index=True, pin_memory=False,
                         memory_budget="8MiB", **kw) as loader:
        n = 0
        for s in loader:
            i = s.pop("__index__")
            assert_sample_equal(s, ds[i], f"sample {i}")
            n += 1
        stats = loader.stats()
    assert n == len(ds)
    return stats


@pytest.mark.parametrize("engine", ["uring", "pread"])
def test_refused_at_first_read_reads_buffered_in_place(shm_dataset, monkeypatch, engine):
    monkeypatch.setenv("LIBSHARD_IO_REFUSE_DIRECT", "read")
    try:
        stats = epoch(shm_dataset, engine=engine)
    except ValueError as e:
        if engine == "uring" and "io_uring" in str(e):
            pytest.skip(f"io_uring refused here: {e}")
        raise
    assert stats["direct_io"] is False
    assert "refuses O_DIRECT reads" in stats["io_status"], stats["io_status"]
    assert "in place" in stats["io_status"]
    assert "more shard(s) buffered" in stats["io_status"]  # every shard, one reason


def test_refused_at_first_read_with_io_mode_direct_is_an_error(shm_dataset, monkeypatch):
    monkeypatch.setenv("LIBSHARD_IO_REFUSE_DIRECT", "read")
    with pytest.raises(ValueError, match="refuses O_DIRECT reads"):
        epoch(shm_dataset, io_mode="direct")


def test_direct_where_taken(shm_dataset, monkeypatch):
    monkeypatch.delenv("LIBSHARD_IO_REFUSE_DIRECT", raising=False)
    stats = epoch(shm_dataset)
    if not stats["direct_io"]:
        pytest.skip(f"O_DIRECT refused here: {stats['io_status']}")
    assert stats["io_status"] == ""
