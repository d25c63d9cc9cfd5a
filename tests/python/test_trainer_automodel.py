"""libshard.automodel against NeMo AutoModel 0.7's own offline-cache readers: caches written by
AutoModel's own writers (eagle3_cache.write_shard / write_manifest, dspark_cache), packed with
`libshard pack`, read back through AutoModel's CachedEagle3Dataset / CachedDSparkDataset and
through libshard.automodel: the same items, keys, dtypes, shapes and bytes (run with the trainers'
environment: tests/python/trainers_util.py)."""

from __future__ import annotations

import pickle
import subprocess
from pathlib import Path

import pytest
import torch

import conftest
from trainers_util import assert_same, cli_pack, require

eagle3_cache = require("nemo_automodel.components.datasets.llm.eagle3_cache",
                       "NeMo AutoModel (nemo-automodel 0.7)")
dspark_cache = require("nemo_automodel.components.datasets.llm.dspark_cache",
                       "NeMo AutoModel (nemo-automodel 0.7)")
import libshard  # noqa: E402
import libshard.automodel as la  # noqa: E402

N = 11
SHARD = 4  # 3 shards, the last one partial
S = 6
H = 8
VOCAB = 24


def _eagle3_cache(root: Path, topk=None, seed: int = 5) -> Path:
    """An EAGLE-3 cache as AutoModel's precompute writes one: its own write_shard and
    write_manifest, shards of SHARD samples stacked along dim 0."""
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(torch.randn(N, S, VOCAB, generator=g), -1)
    samples = {
        "input_ids": torch.randint(0, 1000, (N, S), generator=g),
        "attention_mask": torch.ones(N, S, dtype=torch.long),
        "loss_mask": (torch.rand(N, S, generator=g) > 0.3).long(),
        "aux_hidden_states": torch.randn(N, S, 3 * H, generator=g).bfloat16(),
        "position_mask": torch.rand(N, S, 1, generator=g) > 0.2,
    }
    if topk is None:
        samples["target_probs"] = probs
    else:
        v, i = eagle3_cache.compress_target_probs(probs, topk)
        samples["target_probs_values"], samples["target_probs_indices"] = v, i
    for k, first in enumerate(range(0, N, SHARD)):
        eagle3_cache.write_shard(str(root), k, {n: t[first:first + SHARD] for n, t in samples.items()})
    eagle3_cache.write_manifest(str(root), {
        "num_samples": N, "shard_size": SHARD, "draft_vocab_size": VOCAB,
        "target_probs_topk": topk, "selected_token_ids": list(range(0, 2 * VOCAB, 2)),
        "target_model": "tiny/test-target", "aux_layer_ids": [1, 3, 5]})
    eagle3_cache.write_target_embeddings(str(root), torch.randn(50, H))
    return root


def _dspark_cache(root: Path, seed: int = 9) -> Path:
    g = torch.Generator().manual_seed(seed)
    samples = {
        "input_ids": torch.randint(0, 1000, (N, S), generator=g),
        "loss_mask": (torch.rand(N, S, generator=g) > 0.3).long(),
        "target_hidden_states": torch.randn(N, S, 2 * H, generator=g).bfloat16(),
        "target_last_hidden_states": torch.randn(N, S, H, generator=g).bfloat16(),
    }
    for k, first in enumerate(range(0, N, SHARD)):
        dspark_cache.write_shard(str(root), k, {n: t[first:first + SHARD] for n, t in samples.items()})
    dspark_cache.write_manifest(str(root), {"num_samples": N, "shard_size": SHARD,
                                            "complete": True})
    return root


@pytest.fixture(scope="module", params=[None, 5], ids=["full-probs", "top5"])
def eagle3(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("eagle3")
    cache = _eagle3_cache(root / "cache", topk=request.param)
    return cache, cli_pack(cache, root / "packed")


def test_eagle3_items_equal_automodel(eagle3):
    cache, packed = eagle3
    ds = la.CachedEagle3Dataset(packed)
    native = eagle3_cache.CachedEagle3Dataset(str(cache))
    assert isinstance(ds, eagle3_cache.CachedEagle3Dataset)
    assert len(ds) == len(native) == N
    for i in range(N):
        assert_same(ds[i], native[i], f"sample {i}")
    assert_same(ds[-1], native[-1], "sample -1")
    with pytest.raises(IndexError):
        ds[N]
    # The packed dataset holds the cache as stored (a top-k cache: its values and indices).
    fields = set(libshard.open(str(packed)).schema.names)
    assert fields == set(native._disk_keys)


def test_eagle3_manifest_round_trips(eagle3):
    cache, packed = eagle3
    m = la.manifest(packed)
    native = eagle3_cache.read_manifest(str(cache))
    for k, v in native.items():
        if k in eagle3_cache.MANIFEST_DEFAULTS and k not in m:
            continue  # filled in by AutoModel's reader, not in the file
        assert m[k] == v, k


def test_eagle3_batches_equal_automodel(eagle3):
    cache, packed = eagle3
    ours = la.build_cached_eagle3_dataloader(path=packed, batch_size=3, shuffle=False)
    theirs = eagle3_cache.build_cached_eagle3_dataloader(cache_dir=str(cache), batch_size=3,
                                                         shuffle=False)
    got, want = list(ours), list(theirs)
    assert len(got) == len(want) == 4
    for b, (x, y) in enumerate(zip(got, want)):
        assert_same(x, y, f"batch {b}")


def test_eagle3_pickles_for_worker_processes(eagle3):
    _, packed = eagle3
    ds = la.CachedEagle3Dataset(packed)
    back = pickle.loads(pickle.dumps(ds))
    assert_same(back[3], ds[3], "sample 3")


def test_dspark_items_equal_automodel(tmp_path):
    cache = _dspark_cache(tmp_path / "cache")
    packed = cli_pack(cache, tmp_path / "packed")
    ds = la.CachedDSparkDataset(packed)
    native = dspark_cache.CachedDSparkDataset(str(cache))
    assert isinstance(ds, dspark_cache.CachedDSparkDataset)
    assert len(ds) == len(native) == N
    for i in range(N):
        assert_same(ds[i], native[i], f"sample {i}")


def test_verify_against_the_cache_and_its_damage(tmp_path):
    cache = _eagle3_cache(tmp_path / "cache")
    packed = cli_pack(cache, tmp_path / "packed")
    cli = conftest._cli()
    if cli is None:
        pytest.skip("the libshard command-line tool is not built")
    ok = subprocess.run([cli, "verify", str(packed), "--against", str(cache)],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "bit-exact" in ok.stdout
    shard = cache / "shard-000001.safetensors"
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0x40  # in the last tensor's bytes, which belong to the shard's last sample
    shard.write_bytes(bytes(data))
    bad = subprocess.run([cli, "verify", str(packed), "--against", str(cache)],
                         capture_output=True, text=True)
    assert bad.returncode == 1
    assert "sample 7" in bad.stderr and "differs from the source" in bad.stderr, bad.stderr
    assert "shard-000001.safetensors/7" in bad.stderr, bad.stderr


def test_a_dataset_of_another_source_is_refused(tmp_path):
    src = tmp_path / "files"
    src.mkdir()
    torch.save({"input_ids": torch.arange(4)}, src / "a.pt")
    packed = cli_pack(src, tmp_path / "packed")
    with pytest.raises(ValueError, match="was not packed from a NeMo AutoModel cache"):
        la.CachedEagle3Dataset(packed)


# What AutoModel's own reader refuses, `libshard pack` refuses: a cache the trainer cannot read
# never becomes a dataset that libshard.open serves and libshard.automodel refuses at open.
def _edit(cache: Path, **changes) -> None:
    import json
    path = cache / "manifest.json"
    m = json.loads(path.read_text())
    for k, v in changes.items():
        if v is ...:
            m.pop(k, None)
        else:
            m[k] = v
    path.write_text(json.dumps(m, indent=2, sort_keys=True))


def _bom(cache: Path) -> None:
    path = cache / "manifest.json"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())


OWNER_REFUSES = {
    "format_version 3": (None, lambda c: _edit(c, format_version=3), "format_version 3"),
    "format_version 1": (None, lambda c: _edit(c, format_version=1), "format_version 1"),
    "no draft_vocab_size": (None, lambda c: _edit(c, draft_vocab_size=...), "draft_vocab_size"),
    "top-k manifest, full shards": (None, lambda c: _edit(c, target_probs_topk=5),
                                    "target_probs_values"),
    "full manifest, top-k shards": (5, lambda c: _edit(c, target_probs_topk=None),
                                    "no tensor 'target_probs'"),
    "top-k at the vocabulary width": (5, lambda c: _edit(c, target_probs_topk=VOCAB),
                                      "no tensor 'target_probs'"),
    "a byte-order mark": (None, _bom, "byte-order mark"),
}


@pytest.mark.parametrize("case", sorted(OWNER_REFUSES))
def test_pack_refuses_what_automodels_own_reader_refuses(tmp_path, case):
    topk, damage, want = OWNER_REFUSES[case]
    cache = _eagle3_cache(tmp_path / "cache", topk=topk)
    damage(cache)
    with pytest.raises(Exception):  # AutoModel's reader: at open or at the first item
        eagle3_cache.CachedEagle3Dataset(str(cache))[0]
    cli = conftest._cli()
    if cli is None:
        pytest.skip("the libshard command-line tool is not built")
    r = subprocess.run([cli, "pack", str(cache), "-o", str(tmp_path / "out")],
                       capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert want in r.stderr and str(cache) in r.stderr, r.stderr


def test_dspark_incomplete_is_refused_by_both(tmp_path):
    cache = _dspark_cache(tmp_path / "cache")
    _edit(cache, complete=False)
    with pytest.raises(ValueError, match="incomplete"):
        dspark_cache.CachedDSparkDataset(str(cache))
    cli = conftest._cli()
    if cli is None:
        pytest.skip("the libshard command-line tool is not built")
    r = subprocess.run([cli, "pack", str(cache), "-o", str(tmp_path / "out")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "marked incomplete" in r.stderr, r.stderr
