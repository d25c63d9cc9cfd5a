"""Bad input raises the right exception with a message that says what and where."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import libshard
from conftest import N_EAGLE, assert_sample_equal, pack_dir

SMALL = dict(memory_budget="8MiB")


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))


def corrupt_sample(dataset: Path, index: int) -> str:
    """Flips a byte inside sample `index`'s stored bytes; returns the shard file's name."""
    ds = libshard.open(dataset)
    loc = ds.location(index)
    shard = ds.shards[loc["shard"]]["path"]
    flip_byte(Path(shard), loc["offset"] + loc["stored_size"] // 2)
    return os.path.basename(shard)


def test_missing_path(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match="nope"):
        libshard.open(missing)
    with pytest.raises(FileNotFoundError, match="nope"):
        libshard.Loader(missing)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="manifest"):
        libshard.open(empty)


def test_corrupt_sample_detected_with_location(eagle_dataset, copy_dataset):
    dataset = copy_dataset(eagle_dataset)
    shard = corrupt_sample(dataset, 5)
    ds = libshard.open(dataset)
    ds[4]  # neighbours are fine
    with pytest.raises(libshard.CorruptionError) as info:
        ds[5]
    message = str(info.value)
    assert shard in message and "sample 5" in message and "offset" in message
    assert issubclass(libshard.CorruptionError, Exception)
    # Without verification the bytes are returned as stored.
    libshard.open(dataset, verify=False)[5]

    loader = libshard.Loader(dataset, shuffle=False, verify=True, **SMALL)
    with pytest.raises(libshard.CorruptionError, match=shard):
        for _ in loader:
            pass

    skipping = libshard.Loader(dataset, shuffle=False, verify=True, on_error="skip",
                               return_index=True, **SMALL)
    seen = [s["__index__"] for s in skipping]
    assert 5 not in seen and len(set(seen)) == N_EAGLE - 1
    # Sample 4 stands in for 5: the loader keeps its step count (DDP ranks stay in step).
    assert len(seen) == N_EAGLE and seen[5] == 4
    assert skipping.stats()["samples_skipped"] == 1
    assert skipping.stats()["samples_repeated"] == 1
    assert 5 in skipping.state_dict()["skipped"] or skipping.state_dict()["position"] == 0


def test_corrupt_index_detected_at_open(eagle_dataset, copy_dataset):
    # The head of the index (FORMAT.md §3.8.2) is checked at open.
    dataset = copy_dataset(eagle_dataset)
    index = dataset / "index.lsi"
    flip_byte(index, 130)
    with pytest.raises(libshard.CorruptionError, match="index"):
        libshard.open(dataset)


def test_corrupt_index_block_detected_when_first_used(eagle_dataset, copy_dataset):
    # A block of sample entries is checked when one of its samples is first used (§3.8.7).
    dataset = copy_dataset(eagle_dataset)
    index = dataset / "index.lsi"
    flip_byte(index, index.stat().st_size - 1)
    ds = libshard.open(dataset)
    with pytest.raises(libshard.CorruptionError, match="index.lsi: block 0"):
        ds[len(ds) - 1]


def test_truncated_shard_detected_at_open(eagle_dataset, copy_dataset):
    dataset = copy_dataset(eagle_dataset)
    shard = Path(libshard.open(dataset).shards[0]["path"])
    os.truncate(shard, shard.stat().st_size - 4096)
    with pytest.raises(libshard.CorruptionError, match=shard.name):
        libshard.open(dataset)


@pytest.mark.parametrize("kwargs, match", [
    (dict(batch_size=0), "batch_size"),
    (dict(batch_size=2, max_tokens=100), "exclusive"),
    (dict(rank=4, world_size=4), "rank"),
    (dict(world_size=0, rank=0), "world_size"),
    (dict(on_error="ignore"), "on_error"),
    (dict(memory_budget="lots"), "memory_budget"),
    (dict(engine="aio"), "engine"),
    (dict(io_mode="mmap"), "io_mode"),
    (dict(fields=["input_ids", "nope"]), "nope"),
    (dict(collate="stack"), "collate"),
    (dict(device="tpu"), "device"),
    (dict(queue_depth=-1), "queue_depth"),
])
def test_wrong_loader_options(eagle_dataset, kwargs, match):
    with pytest.raises(ValueError, match=match):
        libshard.Loader(eagle_dataset, **kwargs)


def test_wrong_state_dict(eagle_dataset):
    loader = libshard.Loader(eagle_dataset, **SMALL)
    with pytest.raises(ValueError, match="position"):
        loader.load_state_dict({"seed": 0, "epoch": 0})
    with pytest.raises(ValueError):
        loader.load_state_dict({"seed": 0, "epoch": 0, "position": -3})
    with pytest.raises(ValueError):
        loader.load_state_dict([1, 2, 3])


def test_closed_loader(eagle_dataset):
    loader = libshard.Loader(eagle_dataset, **SMALL)
    loader.close()
    loader.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        iter(loader)


def test_sample_larger_than_budget(eagle_dataset):
    ds = libshard.open(eagle_dataset)
    biggest = max(ds.location(i)["stored_size"] for i in range(len(ds)))
    with pytest.raises(libshard.ResourceExhaustedError, match="budget") as info:
        loader = libshard.Loader(ds, memory_budget=4096, shuffle=False)
        for _ in loader:
            pass
    assert isinstance(info.value, MemoryError) and isinstance(info.value, libshard.Error)
    assert biggest > 4096


# (StatusCode value, class name, the built-in it also derives from or None), status.h order.
STATUS_CLASSES = [
    (1, "InvalidArgumentError", ValueError),
    (2, "NotFoundError", FileNotFoundError),
    (3, "CorruptionError", None),
    (4, "IoError", OSError),
    (5, "UnsupportedError", ValueError),
    (6, "ResourceExhaustedError", MemoryError),
    (7, "AbortedError", None),
    (8, "InternalError", RuntimeError),
    (9, "AlreadyExistsError", FileExistsError),
]


@pytest.mark.parametrize("code,name,builtin", STATUS_CLASSES)
def test_status_mapping(code, name, builtin):
    cls = getattr(libshard, name)
    assert cls is getattr(libshard._core, name) and name in libshard.__all__
    assert issubclass(cls, libshard.Error) and issubclass(libshard.Error, Exception)
    assert cls.__module__ == "libshard" and cls.__doc__
    if builtin is not None:
        assert issubclass(cls, builtin)
    # Raised as the class itself, caught by libshard.Error and by the built-in; the message is
    # the status message (the class already names the code).
    with pytest.raises(cls) as info:
        libshard._core._raise_status(code, f"message {code} \xff")
    assert type(info.value) is cls and str(info.value) == f"message {code} \xff"
    for catch in (libshard.Error,) + ((builtin,) if builtin is not None else ()):
        try:
            libshard._core._raise_status(code, "caught")
        except catch as e:
            assert type(e) is cls
        else:  # pragma: no cover
            pytest.fail(f"{name} not raised")


def test_status_mapping_keeps_errno_on_os_errors():
    with pytest.raises(libshard.IoError) as info:
        libshard._core._raise_status(4, "disk on fire", errno.EIO)
    assert isinstance(info.value, OSError) and info.value.errno == errno.EIO
    assert info.value.strerror == "disk on fire" and "disk on fire" in str(info.value)
    with pytest.raises(libshard.NotFoundError) as info:
        libshard._core._raise_status(2, "gone", errno.ENOENT)
    assert isinstance(info.value, FileNotFoundError) and info.value.errno == errno.ENOENT
    # An unknown code (never produced by the library) is an InternalError, not a crash.
    with pytest.raises(libshard.InternalError, match="odd"):
        libshard._core._raise_status(77, "odd")


def test_io_errors_keep_the_errno_subclass_python_users_catch(tmp_path):
    """An IoError with EACCES is also a PermissionError (as OSError(errno, ...) would be), so
    `except PermissionError` keeps working; other errnos stay plain IoError."""
    for err, builtin in [(errno.EACCES, PermissionError), (errno.EPERM, PermissionError),
                         (errno.EISDIR, IsADirectoryError), (errno.ENOTDIR, NotADirectoryError)]:
        with pytest.raises(builtin) as info:
            libshard._core._raise_status(4, "no way", err)
        assert isinstance(info.value, libshard.IoError) and isinstance(info.value, libshard.Error)
        assert info.value.errno == err
    with pytest.raises(libshard.IoError) as info:
        libshard._core._raise_status(4, "full", errno.ENOSPC)
    assert type(info.value) is libshard.IoError and info.value.errno == errno.ENOSPC
    if os.geteuid() != 0:  # root reads anything: the real case needs an unprivileged user
        dataset = tmp_path / "locked"
        dataset.mkdir()
        (dataset / "manifest.json").write_text("{}")
        os.chmod(dataset / "manifest.json", 0)
        with pytest.raises(PermissionError):
            libshard.open(dataset)


def test_python_side_errors_are_libshard_errors(eagle_dataset):
    with pytest.raises(libshard.InvalidArgumentError, match="batch_size and max_tokens"):
        libshard.Loader(eagle_dataset, batch_size=2, max_tokens=10)
    with pytest.raises(libshard.InvalidArgumentError, match="on_error"):
        libshard.Loader(eagle_dataset, on_error="fail")
    with pytest.raises(libshard.InvalidArgumentError, match="bogus"):
        libshard.Loader(eagle_dataset, engine="bogus", **SMALL)
    with pytest.raises(libshard.InvalidArgumentError, match="Loader option 'queue_depth'"):
        libshard.Loader(eagle_dataset, queue_depth="deep", **SMALL)
    with pytest.raises(libshard.InvalidArgumentError, match="empty batch"):
        libshard.pad_collate([])


def test_pack_errors(tmp_path, eagle_src):
    if not getattr(libshard._core, "HAVE_PACK", False):
        pytest.skip("built without the pack pipeline")
    with pytest.raises(FileNotFoundError, match="missing_src"):
        libshard.pack(tmp_path / "missing_src", tmp_path / "out1")
    with pytest.raises(ValueError, match="lz4"):
        libshard.pack(eagle_src, tmp_path / "out2", compress="lz4")
    with pytest.raises(libshard.InvalidArgumentError, match="shard"):
        libshard.pack(eagle_src, tmp_path / "out3", shard_size="big")
    with pytest.raises(libshard.InvalidArgumentError, match="pack option 'on_error'.*'ignore'"
                                                            ".*raise.*skip"):
        libshard.pack(eagle_src, tmp_path / "out5", on_error="ignore")
    with pytest.raises(libshard.InvalidArgumentError, match="pack option 'no_such_option'"):
        libshard.pack(eagle_src, tmp_path / "out6", no_such_option=1)
    bad = tmp_path / "bad_src"
    bad.mkdir()
    (bad / "data_0.pt").write_bytes(b"PK\x03\x04 definitely not a torch file")
    with pytest.raises((ValueError, libshard.CorruptionError), match="data_0.pt"):
        libshard.pack(bad, tmp_path / "out4")
    # "raise" is the canonical name (as in the Loader), "fail" its alias; both stop at data_0.pt.
    for on_error in ("raise", "fail"):
        with pytest.raises(libshard.Error, match="data_0.pt"):
            libshard.pack(bad, tmp_path / f"out_{on_error}", on_error=on_error)
    with pytest.raises(libshard.InvalidArgumentError, match="none of the 1 sources could be read"):
        libshard.pack(bad, tmp_path / "out_skip", on_error="skip")  # skipped, then nothing left


def test_pack_round_trip_and_summary(tmp_path, eagle_src):
    if not getattr(libshard._core, "HAVE_PACK", False):
        pytest.skip("built without the pack pipeline")
    summary = libshard.pack(eagle_src, tmp_path / "out", compress="zstd:3", threads=2)
    assert summary["samples"] == N_EAGLE
    ds = libshard.open(tmp_path / "out")
    assert len(ds) == N_EAGLE
    plain = libshard.open(pack_dir(eagle_src, tmp_path / "plain"))
    assert ds.total_stored_bytes < plain.total_stored_bytes or ds.total_raw_bytes > 0
    for i in range(N_EAGLE):
        assert_sample_equal(ds[i], plain[i], f"sample {i}")
