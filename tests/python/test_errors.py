"""Bad input raises the right exception with a message that says what and where."""

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
    dataset = copy_dataset(eagle_dataset)
    index = dataset / "index.lsi"
    flip_byte(index, index.stat().st_size // 2)
    with pytest.raises(libshard.CorruptionError, match="index"):
        libshard.open(dataset)


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
    with pytest.raises((RuntimeError, ValueError), match="budget"):
        loader = libshard.Loader(ds, memory_budget=4096, shuffle=False)
        for _ in loader:
            pass
    assert biggest > 4096


def test_status_mapping():
    raise_status = libshard._core._raise_status
    with pytest.raises(ValueError, match="bad arg"):
        raise_status(1, "bad arg")
    with pytest.raises(FileNotFoundError, match="gone"):
        raise_status(2, "gone")
    with pytest.raises(libshard.CorruptionError, match="flipped"):
        raise_status(3, "flipped")
    with pytest.raises(OSError) as info:
        raise_status(4, "disk on fire", errno.EIO)
    assert info.value.errno == errno.EIO and "disk on fire" in str(info.value)
    with pytest.raises(ValueError, match="newer"):
        raise_status(5, "newer version")
    with pytest.raises(RuntimeError, match="bug"):
        raise_status(8, "bug")


def test_pack_errors(tmp_path, eagle_src):
    if not getattr(libshard._core, "HAVE_PACK", False):
        pytest.skip("built without the pack pipeline")
    with pytest.raises(FileNotFoundError, match="missing_src"):
        libshard.pack(tmp_path / "missing_src", tmp_path / "out1")
    with pytest.raises(ValueError, match="lz4"):
        libshard.pack(eagle_src, tmp_path / "out2", compress="lz4")
    with pytest.raises(ValueError, match="shard"):
        libshard.pack(eagle_src, tmp_path / "out3", shard_size="big")
    bad = tmp_path / "bad_src"
    bad.mkdir()
    (bad / "data_0.pt").write_bytes(b"PK\x03\x04 definitely not a torch file")
    with pytest.raises((ValueError, libshard.CorruptionError), match="data_0.pt"):
        libshard.pack(bad, tmp_path / "out4")


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
