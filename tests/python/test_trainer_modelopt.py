"""libshard.modelopt against ModelOpt 0.47's own OfflineSupervisedDataset and
EagleOfflineDataCollator (run with the trainers' environment: tests/python/trainers_util.py)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from trainers_util import (assert_opens_dataset_files_only, assert_same, cli_pack, opened_files,
                           require, under)

eagle_utils = require("modelopt.torch.speculative.eagle.utils", "ModelOpt (nvidia-modelopt 0.47)")
import libshard  # noqa: E402
import libshard.modelopt as lm  # noqa: E402

N = 30
H = 16
TRAIN_LEN = 24  # shorter than some samples: the collator truncates those, pads the others


def _write_dump(root: Path, n: int = N, seed: int = 3) -> None:
    """A ModelOpt-style dump: <conversation_id>.pt in two folders, lengths 5..40."""
    g = torch.Generator().manual_seed(seed)
    for i in range(n):
        s = 5 + (i * 11) % 36
        sub = root / ("b" if i % 3 == 0 else "a")
        sub.mkdir(parents=True, exist_ok=True)
        torch.save({
            "input_ids": torch.randint(0, 1000, (s,), generator=g),
            "hidden_states": torch.randn(s, H, generator=g).bfloat16(),
            "aux_hidden_states": torch.randn(s, 3 * H, generator=g).bfloat16(),
            "loss_mask": (torch.rand(s, generator=g) > 0.4).long(),
            "conversation_id": f"conv-{i}",
        }, sub / f"conv-{i}.pt")


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    root = tmp_path_factory.mktemp("modelopt")
    src = root / "dump"
    _write_dump(src)
    return src, cli_pack(src, root / "packed")


def _native(src: Path, ds: "lm.OfflineDataset", answer_only_loss: bool):
    # ModelOpt's reader over the same files, listed in the libshard dataset's order.
    return eagle_utils.OfflineSupervisedDataset([str(src / f) for f in ds.dumped_files],
                                                answer_only_loss=answer_only_loss)


@pytest.mark.parametrize("answer_only_loss", [False, True])
def test_items_equal_modelopt(dump, answer_only_loss):
    src, packed = dump
    ds = lm.OfflineDataset(packed, answer_only_loss=answer_only_loss)
    native = _native(src, ds, answer_only_loss)
    assert len(ds) == len(native) == N
    assert isinstance(ds, eagle_utils.OfflineSupervisedDataset)
    assert sorted(ds.dumped_files) == sorted(str(p.relative_to(src)) for p in src.rglob("*.pt"))
    for i in range(N):
        assert_same(ds[i], native[i], f"sample {i}")


def test_batches_equal_modelopt_two_epochs_two_ranks(dump):
    src, packed = dump
    ds = lm.OfflineDataset(packed, answer_only_loss=True)
    native = _native(src, ds, True)
    collate = eagle_utils.EagleOfflineDataCollator(train_len=TRAIN_LEN)
    batches = 0
    for rank in range(2):
        loaders = []
        for d in (ds, native):
            # What a distributed Hugging Face Trainer run draws: a seeded shuffle per epoch,
            # split across the ranks.
            sampler = torch.utils.data.DistributedSampler(d, num_replicas=2, rank=rank,
                                                          shuffle=True, seed=7)
            loaders.append((sampler, torch.utils.data.DataLoader(
                d, batch_size=4, sampler=sampler, collate_fn=collate, drop_last=False)))
        for epoch in range(2):
            for sampler, _ in loaders:
                sampler.set_epoch(epoch)
            got, want = (list(loader) for _, loader in loaders)
            assert len(got) == len(want) == 4
            for b, (g, w) in enumerate(zip(got, want)):
                assert_same(g, w, f"rank {rank} epoch {epoch} batch {b}")
                assert g["input_ids"].shape == (min(4, 15 - 4 * b), TRAIN_LEN)
                batches += 1
    assert batches == 16


@pytest.mark.parametrize("answer_only_loss", [False, True])
@pytest.mark.parametrize("train_len", [TRAIN_LEN, 64])
def test_cpp_batches_equal_modelopt_collator(dump, answer_only_loss, train_len):
    """collate='modelopt-eagle': every batch of two epochs on two ranks is, key for key and
    byte for byte, EagleOfflineDataCollator(train_len) over OfflineSupervisedDataset's items of
    the same samples (the stored loss_mask read with answer_only_loss, ones without)."""
    src, packed = dump
    ds = lm.OfflineDataset(packed, answer_only_loss=answer_only_loss)
    collate = eagle_utils.EagleOfflineDataCollator(train_len=train_len)
    fields = ["input_ids", "hidden_states", "aux_hidden_states"]
    if answer_only_loss:
        fields.append("loss_mask")
    batches = 0
    for rank in range(2):
        loader = libshard.Loader(packed, batch_size=4, collate="modelopt-eagle",
                                 recipe_len=train_len, fields=fields, seed=3, rank=rank,
                                 world_size=2, return_index=True)
        for epoch in range(2):
            loader.set_epoch(epoch)
            for b, got in enumerate(loader):
                indices = got.pop("__index__").tolist()
                want = collate([ds[i] for i in indices])
                # The module's conversion: nested base_model_outputs, base_hidden_prenorm
                # from the samples' metadata, the metadata itself dropped.
                assert "conversation_id" in got
                assert_same(lm._modelopt_batch(got), want, f"rank {rank} epoch {epoch} batch {b}")
                batches += 1
    assert batches == 2 * 2 * 4


@pytest.mark.parametrize("batches", ["cpp", "trainer"])
@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_drop_in_equals_modelopt(dump, batches, workers):
    """libshard.modelopt.DataLoader (C++ batches, or ModelOpt's collator over items read ahead
    in the sampler's order, in the DataLoader's workers too) gives the batches a torch
    DataLoader with EagleOfflineDataCollator gives over ModelOpt's own reader: two epochs, two
    ranks of a DistributedSampler."""
    src, packed = dump
    ds = lm.OfflineDataset(packed, answer_only_loss=True)
    native = _native(src, ds, True)
    collate = eagle_utils.EagleOfflineDataCollator(train_len=TRAIN_LEN)
    for rank in range(2):
        samplers = [torch.utils.data.DistributedSampler(d, num_replicas=2, rank=rank,
                                                        shuffle=True, seed=7)
                    for d in (ds, native)]
        mine = lm.DataLoader(ds, batch_size=4, sampler=samplers[0], collate_fn=collate,
                             num_workers=workers, batches=batches)
        theirs = torch.utils.data.DataLoader(native, batch_size=4, sampler=samplers[1],
                                             collate_fn=collate)
        assert len(mine) == len(theirs) == 4
        for epoch in range(2):
            for sampler in samplers:
                sampler.set_epoch(epoch)
            assert_same(list(mine), list(theirs), f"rank {rank} epoch {epoch}")


def test_dataloader_says_why_it_uses_modelopts_collator(dump, caplog):
    src, packed = dump
    ds = lm.OfflineDataset(packed)

    def my_collate(items):
        return len(items)

    with caplog.at_level("WARNING", logger="libshard"):
        assert list(lm.DataLoader(ds, batch_size=8, collate_fn=my_collate)) == [8, 8, 8, 6]
    assert any("EagleOfflineDataCollator" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValueError, match="batches='cpp'"):
        list(lm.DataLoader(ds, batch_size=8, collate_fn=my_collate, batches="cpp"))


def test_sample_size_pickle_and_errors(dump):
    src, packed = dump
    ds = lm.OfflineDataset(packed, sample_size=7)
    assert len(ds) == 7 and len(ds.dumped_files) == 7
    again = pickle.loads(pickle.dumps(ds))
    assert len(again) == 7
    assert_same(again[6], ds[6], "pickled")
    assert_same(ds[-1], ds[6], "negative index")
    with pytest.raises(IndexError):
        ds[7]
    with pytest.raises(ValueError):
        lm.OfflineDataset(packed, sample_size=0)
    module = lm.data_module(packed, TRAIN_LEN)
    assert isinstance(module["data_collator"], eagle_utils.EagleOfflineDataCollator)
    assert len(module["train_dataset"]) == N


def test_answer_only_loss_without_loss_mask_fails_at_open(tmp_path):
    """The schema ModelOpt's reader needs is checked at open (issue 33): a dump without
    loss_mask and answer_only_loss names the field and ModelOpt there, not a KeyError or
    ValueError at the first read; with a tokenizer (whose loss-mask recovery may stand in) the
    per-sample rule names the sample."""
    src = tmp_path / "dump"
    src.mkdir()
    for i in range(2):
        torch.save({"input_ids": torch.arange(6), "hidden_states": torch.zeros(6, H).bfloat16(),
                    "aux_hidden_states": torch.zeros(6, 3 * H).bfloat16()}, src / f"c{i}.pt")
    packed = cli_pack(src, tmp_path / "packed")
    with pytest.raises(KeyError, match=r"loss_mask.*ModelOpt"):
        lm.OfflineDataset(packed, answer_only_loss=True)

    class NoRecovery:  # a tokenizer without a registered loss-mask recovery
        name_or_path = "none"

    ds = lm.OfflineDataset(packed, answer_only_loss=True, tokenizer=NoRecovery())
    with pytest.raises(ValueError, match="c1.pt"):
        ds[1]
    plain = lm.OfflineDataset(tmp_path / "packed")
    assert bool(plain[0]["loss_mask"].all())


def test_missing_fields_fail_at_open(tmp_path):
    src = tmp_path / "dump"
    src.mkdir()
    torch.save({"input_ids": torch.arange(6), "hidden_states": torch.zeros(6, H).bfloat16()},
               src / "c0.pt")
    with pytest.raises(KeyError, match=r"aux_hidden_states.*ModelOpt"):
        lm.OfflineDataset(cli_pack(src, tmp_path / "packed"))


def test_startup_opens_no_sample_file(dump):
    src, packed = dump
    code = (f"import libshard.modelopt as lm\n"
            f"ds = lm.OfflineDataset({str(packed)!r}, answer_only_loss=True)\n"
            f"assert len(ds) == {N}\n")
    opened = opened_files(code)
    assert under(opened, src) == []
    assert_opens_dataset_files_only(opened, packed)
