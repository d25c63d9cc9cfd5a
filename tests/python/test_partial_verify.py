"""Every byte the loader serves is checked (docs/FORMAT.md §3.9, §3.10), whatever the selection:
one byte flipped in each field, at its first, middle and last row, of a dataset stored raw, with
whole-sample zstd and with field codecs, then read whole, by the damaged field, by another field,
by prefix (max_len) and by field and prefix. Every read either fails with a CorruptionError naming
the sample or gives exactly the undamaged data: the damaged byte is never served. A read that
serves it fails (a whole read, a read of the damaged field; these samples' fields are one row
block each, so a checked prefix reads the field whole and finds damage past the prefix too);
whole-sample zstd samples are read whole, so every read of them fails. With row blocks, a prefix
of a long sample reads the prefix plus a block (test_a_checked_prefix_of_a_long_sample...)."""
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
    assert ds_clean.has_field_checksums and ds_clean.index_version == 4
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
        # Certainly served (and so refused): a whole read, any read of a zstd sample, and a raw
        # read of the damaged field (one row block: read and checked whole, prefix or not).
        serves = read == "whole" or storage == "zstd" or (
            storage == "raw" and read in ("field", "field+prefix", "prefix"))
        try:
            got = read_all(damaged, **options)
        except libshard.CorruptionError as e:
            assert f"sample {DAMAGED}" in str(e), (read, str(e))
            continue
        assert not serves, f"{read}: the damaged byte was served unchecked"
        assert got == read_all(clean, **options), read
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


@pytest.fixture(scope="module")
def long_src(tmp_path_factory) -> Path:
    """Samples whose hidden states span several ~1 MiB row blocks (2048 tokens x 4 KiB rows)."""
    out = tmp_path_factory.mktemp("long_src")
    gen = torch.Generator().manual_seed(11)
    for i in range(2):
        torch.save({"input_ids": torch.arange(2048 + i, dtype=torch.int64),
                    "hidden_state": torch.randn(1, 2048 + i, 2048, generator=gen).to(torch.bfloat16)},
                   out / f"data_{i}.ckpt")
    return out


@pytest.mark.parametrize("compress", ["none", "auto"])
def test_a_checked_prefix_of_a_long_sample_reads_the_prefix_plus_a_block(long_src, tmp_path,
                                                                           compress):
    """With row blocks (index version 4), a verified max_len prefix reads each field's prefix plus
    at most one block, raw or compressed, not the rest of the field; damage past that block is
    not served (the read gives the undamaged rows), damage within the prefix is refused."""
    clean = pack_dir(long_src, tmp_path / "clean", compress=compress)
    ds = libshard.open(clean)
    assert ds.has_row_blocks and ds.index_version == 4
    max_len = 64  # 256 KiB of hidden_state: inside its first 1 MiB block (256 rows)

    def bytes_read(path, **options) -> int:
        loader = libshard.Loader(path, shuffle=False, memory_budget="256MiB", **options)
        for _ in loader:
            pass
        return loader.stats()["bytes_read"]

    whole = bytes_read(clean)
    prefix = bytes_read(clean, max_len=max_len)
    assert prefix < whole / 4, (prefix, whole)
    # At most a block (1 MiB) and a page or two of rounding per field, per sample.
    assert prefix <= 2 * (2 * (1 << 20) + 3 * 4096 + max_len * 2048 * 2 + max_len * 8), prefix

    loc = ds.location(1)
    shard = Path(ds.shards[loc["shard"]]["path"]).name
    for where, refused in [("past", False), ("within", True)]:
        damaged = tmp_path / f"damaged_{where}"
        shutil.copytree(clean, damaged)
        # A byte of the stored bytes near their end (hidden_state's last rows) or of its first
        # rows (raw: the region starts 64-aligned after input_ids; coded: within its first chunk).
        ids_bytes = (2049 * 8 + 63) // 64 * 64
        at = loc["stored_size"] - 100 if where == "past" else ids_bytes + 5000
        flip(damaged / shard, loc["offset"] + at)
        if refused:
            with pytest.raises(libshard.CorruptionError, match="sample 1"):
                read_all(damaged, max_len=max_len)
        else:
            assert read_all(damaged, max_len=max_len) == read_all(clean, max_len=max_len)
