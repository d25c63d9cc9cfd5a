"""Dataset.key(i): the sample key, one word across Python (Writer's key=, find, merge(by_key=)),
C++ (Provenance::path, MergeOptions::by_key) and the CLI (--by-key); source(i) is its former
name. Read from the frozen golden datasets of every index version."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import libshard

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.mark.parametrize("name", ["golden_v1", "golden_v2", "golden_v3"])
def test_key_is_the_provenance_path_and_what_find_looks_up(tmp_path, name):
    ds_dir = tmp_path / name
    shutil.copytree(DATA / name, ds_dir)
    ds = libshard.open(ds_dir)
    assert len(ds) > 0
    keys = [ds.key(i) for i in range(len(ds))]
    assert all(keys), "the golden datasets record a key for every sample"
    for i, k in enumerate(keys):
        assert ds.source(i) == k
        assert ds.provenance(i)["path"] == k
    for k in set(keys):
        assert ds.key(ds.find(k)) == k
