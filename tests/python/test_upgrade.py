"""libshard.upgrade and Dataset.index_version: a version 1 index (the golden files of libshard
before index version 2) rewritten as version 2 from Python, the data unchanged, twice a no-op;
`libshard info` reports the version."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import libshard
from conftest import _cli, tensor_bytes

GOLDEN_V1 = Path(__file__).resolve().parents[1] / "data" / "golden_v1"


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
    assert libshard.open(ds_dir).index_version == 2
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
    assert libshard.upgrade(ds_dir) is False  # already version 2

    cli = _cli()
    if cli is not None:
        info = json.loads(subprocess.run([cli, "info", str(ds_dir), "--json"], check=True,
                                         capture_output=True, text=True).stdout)
        assert info["index_version"] == 2


def test_upgrade_of_a_missing_dataset_names_it(tmp_path):
    with pytest.raises(libshard.NotFoundError, match="nope"):
        libshard.upgrade(tmp_path / "nope")
