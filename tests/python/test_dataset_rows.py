"""Row-range reads from Python (docs/FORMAT.md §3.10): ``Dataset.read(i, rows=..., fields=...)``
gives, bit for bit, ``ds[i]`` sliced along each field's sequence dimension, for samples stored
raw, with field codecs (``compress="auto"``, ``store_dtype`` fp8) and with whole-sample zstd;
windows past the end are clipped (a slice's negative bounds count from the length, as for a
list); a damaged row block fails a read that covers it, naming the sample, the field and its
rows, and not one that does not; a dataset without row blocks reads fields whole and says so
once, naming ``libshard upgrade``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import libshard
from conftest import tensor_bytes

HIDDEN = 512            # bf16 rows of 1 KiB: 1024 rows a 1 MiB block; aux rows of 3 KiB: 341
LENGTHS = [3000, 1100, 7]
DATA = Path(__file__).resolve().parents[1] / "data"


def sample(i: int, length: int) -> dict:
    gen = torch.Generator().manual_seed(100 + i)
    return {
        "input_ids": torch.arange(length, dtype=torch.int64) * 3 + i,
        "loss_mask": (torch.arange(length) % 3 == 0).to(torch.int64),
        "pairs": torch.randn(2, length, 8, generator=gen).to(torch.bfloat16),  # dims before seq
        "aux_hidden_state": torch.randn(1, length, 3 * HIDDEN, generator=gen).to(torch.bfloat16),
        "hidden_state": torch.randn(1, length, HIDDEN, generator=gen).to(torch.bfloat16),
        "conversation": f"conv-{i}",
    }


STORAGES = {"raw": {}, "auto": {"compress": "auto"},
            "fp8": {"compress": "auto", "store_dtype": "float8_e4m3fn"},
            "zstd": {"compress": "zstd"}}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict:
    out = {}
    for name, options in STORAGES.items():
        path = tmp_path_factory.mktemp(f"rows_{name}") / "ds"
        with libshard.Writer(path, fsync=False, **options) as w:
            for i, n in enumerate(LENGTHS):
                w.write(sample(i, n), key=f"s{i}")
        out[name] = path
    return out


def cut(t: torch.Tensor, seq_dim, window: range) -> torch.Tensor:
    if seq_dim is None:
        return t
    index = [slice(None)] * t.dim()
    index[seq_dim] = slice(window.start, window.stop)
    return t[tuple(index)]


WINDOWS = [(0, 1), (0, 1024), (1023, 1025), (100, 2000), (2999, 3000), (10, 10), (2900, 5000),
           (4000, 4100), slice(None, 50), slice(-20, None), slice(5, -5), slice(-1, 3)]


@pytest.mark.parametrize("storage", list(STORAGES))
def test_a_row_range_is_the_rows_of_the_whole_sample(datasets, storage):
    ds = libshard.open(datasets[storage])
    assert ds.index_version == 4 and ds.has_row_blocks
    for i in range(len(ds)):
        whole = ds[i]
        length = int(ds.lengths[i])
        for rows in WINDOWS:
            if isinstance(rows, slice):
                window = range(*rows.indices(length))
            else:
                window = range(*slice(*rows).indices(length))
            got = ds.read(i, rows=rows)
            assert list(got) == list(whole), rows
            for field in ds.schema.fields:
                want = cut(whole[field.name], field.seq_dim, window)
                g = got[field.name]
                assert (g.dtype, tuple(g.shape)) == (want.dtype, tuple(want.shape)), (rows, field)
                assert tensor_bytes(g) == tensor_bytes(want), (storage, i, rows, field.name)
            assert got["conversation"] == whole["conversation"]


def test_fields_and_errors(datasets):
    ds = libshard.open(datasets["raw"])
    got = ds.read(0, rows=(5, 9), fields=["hidden_state", "input_ids"])
    assert list(got)[:2] == ["hidden_state", "input_ids"]
    assert got["input_ids"].tolist() == [15, 18, 21, 24]
    assert ds.read(1, fields=["loss_mask"])["loss_mask"].shape == (LENGTHS[1],)
    assert tensor_bytes(ds.read(1)["hidden_state"]) == tensor_bytes(ds[1]["hidden_state"])
    with pytest.raises(libshard.InvalidArgumentError, match="start past its stop"):
        ds.read(0, rows=(9, 5))
    with pytest.raises(libshard.InvalidArgumentError, match="'nope'"):
        ds.read(0, rows=(1, 2), fields=["nope"])
    with pytest.raises(libshard.InvalidArgumentError, match="step"):
        ds.read(0, rows=slice(0, 10, 2))
    with pytest.raises(libshard.InvalidArgumentError, match="negative"):
        ds.read(0, rows=(-5, 2))
    with pytest.raises(TypeError):
        ds.read(0, fields="input_ids")
    with pytest.raises(IndexError):
        ds.read(len(ds), rows=(0, 1))
    assert ds.read(-1, rows=(0, 2))["input_ids"].tolist() == ds[len(ds) - 1]["input_ids"][:2].tolist()


@pytest.mark.parametrize("storage", ["raw", "auto"])
def test_a_damaged_block_fails_only_the_row_ranges_covering_it(datasets, tmp_path, storage):
    damaged = tmp_path / "ds"
    shutil.copytree(datasets[storage], damaged)
    ds = libshard.open(damaged)
    loc = ds.location(0)
    # The last field (hidden_state, 3000 rows of 1 KiB: three blocks) ends the stored bytes:
    # a byte in its last rows (raw) or its last chunk (auto).
    at = loc["offset"] + loc["stored_size"] - 300
    shard = Path(ds.shards[loc["shard"]]["path"])
    data = bytearray(shard.read_bytes())
    data[at] ^= 0x08
    shard.write_bytes(bytes(data))
    ds = libshard.open(damaged)
    with pytest.raises(libshard.CorruptionError,
                       match=r"sample 0.*'hidden_state' rows \[2048, 3000\)"):
        ds.read(0, rows=(2990, 3000))
    got = ds.read(0, rows=(0, 2000))  # blocks 0 and 1: intact
    clean = libshard.open(datasets[storage]).read(0, rows=(0, 2000))
    for k, v in clean.items():
        if isinstance(v, torch.Tensor):
            assert tensor_bytes(got[k]) == tensor_bytes(v), k
    with pytest.raises(libshard.CorruptionError, match="sample 0"):
        ds[0]
    with pytest.raises(libshard.CorruptionError, match="sample 0"):
        ds.verify(0)


def test_without_row_blocks_fields_are_read_whole_and_it_says_so_once(tmp_path, capfd):
    ds_dir = tmp_path / "ds"
    shutil.copytree(DATA / "golden_v3", ds_dir)
    ds = libshard.open(ds_dir)
    assert ds.index_version == 3 and not ds.has_row_blocks
    for i in range(len(ds)):
        whole = ds[i]
        got = ds.read(i, rows=(1, 4))
        for field in ds.schema.fields:
            want = cut(whole[field.name], field.seq_dim,
                       range(*slice(1, 4).indices(int(ds.lengths[i]))))
            assert tensor_bytes(got[field.name]) == tensor_bytes(want)
    err = capfd.readouterr().err
    assert err.count("libshard:") == 1, err
    assert f"libshard upgrade {ds_dir}" in err
    libshard.upgrade(ds_dir)
    ds = libshard.open(ds_dir)
    assert ds.has_row_blocks
    ds.read(0, rows=(1, 4))
    assert "libshard:" not in capfd.readouterr().err


def test_whole_sample_zstd_is_read_whole_and_says_so_once(datasets, capfd):
    ds = libshard.open(datasets["zstd"])
    assert ds.location(0)["flags"] & 1  # compressed whole
    ds.read(0, rows=(5, 10))
    ds.read(1, rows=(5, 10))
    err = capfd.readouterr().err
    assert err.count("whole-sample zstd") == 1, err
