"""libshard.speculators against speculators 0.9.0 / hs-connectors 0.9.0: the `libshard` backend's
get_cached equals the `file` and `fp8` backends', and speculators' own ArrowDataset, multipack
sampler and collate give the same batches (run with the trainers' environment:
tests/python/trainers_util.py)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainers_util import (assert_opens_dataset_files_only, assert_same, cli_pack, opened_files,
                           require, under)

hs = require("hs_connectors", "hs-connectors 0.9.0")
require("speculators.train.data", "speculators 0.9.0")
import libshard.speculators as lsp  # noqa: E402
from hs_connectors.fp8_utils import SCALES_KEY, quantize_tensor_to_fp8  # noqa: E402
from speculators.train import dataloader as sp_loader  # noqa: E402
from speculators.train.data import ArrowDataset  # noqa: E402

N = 14          # hs_10.. sort before hs_2 as strings: the row <-> sample map must not care
H = 16
LAYERS = 3      # aux layers; the file holds LAYERS + 1 (the final layer last)
SEQ = 64        # multipack budget


def write_speculators_dir(root: Path, n: int = N, fp8: bool = False, missing=()) -> Path:
    """speculators' data directory: an Arrow dataset (save_to_disk) of input_ids, loss_mask,
    seq_len, and hidden_states/hs_{i}.safetensors for row i."""
    import datasets
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(9)
    rows = {"input_ids": [], "loss_mask": [], "seq_len": []}
    (root / "hidden_states").mkdir(parents=True)
    for i in range(n):
        s = 5 + (i * 7) % 20
        ids = torch.randint(0, 300, (s,), generator=g)
        rows["input_ids"].append(ids.tolist())
        rows["loss_mask"].append((torch.rand(s, generator=g) > 0.3).long().tolist())
        rows["seq_len"].append(s)
        states = torch.randn(s, LAYERS + 1, H, generator=g).bfloat16()
        sample = {"hidden_states": states, "token_ids": ids}
        if fp8:
            q, scale = quantize_tensor_to_fp8(states)
            sample = {"hidden_states": q, SCALES_KEY: scale, "token_ids": ids}
        if i not in missing:
            save_file(sample, str(root / "hidden_states" / f"hs_{i}.safetensors"))
    ds = datasets.Dataset.from_dict(rows)
    ds.set_format("torch")
    ds.save_to_disk(str(root))
    return root


@pytest.fixture(scope="module", params=["bf16", "fp8"])
def data(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"speculators_{request.param}")
    fp8 = request.param == "fp8"
    data_dir = write_speculators_dir(root / "data", fp8=fp8)
    packed = cli_pack(data_dir / "hidden_states", data_dir / "hidden_states.libshard")
    native = (hs.FP8Transfer if fp8 else hs.FileTransfer)(data_dir / "hidden_states")
    return data_dir, packed, native


def test_get_cached_equals_file_backend(data):
    data_dir, packed, native = data
    mine = lsp.LibshardTransfer(packed)
    for i in range(N):
        got, want = mine.get_cached(i), native.get_cached(i)
        assert sorted(got) == sorted(want) == ["hidden_states", "token_ids"]
        assert_same({k: got[k] for k in sorted(got)}, {k: want[k] for k in sorted(want)},
                    f"hs_{i}")
        assert got["hidden_states"].dtype == torch.bfloat16
    assert mine.get_cached(N) is None and native.get_cached(N) is None
    # `libshard pack`'s natural sort keeps hs_{i} as sample i when no file is missing.
    assert [mine.sample_index(i) for i in range(N)] == list(range(N))


def test_rows_follow_file_names_not_positions(tmp_path):
    data_dir = write_speculators_dir(tmp_path / "data", missing={5})
    packed = cli_pack(data_dir / "hidden_states", tmp_path / "packed")
    mine, native = lsp.LibshardTransfer(packed), hs.FileTransfer(data_dir / "hidden_states")
    assert mine.get_cached(5) is None and native.get_cached(5) is None
    for i in (4, 6, 10, 13):
        assert_same(mine.get_cached(i)["hidden_states"], native.get_cached(i)["hidden_states"],
                    f"hs_{i}")
    assert mine.sample_index(13) != 13  # one file fewer before it: position and row differ


def test_backend_registered_and_picklable(data):
    data_dir, packed, _ = data
    assert hs.HiddenStatesBackend.registry["libshard"] is lsp.LibshardBackend
    import argparse

    parser = argparse.ArgumentParser()
    lsp.LibshardBackend.add_train_args(parser)
    args = parser.parse_args([])
    transfer = lsp.LibshardBackend.from_train_args(args, str(data_dir))
    assert transfer.path == str(packed.resolve())  # DATA/hidden_states.libshard by default
    again = pickle.loads(pickle.dumps(transfer))
    assert again._ds is None  # opened lazily, in the worker
    assert_same(again.get_cached(3), transfer.get_cached(3), "unpickled")


def _loader(dataset, rank, monkeypatch, num_workers=0):
    monkeypatch.setattr(sp_loader, "get_dp_size", lambda: 2)
    monkeypatch.setattr(sp_loader, "get_dp_rank", lambda: rank)
    from speculators.models.eagle3.data import shift_batch

    return sp_loader._setup_dataloader(dataset, SEQ, H, num_workers=num_workers,
                                       num_target_layers=LAYERS, prefetch_factor=None,
                                       preprocess=shift_batch, seed=4)


def test_batches_equal_two_epochs_two_ranks(data, monkeypatch):
    data_dir, packed, native = data
    datasets_ = [ArrowDataset(SEQ, str(data_dir), transfer=t, on_missing="raise")
                 for t in (lsp.LibshardTransfer(packed), native)]
    batches = 0
    for rank in range(2):
        loaders = [_loader(d, rank, monkeypatch) for d in datasets_]
        for epoch in range(2):
            for loader in loaders:
                loader.batch_sampler.set_epoch(epoch)
            got, want = ([b for b in loader] for loader in loaders)
            assert len(got) == len(want) > 0
            for b, (g, w) in enumerate(zip(got, want)):
                assert_same(g, w, f"rank {rank} epoch {epoch} batch {b}")
                batches += 1
    assert batches >= 4


@pytest.mark.parametrize("total_seq_len", [SEQ, 16])
def test_cpp_batches_equal_speculators_collate(data, total_seq_len):
    """collate='speculators-eagle3': every batch of two epochs on two ranks is, key for key and
    byte for byte, speculators' CollateFn over shift_batch of ArrowDataset's items of the same
    rows (bf16 and fp8 dumps; a budget that truncates and drops samples), but for the loss mask
    and error count, which the recipe leaves to libshard.speculators (from the Arrow rows)."""
    import libshard
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.data import CollateFn

    data_dir, packed, native = data
    transfer = lsp.LibshardTransfer(packed)
    row_of = {transfer.sample_index(i): i for i in range(N)}
    dataset = ArrowDataset(SEQ, str(data_dir), transfer=native, on_missing="raise")
    collate = CollateFn(total_seq_len, H, num_target_layers=LAYERS, preprocess=shift_batch)
    batches = 0
    for rank in range(2):
        loader = libshard.Loader(packed, batch_size=3, collate="speculators-eagle3",
                                 recipe_len=total_seq_len, seed=2, rank=rank, world_size=2,
                                 return_index=True)
        for epoch in range(2):
            loader.set_epoch(epoch)
            for b, got in enumerate(loader):
                rows = [row_of[i] for i in got.pop("__index__").tolist()]
                want = collate([dataset[r] for r in rows])
                del want["loss_mask"], want["error_records"]
                assert_same(got, want, f"rank {rank} epoch {epoch} batch {b}")
                batches += 1
    assert batches == 2 * 2 * 3


@pytest.mark.parametrize("batches", ["cpp", "trainer"])
def test_train_loader_drop_in_equals_speculators(data, monkeypatch, batches):
    """libshard.speculators.train_loader over speculators' own sampler and collate (C++
    batches, or speculators' DataLoader over rows read ahead in the sampler's order): the
    batches of speculators' DataLoader over the file/fp8 backend, two epochs on two ranks."""
    data_dir, packed, native = data
    mine = ArrowDataset(SEQ, str(data_dir), transfer=lsp.LibshardTransfer(packed),
                        on_missing="raise")
    ref = ArrowDataset(SEQ, str(data_dir), transfer=native, on_missing="raise")
    for rank in range(2):
        base = _loader(mine, rank, monkeypatch)
        got_loader = lsp.train_loader(mine, base.batch_sampler, base.collate_fn,
                                      batches=batches,
                                      fallback=lambda: lsp.read_ahead_loader(base))
        if batches == "cpp":
            assert isinstance(got_loader, lsp.PackedLoader)
        want_loader = _loader(ref, rank, monkeypatch)
        assert len(got_loader) == len(want_loader)
        for epoch in range(2):
            got_loader.batch_sampler.set_epoch(epoch)
            want_loader.batch_sampler.set_epoch(epoch)
            assert_same(list(got_loader), list(want_loader), f"rank {rank} epoch {epoch}")
    if batches == "trainer":  # speculators' collate over rows read ahead in the sampler's order
        stats = mine.transfer._open()[0].read_ahead_stats()
        assert stats is not None and stats["hits"] + stats["waits"] > 0, stats


def test_train_loader_falls_back_when_rows_differ(tmp_path, monkeypatch, caplog):
    # A row whose stored tokens differ from the Arrow input_ids is one speculators skips: the
    # C++ batches are not provably its, so speculators' own loader serves, saying why.
    data_dir = write_speculators_dir(tmp_path / "data", n=6)
    from safetensors.torch import load_file, save_file

    f = data_dir / "hidden_states" / "hs_2.safetensors"
    sample = load_file(str(f))
    sample["token_ids"] = sample["token_ids"] + 1
    save_file(sample, str(f))
    packed = cli_pack(data_dir / "hidden_states", tmp_path / "packed")
    ds = ArrowDataset(SEQ, str(data_dir), transfer=lsp.LibshardTransfer(packed), on_missing="skip")
    base = _loader(ds, 0, monkeypatch)
    with caplog.at_level("WARNING", logger="libshard"):
        got = lsp.train_loader(ds, base.batch_sampler, base.collate_fn, fallback=lambda: base)
    assert got is base
    assert any("hs_2" in r.getMessage() for r in caplog.records), caplog.records
    with pytest.raises(ValueError, match="batches='cpp'"):
        lsp.train_loader(ds, base.batch_sampler, base.collate_fn, batches="cpp")


def test_spawned_workers_open_the_dataset_themselves(data, monkeypatch):
    data_dir, packed, native = data
    mine = ArrowDataset(SEQ, str(data_dir), transfer=lsp.LibshardTransfer(packed),
                        on_missing="raise")
    ref = ArrowDataset(SEQ, str(data_dir), transfer=native, on_missing="raise")
    got = list(_loader(mine, 0, monkeypatch, num_workers=1))  # spawn: the transfer pickles
    want = list(_loader(ref, 0, monkeypatch))
    assert_same(got, want, "spawned")


def test_startup_opens_no_sample_file(data):
    data_dir, packed, _ = data
    code = (f"import libshard.speculators as lsp\n"
            f"t = lsp.LibshardTransfer({str(packed)!r})\n"
            f"assert t.get_cached(0) is not None\n")
    opened = opened_files(code)
    assert under(opened, data_dir / "hidden_states") == []
    assert_opens_dataset_files_only(opened, packed)


# -- speculators' own training entry: the same losses with the libshard backend ---------------
def _verifier(root: Path) -> Path:
    """A local verifier as speculators reads it: config.json and the embedding, lm_head and norm
    weights behind a safetensors index."""
    from safetensors.torch import save_file

    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
        "intermediate_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2,
        "num_hidden_layers": 4, "vocab_size": 300, "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6, "hidden_act": "silu", "torch_dtype": "bfloat16",
        "tie_word_embeddings": False}))
    g = torch.Generator().manual_seed(2)
    w = {"lm_head.weight": torch.randn(300, H, generator=g).bfloat16(),
         "model.embed_tokens.weight": torch.randn(300, H, generator=g).bfloat16(),
         "model.norm.weight": torch.ones(H).bfloat16()}
    save_file(w, str(root / "model.safetensors"))
    (root / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: "model.safetensors" for k in w}}))
    return root


def test_training_entry_same_losses(tmp_path):
    data_dir = write_speculators_dir(tmp_path / "data", n=24)
    cli_pack(data_dir / "hidden_states", data_dir / "hidden_states.libshard")
    verifier = _verifier(tmp_path / "verifier")
    args = ["--verifier-name-or-path", str(verifier), "--data-path", str(data_dir),
            "--speculator-type", "eagle3", "--num-layers", "1", "--draft-arch", "llama",
            "--target-layer-ids", "0", "1", "2", "--mask-token-id", "0",
            "--draft-attn-impl", "sdpa", "--loss-implementation", "eager",
            "--total-seq-len", str(SEQ), "--num-workers", "0", "--epochs", "1",
            "--max-steps", "4", "--log-freq", "1", "--lr", "1e-3", "--seed", "0",
            "--train-data-ratio", "0.75", "--scheduler-type", "none",
            "--no-resume-from-checkpoint"]
    runs = {}
    for which in ("native", "libshard"):
        metrics = tmp_path / f"metrics.{which}.jsonl"
        extra = ["--hidden-states-backend", "libshard"] if which == "libshard" else []
        env = dict(os.environ, OMP_NUM_THREADS="1", TORCHDYNAMO_DISABLE="1",
                   SPECULATORS_METRICS=str(metrics),
                   PYTHONPATH=os.pathsep.join([str(Path(__file__).parent)] +
                                              os.environ.get("PYTHONPATH", "").split(os.pathsep)))
        proc = subprocess.run([sys.executable, str(Path(__file__).parent / "speculators_runner.py"),
                               which, "train", *args, "--save-path", str(tmp_path / f"out-{which}"),
                               *extra], env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{which}: {proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        # libshard's default: batches built in C++ (it says so when it falls back).
        assert "own DataLoader and collate build" not in proc.stderr, proc.stderr[-3000:]
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        runs[which] = [r for r in rows if isinstance(r.get("train"), dict) or "val" in r]
    native, mine = runs["native"], runs["libshard"]
    train_steps = [r for r in native if isinstance(r.get("train"), dict)]
    assert len(train_steps) == 4, native
    assert len(mine) == len(native)
    for n, m in zip(native, mine):
        for group in ("train", "val"):
            if group in n:
                want = {k: v for k, v in n[group].items() if "loss" in k or "acc" in k}
                assert want, n[group]
                assert {k: m[group][k] for k in want} == want, (n.get("global_step"), group)


def test_pack_of_the_whole_data_directory(tmp_path):
    # `libshard pack DATA`: only the hidden-state files are packed (the Arrow files are not
    # tensors files), as hidden_states/hs_{i}.safetensors; rows still map by name.
    data_dir = write_speculators_dir(tmp_path / "data", n=12)
    packed = cli_pack(data_dir, tmp_path / "packed")
    mine, native = lsp.LibshardTransfer(packed), hs.FileTransfer(data_dir / "hidden_states")
    assert [mine.sample_index(i) for i in range(12)] == list(range(12))
    for i in range(12):
        assert_same(mine.get_cached(i)["hidden_states"], native.get_cached(i)["hidden_states"],
                    f"hs_{i}")
