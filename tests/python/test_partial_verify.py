"""Every byte the loader serves is checked (docs/FORMAT.md §3.9), whatever the selection: one byte
flipped in each field, at its first, middle and last row, of a dataset stored raw, with
whole-sample zstd and with field codecs, then read whole, by the damaged field, by another field,
by prefix (max_len) and by field and prefix. A read that serves the damaged field fails with a
CorruptionError naming the sample (a raw sample's served fields are checked whole, so damage past
the max_len prefix is found too); a read of a raw sample that does not serve it gives exactly the
undamaged data; an encoded sample is read whole, so every read of it fails."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import libshard
from conftest import pack_dir, tensor_bytes, write_eagle_dir

DAMAGED = 1        # the sample that gets the flipped byte
MAX_LEN = 8        # the prefix: shorter than every sample (min_len below)
STORAGES = {"raw": {}, "zstd": {"compress": "zstd"}, "codecs": {"compress": "auto"}}
POSITIONS = ["first", "middle", "last"]


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("partial_src")
    write_eagle_dir(out, 4, seed=5, min_len=24, max_len=40)
    return out


@pytest.fixture(scope="module")
def datasets(src, tmp_path_factory) -> dict:
    out = {}
    for storage, options in STORAGES.items():
        out[storage] = pack_dir(src, tmp_path_factory.mktemp(f"partial_{storage}") / "ds",
                                **options)
    return out


# Raw samples: every field; encoded samples are read whole, so one damaged field covers them.
CASES = [("raw", f) for f in range(4)] + [("zstd", 0), ("codecs", 0)]


def field_extents(ds: libshard.Dataset, i: int) -> dict:
    """Offset, size and row size of each field in the raw payload (FORMAT.md §4.1)."""
    sample = ds[i]
    out, off = {}, 0
    for field in ds.schema.fields:
        t = sample[field.name]
        off = (off + 63) // 64 * 64
        nbytes = t.numel() * t.element_size()
        rows = t.shape[field.seq_dim] if field.seq_dim is not None else 1
        out[field.name] = (off, nbytes, nbytes // rows if rows else nbytes)
        off += nbytes
    return out


def flip(path: Path, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x24]))


def read_all(dataset: Path, **options) -> dict:
    loader = libshard.Loader(dataset, shuffle=False, return_index=True, memory_budget="64MiB",
                             **options)
    out = {}
    for sample in loader:
        i = sample.pop("__index__")
        out[i] = {k: tensor_bytes(v) if isinstance(v, torch.Tensor) else v
                  for k, v in sample.items()}
    return out


def reads(name: str, other: str) -> dict:
    return {"whole": {}, "field": {"fields": [name]}, "other": {"fields": [other]},
            "prefix": {"max_len": MAX_LEN}, "field+prefix": {"fields": [name], "max_len": MAX_LEN}}


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("storage,field_index", CASES)
def test_a_flipped_byte_is_never_served(datasets, tmp_path, storage, field_index, position):
    clean = datasets[storage]
    ds_clean = libshard.open(clean)
    assert ds_clean.has_field_checksums and ds_clean.index_version == 3
    names = ds_clean.schema.names
    name = names[field_index]
    other = names[(field_index + 1) % len(names)]
    damaged = tmp_path / "ds"
    shutil.copytree(clean, damaged)
    loc = ds_clean.location(DAMAGED)
    shard = damaged / Path(ds_clean.shards[loc["shard"]]["path"]).name
    if storage == "raw":
        off, nbytes, row = field_extents(ds_clean, DAMAGED)[name]
        at = {"first": off + row // 2, "middle": off + nbytes // 2,
              "last": off + nbytes - 1}[position]
    else:
        at = {"first": 0, "middle": loc["stored_size"] // 2,
              "last": loc["stored_size"] - 1}[position]
    flip(shard, loc["offset"] + at)

    for read, options in reads(name, other).items():
        serves = storage != "raw" or read != "other"
        if serves:
            with pytest.raises(libshard.CorruptionError, match=f"sample {DAMAGED}"):
                read_all(damaged, **options)
        else:
            assert read_all(damaged, **options) == read_all(clean, **options), read
        # Unchecked, nothing is refused (the bytes are served as stored).
        if storage == "raw":
            assert len(read_all(damaged, verify=False, **options)) == 4
    with pytest.raises(libshard.CorruptionError, match=f"sample {DAMAGED}"):
        libshard.open(damaged)[DAMAGED]
    with pytest.raises(libshard.CorruptionError, match=f"sample {DAMAGED}"):
        libshard.open(damaged).verify(DAMAGED)


def test_a_checked_prefix_reads_only_the_fields_it_serves(datasets):
    """A verified fields= read reads its fields whole and not the others (FORMAT.md §3.9): fewer
    bytes than a whole read; unverified, a prefix read reads no more."""
    clean = datasets["raw"]
    ds = libshard.open(clean)
    first = ds.schema.names[0]

    def bytes_read(**options) -> int:
        loader = libshard.Loader(clean, shuffle=False, memory_budget="64MiB", **options)
        for _ in loader:
            pass
        return loader.stats()["bytes_read"]

    whole = bytes_read()
    assert bytes_read(fields=[first]) < whole
    assert bytes_read(fields=[first], max_len=MAX_LEN, verify=False) <= bytes_read(
        fields=[first], max_len=MAX_LEN)


def test_a_dataset_without_field_checksums_reads_partial_samples_whole(tmp_path):
    """Index version 2 (golden files): a verified partial read checks the whole sample, so damage
    in a field it does not serve is found too; libshard.upgrade then adds field checksums."""
    golden = Path(__file__).resolve().parents[1] / "data" / "golden_v2"
    ds_dir = tmp_path / "ds"
    shutil.copytree(golden, ds_dir)
    ds = libshard.open(ds_dir)
    assert not ds.has_field_checksums
    names = ds.schema.names
    loc = ds.location(1)
    flip(Path(ds.shards[loc["shard"]]["path"]), loc["offset"] + loc["stored_size"] - 1)
    with pytest.raises(libshard.CorruptionError, match="sample 1"):
        read_all(ds_dir, fields=[names[0]])
    assert len(read_all(ds_dir, fields=[names[0]], verify=False)) == len(ds)
