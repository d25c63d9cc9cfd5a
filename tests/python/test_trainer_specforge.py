"""libshard.specforge against SpecForge 0.2.0's own reader, store, sharding, normalization,
collate and loader (run with the trainers' environment: tests/python/trainers_util.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from trainers_util import (assert_opens_dataset_files_only, assert_same, cli_pack, opened_files,
                           require, under)

require("specforge.runtime.data_plane", "SpecForge (specforge 0.2.0)")
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


def test_vocab_count_from_small_fields(data):
    src, packed = data
    for max_length in (None, 10):
        assert ls.count_effective_feature_tokens(packed, max_length=max_length,
                                                 target_vocab_size=500) == \
            vocab_mapping.count_effective_feature_tokens(str(src), max_length=max_length,
                                                         target_vocab_size=500)
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
