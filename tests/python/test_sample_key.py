"""Dataset.key(i): the sample key, one word across Python (Writer's key=, find, merge(by_key=)),
C++ (SourceFileInfo::path, MergeOptions::by_key) and the CLI (--by-key); source(i) is its former
name. Dataset.provenance() is the dataset's, as C++ Dataset::provenance(); a sample's own is
Dataset.source_file(i), which provenance(i) is the former spelling of. Read from the frozen
golden datasets of every index version."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import json
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
        assert ds.source_file(i)["path"] == k
        assert ds.provenance(i) == ds.source_file(i)  # the former spelling
    for k in set(keys):
        assert ds.key(ds.find(k)) == k


@pytest.mark.parametrize("name", ["golden_v1", "golden_v2", "golden_v3"])
def test_provenance_is_the_datasets_as_in_cpp_and_the_manifest(tmp_path, name):
    ds_dir = tmp_path / name
    shutil.copytree(DATA / name, ds_dir)
    ds = libshard.open(ds_dir)
    recorded = json.loads((ds_dir / "manifest.json").read_text())["provenance"]
    prov = ds.provenance()
    assert set(prov) == {"source_root", "sources", "created_by", "created_at", "attributes"}
    for member in ("source_root", "sources", "created_by", "created_at"):
        assert prov[member] == recorded[member], member
    assert prov["attributes"] == ds.attributes == recorded.get("attributes", {})
    first = ds.source_file(0)
    assert set(first) == {"path", "size", "mtime_ns", "content_hash"}
