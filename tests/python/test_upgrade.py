"""libshard.upgrade and Dataset.index_version: version 1, 2 and 3 indexes (the golden files of
libshard before index version 4) rewritten as version 4 with field checksums and row blocks
(FORMAT.md §3.9, §3.10) from Python, the data unchanged, twice a no-op; every sample is checked
first, so a damaged one fails the upgrade and nothing changes; `libshard info` reports the
version."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import libshard
from conftest import _cli, tensor_bytes

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN_V1 = DATA / "golden_v1"


def _samples(path: Path):
    ds = libshard.open(path)
    return [ds[i] for i in range(len(ds))], [ds.source(i) for i in range(len(ds))]


def test_upgrade_rewrites_a_version_1_index(tmp_path):
    ds_dir = tmp_path / "ds"
    shutil.copytree(GOLDEN_V1, ds_dir)
    assert libshard.open(ds_dir).index_version == 1
    before, sources = _samples(ds_dir)
    shards = {p.name: p.read_bytes() for p in ds_dir.glob("*.lss")}

    assert libshard.upgrade(ds_dir) is True
    assert libshard.open(ds_dir).index_version == 4
    assert libshard.open(ds_dir).has_field_checksums
    assert libshard.open(ds_dir).has_row_blocks
    after, sources_after = _samples(ds_dir)
    assert sources_after == sources
    for a, b in zip(after, before):
        assert a.keys() == b.keys()
        for k, v in a.items():
            # Bytes, not values: the golden files hold NaNs.
            if isinstance(v, torch.Tensor):
                assert (v.dtype, v.shape, tensor_bytes(v)) == (b[k].dtype, b[k].shape,
                                                               tensor_bytes(b[k])), k
            else:
                assert v == b[k], k
    assert {p.name: p.read_bytes() for p in ds_dir.glob("*.lss")} == shards, "shards untouched"
    assert libshard.upgrade(ds_dir) is False  # already version 4

    cli = _cli()
    if cli is not None:
        info = json.loads(subprocess.run([cli, "info", str(ds_dir), "--json"], check=True,
                                         capture_output=True, text=True).stdout)
        assert info["index_version"] == 4 and info["field_checksums"] is True


@pytest.mark.parametrize("golden", ["golden_v2", "golden_v2_zstd", "golden_v2_codecs",
                                    "golden_v1_zstd", "golden_v3", "golden_v3_planes2",
                                    "golden_v3_fp8_entropy"])
def test_upgrade_adds_field_checksums_to_every_earlier_kind(tmp_path, golden):
    """Raw, whole-sample zstd and field-codec datasets: after the upgrade every sample reads the
    same, Dataset.verify checks both levels, and a partial read by field is checked (a byte
    flipped inside a served field is a CorruptionError)."""
    ds_dir = tmp_path / "ds"
    shutil.copytree(DATA / golden, ds_dir)
    before, sources = _samples(ds_dir)
    assert not libshard.open(ds_dir).has_row_blocks
    assert libshard.upgrade(ds_dir) is True
    ds = libshard.open(ds_dir)
    assert ds.index_version == 4 and ds.has_field_checksums and ds.has_row_blocks
    after, sources_after = _samples(ds_dir)
    assert sources_after == sources
    for a, b in zip(after, before):
        assert a.keys() == b.keys()
        for k, v in a.items():
            if isinstance(v, torch.Tensor):
                assert tensor_bytes(v) == tensor_bytes(b[k]), k
            else:
                assert v == b[k], k
    for i in range(len(ds)):
        ds.verify(i)
        # Row ranges of the upgraded dataset: the rows of the whole read.
        for name, field in ((f.name, f) for f in ds.schema.fields):
            if field.seq_dim is None:
                continue
            got = ds.read(i, rows=(1, 4), fields=[name])[name]
            want = after[i][name].narrow(field.seq_dim, 0, after[i][name].shape[field.seq_dim])
            want = want[(slice(None),) * field.seq_dim + (slice(1, 4),)]
            assert tensor_bytes(got) == tensor_bytes(want), (i, name)
    assert libshard.upgrade(ds_dir) is False


def test_upgrade_checks_every_sample_first_and_changes_nothing_when_one_is_damaged(tmp_path):
    ds_dir = tmp_path / "ds"
    shutil.copytree(DATA / "golden_v2", ds_dir)
    ds = libshard.open(ds_dir)
    loc = ds.location(1)
    shard = Path(ds.shards[loc["shard"]]["path"])
    data = bytearray(shard.read_bytes())
    data[loc["offset"] + loc["stored_size"] // 2] ^= 0x10
    shard.write_bytes(bytes(data))
    manifest = (ds_dir / "manifest.json").read_bytes()
    with pytest.raises(libshard.CorruptionError, match="sample 1"):
        libshard.upgrade(ds_dir)
    assert (ds_dir / "manifest.json").read_bytes() == manifest
    assert libshard.open(ds_dir).index_version == 2


def test_upgrade_of_a_missing_dataset_names_it(tmp_path):
    with pytest.raises(libshard.NotFoundError, match="nope"):
        libshard.upgrade(tmp_path / "nope")
