"""libshard.specforge against SpecForge 0.2.0's own reader, store, sharding, normalization,
collate and loader (run with the trainers' environment: tests/python/trainers_util.py)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainers_util import (assert_opens_dataset_files_only, assert_same, cli_pack, opened_files,
                           require, under)

require("specforge.runtime.data_plane", "SpecForge (specforge 0.2.0)")
import libshard  # noqa: E402
import libshard.specforge as ls  # noqa: E402
from specforge import launch as sf_launch  # noqa: E402
from specforge.algorithms.builtin import builtin_algorithm_registry  # noqa: E402
from specforge.runtime.data_plane import FeatureDataLoader, LocalFeatureStore  # noqa: E402
from specforge.runtime.data_plane.offline_reader import OfflineManifestReader  # noqa: E402
from specforge.training import vocab_mapping  # noqa: E402

N = 26
H = 16
MAX_LEN = 24  # shorter than some samples: the normalizer truncates them


def write_specforge_dir(root: Path, n: int = N, hidden: int = H, seed: int = 5, vocab: int = 500,
                        lengths=None) -> None:
    """prepare_hidden_states.py's layout: rows_{g}-{g+2000}/data_{idx}.ckpt (groups of 8 here),
    so SpecForge's string sort (rows_16 before rows_8, data_10 before data_2) differs from a
    natural sort."""
    g = torch.Generator().manual_seed(seed)
    for idx in range(n):
        grp = (idx // 8) * 8
        d = root / f"rows_{grp}-{grp + 8}"
        d.mkdir(parents=True, exist_ok=True)
        s = lengths[idx] if lengths else 6 + (idx * 13) % 30
        torch.save({"input_ids": torch.randint(0, vocab, (s,), generator=g),
                    "loss_mask": (torch.rand(s, generator=g) > 0.3).long(),
                    "aux_hidden_state": torch.randn(1, s, 3 * hidden, generator=g).bfloat16(),
                    "hidden_state": torch.randn(1, s, hidden, generator=g).bfloat16()},
                   d / f"data_{idx}.ckpt")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("specforge")
    src = root / "features"
    write_specforge_dir(src)
    return src, cli_pack(src, root / "features.libshard")


def _strip(ref):
    return {k: v for k, v in vars(ref).items() if k != "feature_store_uri"}


def test_refs_match_specforge_reader(data):
    src, packed = data
    native = OfflineManifestReader(str(src), run_id="r", ttt_length=5, max_len=MAX_LEN).read()
    mine = ls.refs(packed, run_id="r", ttt_length=5, max_len=MAX_LEN)
    assert len(mine) == len(native) == N
    assert [_strip(r) for r in mine] == [_strip(r) for r in native]
    ds = ls.FeatureStore(packed).dataset(packed)
    for m, n in zip(mine, native):
        path, index = m.feature_store_uri[len(ls.URI_SCHEME):].rsplit("#", 1)
        assert path == str(packed.resolve())
        assert n.feature_store_uri == f"file://{src.resolve() / ds.source(int(index))}"
    # SpecForge's string order, not the pack's natural one.
    names = [os.path.basename(r.feature_store_uri) for r in native]
    assert names.index("data_16.ckpt") < names.index("data_8.ckpt")
    assert ls.refs(packed, limit=3) == ls.refs(packed)[:3]


def test_store_get_matches_local_store(data):
    src, packed = data
    native = OfflineManifestReader(str(src)).read()
    mine = ls.refs(packed)
    local, store = LocalFeatureStore("n"), ls.FeatureStore(packed)
    for m, n in zip(mine, native):
        got, handle = store.get(m)
        want, _ = local.get(n)
        assert_same(got, want, m.sample_id)
        store.release(handle)
        sub, h2 = store.get(m, names=["input_ids"])
        assert list(sub) == ["input_ids"]
        store.release(h2)
    assert store.health()["active_leases"] == 0
    # Refs it does not own go to SpecForge's LocalFeatureStore.
    got, h = store.get(native[0])
    assert_same(got, local.get(native[0])[0], "file:// ref")
    store.release(h)


def test_batches_equal_specforge_two_epochs_two_ranks(data):
    src, packed = data
    algorithm = builtin_algorithm_registry().resolve("eagle3")
    collate, normalize = sf_launch._offline_io(algorithm, "text", MAX_LEN, ttt_length=7,
                                               use_usp_preprocess=False)
    native_refs = OfflineManifestReader(str(src), max_len=MAX_LEN).read()
    lib_refs = ls.refs(packed, max_len=MAX_LEN)
    batches = 0
    for rank in range(2):
        for epoch in range(2):
            got_want = []
            for store, refs in ((ls.FeatureStore(packed), lib_refs),
                                (LocalFeatureStore("n"), native_refs)):
                shard = sf_launch._shard_offline_refs(refs, use_usp_preprocess=False, seed=11,
                                                      epoch=epoch, dp_rank=rank, dp_size=2)
                loader = FeatureDataLoader(store, refs=shard, batch_size=3, collate_fn=collate,
                                           per_sample_transform=normalize, strategy="eagle3",
                                           ack=False, num_workers=2)
                got_want.append([(b.sample_ids, b.tensors, b.metadata) for b in loader])
            got, want = got_want
            assert len(got) == len(want) == 13 // 3
            for b, (g, w) in enumerate(zip(got, want)):
                assert_same(g, w, f"rank {rank} epoch {epoch} batch {b}")
                assert set(g[1]) >= {"input_ids", "loss_mask", "hidden_state", "target"}
                batches += 1
    assert batches == 16


@pytest.mark.parametrize("max_len", [MAX_LEN, 1000])
def test_cpp_batches_equal_specforge_collate(data, max_len):
    """collate='specforge-eagle3': every batch of two epochs on two ranks is, key for key and
    byte for byte, SpecForge's DataCollatorWithPadding over normalize_offline_sample of the same
    samples (max_len shorter and longer than the samples)."""
    from functools import partial

    from specforge.algorithms.eagle3.data import normalize_offline_sample
    from specforge.data.utils import DataCollatorWithPadding

    src, packed = data
    ds = libshard.Dataset(packed)
    normalize = partial(normalize_offline_sample, max_len=max_len)
    collate = DataCollatorWithPadding()
    batches = 0
    for rank in range(2):
        loader = libshard.Loader(packed, batch_size=3, collate="specforge-eagle3",
                                 recipe_len=max_len, seed=11, rank=rank, world_size=2,
                                 return_index=True)
        for epoch in range(2):
            loader.set_epoch(epoch)
            for b, got in enumerate(loader):
                indices = got.pop("__index__").tolist()
                want = collate([normalize(ds[i]) for i in indices])
                assert_same(got, want, f"rank {rank} epoch {epoch} batch {b}")
                batches += 1
    assert batches == 2 * 2 * 5


def _train_batches(loader):
    return [(b.sample_ids, b.tensors, b.metadata) for b in loader]


@pytest.mark.parametrize("batches", ["cpp", "trainer"])
def test_feature_dataloader_drop_in_equals_specforge(data, batches):
    """libshard.specforge.FeatureDataLoader, with the batches built in C++ (cpp) or by
    SpecForge's own collate over samples read ahead in the refs' order (trainer): the same
    TrainBatches as SpecForge's FeatureDataLoader over its own reader, two epochs on two ranks,
    and after a seek."""
    src, packed = data
    algorithm = builtin_algorithm_registry().resolve("eagle3")
    collate, normalize = sf_launch._offline_io(algorithm, "text", MAX_LEN, ttt_length=7,
                                               use_usp_preprocess=False)
    native_refs = OfflineManifestReader(str(src), max_len=MAX_LEN).read()
    lib_refs = ls.refs(packed, max_len=MAX_LEN)
    store = ls.FeatureStore(packed)
    batches_seen = 0
    for rank in range(2):
        for epoch in range(2):
            def shard(refs):
                return sf_launch._shard_offline_refs(refs, use_usp_preprocess=False, seed=11,
                                                     epoch=epoch, dp_rank=rank, dp_size=2)

            kw = dict(batch_size=3, collate_fn=collate, per_sample_transform=normalize,
                      strategy="eagle3", ack=False, num_workers=2)
            want_loader = FeatureDataLoader(LocalFeatureStore("n"), refs=shard(native_refs), **kw)
            got_loader = ls.FeatureDataLoader(store, refs=shard(lib_refs), batches=batches, **kw)
            want = _train_batches(want_loader)
            got = _train_batches(got_loader)
            assert len(got) == len(want) == 13 // 3
            assert_same(got, want, f"rank {rank} epoch {epoch}")
            batches_seen += len(got)
            kept = got_loader.__dict__.get("_libshard_loaders")
            kept = kept._idle[0] if kept is not None else None
            assert (kept is not None) == (batches == "cpp")
            want_loader.seek(2)
            got_loader.seek(2)
            assert_same(_train_batches(got_loader), _train_batches(want_loader), "after seek")
            if kept is not None:  # the next iteration streamed through the same C++ loader
                assert got_loader._libshard_loaders._idle[0] is kept
                got_loader.close()
                assert kept._core is None
    assert batches_seen == 16
    if batches == "trainer":
        stats = store.dataset(packed).read_ahead_stats()
        assert stats is not None and stats["hits"] + stats["waits"] > 0, stats


def test_feature_dataloader_says_why_it_uses_specforges_collate(data, caplog):
    src, packed = data
    refs = ls.refs(packed, max_len=MAX_LEN)
    store = ls.FeatureStore(packed)

    def my_collate(features):
        return {"n": torch.tensor([len(features)])}

    loader = ls.FeatureDataLoader(store, refs=refs, batch_size=4, collate_fn=my_collate,
                                  strategy="eagle3", ack=False)
    with caplog.at_level("WARNING", logger="libshard"):
        assert [b.tensors["n"].item() for b in loader] == [4] * (N // 4)
        list(loader)
    notes = [r.getMessage() for r in caplog.records if "own normalizer" in r.getMessage()]
    assert len(notes) == 1 and "per_sample_transform" in notes[0], notes
    with pytest.raises(ValueError, match="batches='cpp'"):
        list(ls.FeatureDataLoader(store, refs=refs, batch_size=4, collate_fn=my_collate,
                                  strategy="eagle3", ack=False, batches="cpp"))


def test_vocab_count_from_small_fields(data):
    src, packed = data
    for max_length in (None, 10):
        got = ls.count_effective_feature_tokens(packed, max_length=max_length,
                                                target_vocab_size=500)
        want = vocab_mapping.count_effective_feature_tokens(str(src), max_length=max_length,
                                                            target_vocab_size=500)
        # Equal counts in the same insertion order: SpecForge's vocabulary map breaks ties by it.
        assert list(got.items()) == list(want.items())
        assert got.most_common() == want.most_common()
    with pytest.raises(ValueError, match="outside target vocab"):
        ls.count_effective_feature_tokens(packed, target_vocab_size=10)


def test_startup_opens_no_sample_file(data):
    src, packed = data
    code = (f"import libshard.specforge as ls\n"
            f"refs = ls.refs({str(packed)!r})\n"
            f"store = ls.FeatureStore({str(packed)!r})\n"
            f"assert len(refs) == {N}\n")
    opened = opened_files(code)
    assert under(opened, src) == []
    assert_opens_dataset_files_only(opened, packed)
    # SpecForge's own reader opens nothing either; its vocabulary count opens every file.
    native = opened_files(f"from specforge.training import vocab_mapping as v\n"
                          f"v.count_effective_feature_tokens({str(src)!r})\n")
    assert len(set(under(native, src)) & {str(p) for p in src.rglob("*.ckpt")}) == N
    mine = opened_files(f"import libshard.specforge as ls\n"
                        f"ls.count_effective_feature_tokens({str(packed)!r})\n")
    assert under(mine, src) == []
    assert_opens_dataset_files_only(mine, packed)


# -- SpecForge's own training entry: the same losses from libshard as from its reader ----------
TH = 64       # target/draft hidden size
VOCAB = 512
STEPS = 4


def _tiny_target(root: Path) -> Path:
    """A target directory as SpecForge reads it: config.json, and the lm_head / embedding weights
    behind a safetensors index."""
    from safetensors.torch import save_file

    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": TH,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
        "num_hidden_layers": 2, "vocab_size": VOCAB, "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6, "hidden_act": "silu", "torch_dtype": "bfloat16",
        "tie_word_embeddings": False}))
    g = torch.Generator().manual_seed(1)
    weights = {"lm_head.weight": torch.randn(VOCAB, TH, generator=g).bfloat16(),
               "model.embed_tokens.weight": torch.randn(VOCAB, TH, generator=g).bfloat16()}
    save_file(weights, str(root / "model.safetensors"))
    (root / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: "model.safetensors" for k in weights}}))
    return root


def _run(which: str, config: Path, tmp: Path) -> list:
    # One torchrun worker's environment: SpecForge's CLI then trains in this process.
    env = dict(os.environ, SPECFORGE_DEVICE="cpu", TORCHDYNAMO_DISABLE="1", RANK="0",
               WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(29500 + os.getpid() % 2000),
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent)] +
                                          os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    proc = subprocess.run([sys.executable, str(Path(__file__).parent / "specforge_runner.py"),
                           which, "train", "--config", str(config)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{which}: {proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    # libshard's default: batches built in C++ (it says so when it falls back to SpecForge's).
    assert "own normalizer and collate build the batches" not in proc.stderr, proc.stderr[-3000:]
    # SpecForge's console logger: "step N: {metrics}" each log_interval steps.
    rows = []
    for line in proc.stdout.splitlines() + proc.stderr.splitlines():
        m = re.match(r"^step (\d+): (\{.*\})$", line.strip())
        if m:
            rows.append({"step": int(m.group(1)), **ast.literal_eval(m.group(2))})
    return rows


def test_training_entry_same_losses(tmp_path):
    src = tmp_path / "features"
    write_specforge_dir(src, n=16, hidden=TH, vocab=VOCAB, lengths=[12 + (i * 5) % 20
                                                                     for i in range(16)])
    packed = cli_pack(src, tmp_path / "features.libshard")
    target = _tiny_target(tmp_path / "target")
    draft = tmp_path / "draft.json"
    draft.write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": TH,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
        "num_hidden_layers": 1, "vocab_size": VOCAB, "draft_vocab_size": 128,
        "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "pad_token_id": 0, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}))
    losses = {}
    for which, path in (("native", src), ("libshard", packed)):
        config = tmp_path / f"{which}.yaml"
        config.write_text(json.dumps({
            "run_id": f"t-{which}", "output_dir": str(tmp_path / f"out-{which}"),
            "model": {"target_model_path": str(target), "draft_model_config": str(draft)},
            "data": {"hidden_states_path": str(path), "max_length": 32,
                     "dataloader_num_workers": 0, "cache_dir": str(tmp_path / f"cache-{which}")},
            "training": {"batch_size": 2, "max_steps": STEPS, "num_epochs": 1,
                         "learning_rate": 1e-3, "fsdp_sharding": "NO_SHARD",
                         "attention_backend": "sdpa", "ttt_length": 2, "log_interval": 1,
                         "save_interval": 0, "seed": 0},
        }))
        losses[which] = _run(which, config, tmp_path)
    native, mine = losses["native"], losses["libshard"]
    assert len(native) == STEPS, native
    assert len(mine) == STEPS, mine
    keys = sorted(k for k in native[0] if "loss" in k or k.startswith("acc") or k == "grad_norm")
    assert keys, native[0]
    for n, m in zip(native, mine):
        assert n["step"] == m["step"]
        for k in keys:
            assert m[k] == n[k], f"step {n['step']} {k}: {m[k]} != {n[k]}"
    # SpecForge's own step-time figures are there for both readers.
    assert all("perf/data_wait_time_s" in r for r in native + mine)
    # The vocabulary map SpecForge derived from the features is the same.
    maps = [torch.load(p, weights_only=False) for p in
            sorted(tmp_path.glob("cache-*/vocab_mapping/*.pt"), key=str)]
    assert len(maps) == 2, list(tmp_path.glob("cache-*/**"))
    assert_same(maps[1], maps[0], "vocab mapping")
