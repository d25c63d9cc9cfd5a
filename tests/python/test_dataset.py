"""libshard.open / libshard.Dataset: bit-exact against torch.load, indexing, provenance, pickling,
DataLoader integration, tensor lifetime."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import gc
import pickle
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data

import libshard
from conftest import N_EAGLE, assert_sample_equal, tensor_bytes


def test_every_eagle_sample_equals_torch_load(eagle_dataset, eagle_sources):
    ds = libshard.open(eagle_dataset)
    assert len(ds) == N_EAGLE
    assert len(ds.shards) > 1  # 64 KiB shards: the samples span several files
    for i, src in enumerate(eagle_sources):
        assert_sample_equal(ds[i], torch.load(src, weights_only=True), f"sample {i}")


def test_every_dtype_equals_torch_load(all_dtypes_dataset, all_dtypes_src):
    ds = libshard.open(all_dtypes_dataset)
    sources = sorted(all_dtypes_src.glob("*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    assert len(ds) == len(sources)
    dtypes = {f.dtype for f in ds.schema.fields}
    assert {torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2, torch.uint64} <= dtypes
    for i, src in enumerate(sources):
        got = ds[i]
        assert_sample_equal(got, torch.load(src, weights_only=True), f"sample {i}")
        assert got["scalar_f32"].dim() == 0
        assert got["empty_f32"].shape == (0, 5)


def test_negative_index_and_index_error(eagle_dataset):
    ds = libshard.open(eagle_dataset)
    assert tensor_bytes(ds[-1]["input_ids"]) == tensor_bytes(ds[len(ds) - 1]["input_ids"])
    assert tensor_bytes(ds[np.int64(3)]["input_ids"]) == tensor_bytes(ds[3]["input_ids"])
    with pytest.raises(IndexError, match=f"{len(ds)} samples"):
        ds[len(ds)]
    with pytest.raises(IndexError):
        ds[-len(ds) - 1]
    # A for loop over a map-style dataset stops at IndexError / len.
    assert sum(1 for _ in ds) == len(ds)


def test_schema_lengths_sources(eagle_dataset, eagle_src, eagle_sources):
    ds = libshard.open(eagle_dataset)
    schema = ds.schema
    assert schema.names == ["input_ids", "loss_mask", "aux_hidden_state", "hidden_state"]
    assert schema["hidden_state"].dtype == torch.bfloat16
    assert schema["hidden_state"].rank == 3
    assert schema["hidden_state"].seq_dim == 1
    assert schema["input_ids"].seq_dim == 0
    assert schema.length_field == "input_ids"

    lengths = ds.lengths
    assert isinstance(lengths, np.ndarray) and lengths.dtype == np.int64
    assert lengths.shape == (N_EAGLE,)
    for i, src in enumerate(eagle_sources):
        assert lengths[i] == torch.load(src, weights_only=True)["input_ids"].shape[0]
        # Natural order: data_2 before data_10, across the rows_* groups.
        assert ds.source(i) == str(src.relative_to(eagle_src))
        prov = ds.source_file(i)
        assert prov["size"] == src.stat().st_size
        assert ds.metadata(i) == {}


def test_tensors_writable_no_warning_and_outlive_dataset(eagle_dataset, eagle_sources):
    ds = libshard.open(eagle_dataset)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch.frombuffer warns on read-only buffers
        sample = ds[5]
    del ds
    gc.collect()
    # Churn the allocator so freed memory would be overwritten.
    junk = [bytearray(1 << 16) for _ in range(64)]
    del junk
    assert_sample_equal(sample, torch.load(eagle_sources[5], weights_only=True))
    # Writes touch only this sample's private buffer.
    sample["input_ids"][0] = -7
    assert int(sample["input_ids"][0]) == -7


def test_reads_are_independent_copies(eagle_dataset):
    ds = libshard.open(eagle_dataset)
    a, b = ds[0], ds[0]
    a["loss_mask"].fill_(9)
    assert not torch.equal(a["loss_mask"], b["loss_mask"])


def test_pickle_reopens_by_path(eagle_dataset):
    ds = libshard.open(eagle_dataset)
    blob = pickle.dumps(ds)
    assert len(blob) < 1000  # only the path and options, no data
    ds2 = pickle.loads(blob)
    assert len(ds2) == len(ds)
    assert_sample_equal(ds2[7], ds[7])


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_torch_dataloader_with_workers(eagle_dataset, eagle_sources, context):
    ds = libshard.open(eagle_dataset)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, shuffle=False, num_workers=2,
                                         multiprocessing_context=context)
    seen = 0
    for i, sample in enumerate(loader):
        assert_sample_equal(sample, torch.load(eagle_sources[i], weights_only=True), f"sample {i}")
        seen += 1
    assert seen == N_EAGLE


def test_torch_dataloader_batched_with_custom_collate(eagle_dataset):
    ds = libshard.open(eagle_dataset)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=True, num_workers=0,
                                         collate_fn=libshard.pad_collate)
    batches = list(loader)
    assert len(batches) == N_EAGLE // 4
    for batch in batches:
        assert batch["input_ids"].shape[0] == 4
        assert batch["hidden_state"].shape[:2] == batch["input_ids"].shape
        assert batch["lengths"].max() == batch["input_ids"].shape[1]


def test_verify_all(eagle_dataset):
    ds = libshard.open(eagle_dataset)
    ds.verify()
    ds.verify(3)


def test_non_tensor_entries_round_trip(tmp_path):
    """Strings, ints, floats and bools of the source dict come back as metadata and in ds[i]."""
    from conftest import pack_dir
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        torch.save({"conversation_id": f"conv-{i}", "input_ids": torch.arange(4 + i),
                    "turns": i, "score": 0.25 * i, "ok": bool(i % 2)}, src / f"{i}.pt")
    ds = libshard.open(pack_dir(src, tmp_path / "ds"))
    for i in range(3):
        want = torch.load(src / f"{i}.pt", weights_only=True)
        got = ds[i]
        assert set(got) == set(want)
        assert list(got)[0] == "input_ids"  # tensors first, in file order; then metadata
        assert torch.equal(got["input_ids"], want["input_ids"])
        meta = {k: v for k, v in want.items() if not isinstance(v, torch.Tensor)}
        assert ds.metadata(i) == meta
        assert {k: got[k] for k in meta} == meta
        assert type(got["turns"]) is int and type(got["ok"]) is bool
    assert "turns" not in libshard.open(ds.path, metadata=False)[0]
    loader = libshard.Loader(ds, shuffle=False, memory_budget="1MiB")
    assert [s["conversation_id"] for s in loader] == ["conv-0", "conv-1", "conv-2"]
