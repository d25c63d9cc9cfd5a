"""`libshard pack` of the other projects' caches (docs/guide/converting.md, "Caches as sources"):
DeepSpec's target cache, NeMo AutoModel's offline cache and TorchSpec's offline folder, written by
tests/python/cache_writers.py from the formats as their public code defines them, packed sample
for sample in the cache's order, compared with the owner's reader (DeepSpec's reimplemented in
bench/deepspec_reader.py from its code; TorchSpec's is torch.load of each manifest line's file),
and checked with `libshard verify --against CACHE`, which must catch a changed byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import conftest
import libshard
from cache_writers import automodel_files, deepspec_files, write_files, write_torchspec

sys.path.insert(0, str(conftest.REPO / "bench"))
from deepspec_reader import DeepSpecCacheDataset  # noqa: E402

H = 16
LAYERS = [3, 9, 15]
N = 9


def bits(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _cli() -> str:
    cli = conftest._cli()
    if cli is None:
        pytest.skip("the libshard command-line tool is not built")
    return cli


def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([_cli(), *args], capture_output=True, text=True)
    if ok:
        assert r.returncode == 0, r.stderr
    return r


def _deepspec(root: Path, hidden_dtype: str = "bfloat16", seed: int = 1) -> Path:
    g = torch.Generator().manual_seed(seed)
    cast = {"bfloat16": torch.bfloat16, "float8_e4m3fn": torch.float8_e4m3fn,
            "float8_e5m2": torch.float8_e5m2}[hidden_dtype]
    samples = []
    for i in range(N):
        L = 4 + (i * 7) % 13
        ths = (torch.randn(L, len(LAYERS) * H, generator=g) * 3).to(cast)
        tlhs = (torch.randn(L, H, generator=g) * 3).to(cast)
        samples.append({
            "input_ids": torch.randint(0, 50000, (L,), generator=g, dtype=torch.int32).numpy().tobytes(),
            "attention_mask": np.ones(L, np.uint8).tobytes(),
            "loss_mask": (torch.rand(L, generator=g) > 0.3).to(torch.uint8).numpy().tobytes(),
            "target_hidden_states": bits(ths),
            "target_last_hidden_states": bits(tlhs),
        })
    # Shards of ~3 samples, as the per-rank writers roll them at max_shard_bytes.
    return write_files(root, deepspec_files(
        samples, layer_ids=LAYERS, hidden_size=H, hidden_dtype=hidden_dtype,
        max_shard_bytes=3 * 12 * (len(LAYERS) + 1) * H * 2,
        extra={"target_model_name_or_path": "Qwen/Qwen3-4B", "max_length": 2048}))


@pytest.fixture(scope="module")
def deepspec(tmp_path_factory):
    root = tmp_path_factory.mktemp("deepspec")
    cache = _deepspec(root / "cache")
    out = root / "packed"
    run("pack", str(cache), "-o", str(out), "-q")
    return cache, out


def test_deepspec_items_equal_deepspecs_reader(deepspec):
    cache, out = deepspec
    ds = libshard.open(str(out))
    native = DeepSpecCacheDataset(str(cache))
    assert len(ds) == len(native) == N
    assert len(json.loads((cache / "manifest.json").read_text())["shards"]) > 1
    for i in range(N):
        got, want = ds[i], native[i]
        for k, w in want.items():
            assert got[k].dtype == w.dtype and got[k].shape == w.shape, (i, k)
            assert bits(got[k]) == bits(w), (i, k)
        assert torch.equal(got["attention_mask"], torch.ones_like(got["loss_mask"]))
        assert ds.source(i).endswith(f".bin/{i}")
    attrs = ds.attributes
    assert attrs["source_format"] == "deepspec"
    assert attrs["deepspec.target_layer_ids"] == "[3,9,15]"
    assert attrs["deepspec.hidden_size"] == H
    assert attrs["deepspec.target_model_name_or_path"] == "Qwen/Qwen3-4B"


def test_deepspec_verify_against_catches_a_changed_byte(deepspec, tmp_path):
    cache, out = deepspec
    r = run("verify", str(out), "--against", str(cache))
    assert "bit-exact" in r.stdout
    copy = tmp_path / "cache"
    copy.mkdir()
    for p in cache.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    shard = copy / "shard-00001.bin"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    bad = run("verify", str(out), "--against", str(copy), ok=False)
    assert bad.returncode == 1
    assert "differs from the source" in bad.stderr and "shard-00001.bin/" in bad.stderr, bad.stderr


@pytest.mark.parametrize("hidden_dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_deepspec_fp8_cache_packs_its_bytes_and_casts_like_its_reader(tmp_path, hidden_dtype):
    cache = _deepspec(tmp_path / "cache", hidden_dtype)
    out = tmp_path / "packed"
    run("pack", str(cache), "-o", str(out), "-q", "--from", "deepspec")
    ds = libshard.open(str(out))
    native = DeepSpecCacheDataset(str(cache))
    fp8 = getattr(torch, hidden_dtype)
    for i in range(N):
        got, want = ds[i], native[i]
        for k in ("target_hidden_states", "target_last_hidden_states"):
            assert got[k].dtype == fp8  # stored as the cache holds it: lossless
            assert bits(got[k].to(torch.bfloat16)) == bits(want[k]), (i, k)
    run("verify", str(out), "--against", str(cache))


def test_deepspec_compressed_and_fp8_stored_verify_against_the_cache(deepspec, tmp_path):
    cache, _ = deepspec
    auto = tmp_path / "auto"
    run("pack", str(cache), "-o", str(auto), "-q", "--compress", "auto")
    run("verify", str(auto), "--against", str(cache))
    fp8 = tmp_path / "fp8"
    run("pack", str(cache), "-o", str(fp8), "-q", "--store-dtype", "float8_e4m3fn")
    r = run("verify", str(fp8), "--against", str(cache))
    assert "fp8 field target_hidden_states" in r.stdout


def test_deepspec_parts_resume_and_append_keep_the_caches_order(deepspec, tmp_path):
    cache, out = deepspec
    whole = libshard.open(str(out))
    parts = []
    for k in range(3):
        p = tmp_path / f"part{k}"
        run("pack", str(cache), "-o", str(p), "-q", "--part", f"{k}/3")
        parts.append(str(p))
    merged = tmp_path / "merged"
    run("merge", str(merged), *parts)
    m = libshard.open(str(merged))
    assert [m.source(i) for i in range(len(m))] == [whole.source(i) for i in range(N)]
    again = run("pack", str(cache), "-o", str(out), "--resume")
    assert "nothing to resume" in again.stdout
    first = tmp_path / "first"
    run("pack", str(cache), "-o", str(first), "-q", "--include", "shard-00000.bin/*")
    in_first = sum(whole.source(i).startswith("shard-00000.bin/") for i in range(N))
    assert 0 < len(libshard.open(str(first))) == in_first < N
    run("pack", str(cache), "-o", str(first), "-q", "--append")
    grown = libshard.open(str(first))
    assert [grown.source(i) for i in range(N)] == [whole.source(i) for i in range(N)]


def test_python_pack_reads_caches_too(deepspec, tmp_path):
    cache, out = deepspec
    if not getattr(libshard._core, "HAVE_PACK", False):
        pytest.skip("this build has no pack pipeline")
    summary = libshard.pack(cache, tmp_path / "py", source_format="deepspec")
    assert summary["samples_added"] == N
    with pytest.raises(ValueError, match="unknown source format 'deepseek'"):
        libshard.pack(cache, tmp_path / "bad", source_format="deepseek")


def test_a_cache_is_not_packed_as_loose_files(deepspec, tmp_path):
    cache, _ = deepspec
    broken = tmp_path / "broken"
    broken.mkdir()
    for p in cache.iterdir():
        (broken / p.name).write_bytes(p.read_bytes())
    (broken / "manifest.json").write_text("{\"version\": 2,")
    r = run("pack", str(broken), "-o", str(tmp_path / "out"), ok=False)
    assert r.returncode == 1
    assert "looks like a DeepSpec target cache" in r.stderr and "manifest.json" in r.stderr, r.stderr
    # --from files says: these are sample files (the .bin shards are then not torch.save files).
    r = run("pack", str(broken), "-o", str(tmp_path / "out2"), "--from", "files", ok=False)
    assert "shard-00000.bin" in r.stderr


def test_a_symlinked_shard_is_refused(deepspec, tmp_path):
    cache, _ = deepspec
    linked = tmp_path / "linked"
    linked.mkdir()
    for p in cache.iterdir():
        if p.name == "shard-00002.bin":
            os.symlink(p, linked / p.name)
        else:
            (linked / p.name).write_bytes(p.read_bytes())
    r = run("pack", str(linked), "-o", str(tmp_path / "out"), ok=False)
    assert r.returncode == 1
    assert "symlink" in r.stderr and "shard-00002.bin" in r.stderr, r.stderr


# ------------------------------------------------------------------------------------------------
# NeMo AutoModel (its own reader: tests/python/test_trainer_automodel.py; here a reader written
# from its code: row i % shard_size of every tensor of shard i // shard_size)

def _automodel(root: Path, n: int = 10, shard_size: int = 4, seed: int = 2) -> Path:
    g = torch.Generator().manual_seed(seed)
    S, V = 7, 20
    cols = {
        "input_ids": ("int64", [S], [bits(torch.randint(0, 999, (S,), generator=g)) for _ in range(n)]),
        "attention_mask": ("int64", [S], [bits(torch.ones(S, dtype=torch.long)) for _ in range(n)]),
        "loss_mask": ("int64", [S], [bits((torch.rand(S, generator=g) > .5).long()) for _ in range(n)]),
        "aux_hidden_states": ("bfloat16", [S, 3 * H],
                              [bits(torch.randn(S, 3 * H, generator=g).bfloat16()) for _ in range(n)]),
        "position_mask": ("bool", [S, 1], [bits(torch.rand(S, 1, generator=g) > .5) for _ in range(n)]),
        "target_probs_values": ("float32", [S, 4],
                                [bits(torch.rand(S, 4, generator=g)) for _ in range(n)]),
        "target_probs_indices": ("int32", [S, 4],
                                 [bits(torch.randint(0, V, (S, 4), generator=g, dtype=torch.int32))
                                  for _ in range(n)]),
    }
    return write_files(root, automodel_files(cols, shard_size=shard_size, extra={
        "draft_vocab_size": V, "target_probs_topk": 4, "complete": True,
        "selected_token_ids": list(range(30000))}))


def test_automodel_rows_become_samples(tmp_path):
    cache = _automodel(tmp_path / "cache")
    out = tmp_path / "packed"
    r = run("pack", str(cache), "-o", str(out))
    assert "selected_token_ids is too large for a dataset attribute" in r.stdout
    ds = libshard.open(str(out))
    assert len(ds) == 10
    from safetensors.torch import load_file
    for k in range(3):
        shard = load_file(str(cache / f"shard-{k:06d}.safetensors"))
        for row in range(next(iter(shard.values())).shape[0]):
            i = 4 * k + row
            got = ds[i]
            assert ds.source(i) == f"shard-{k:06d}.safetensors/{i}"
            for name, t in shard.items():
                assert got[name].dtype == t.dtype and bits(got[name]) == bits(t[row]), (i, name)
    assert ds.attributes["automodel.target_probs_topk"] == 4
    run("verify", str(out), "--against", str(cache))


def test_automodel_incomplete_or_mixed_caches_are_refused(tmp_path):
    cache = _automodel(tmp_path / "cache")
    m = json.loads((cache / "manifest.json").read_text())
    (cache / "manifest.json").write_text(json.dumps({**m, "complete": False}))
    r = run("pack", str(cache), "-o", str(tmp_path / "a"), ok=False)
    assert "marked incomplete" in r.stderr, r.stderr
    (cache / "manifest.json").write_text(json.dumps({**m, "num_samples": 12}))
    r = run("pack", str(cache), "-o", str(tmp_path / "b"), ok=False)
    assert "shard-000002.safetensors" in r.stderr and "holds 4 samples" in r.stderr, r.stderr


# ------------------------------------------------------------------------------------------------
# TorchSpec

def _torchspec(root: Path, n: int = 7, seed: int = 4) -> Path:
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        L = 3 + i
        rows.append(("eval" if i % 4 == 3 else "train", f"conv-{i}", {
            "input_ids": torch.randint(0, 999, (L,), generator=g),
            "hidden_states": torch.randn(1, L, 3 * H, generator=g).bfloat16(),
            "last_hidden_states": torch.randn(1, L, H, generator=g).bfloat16(),
            "packed_loss_mask": f"0,{L}",
            "metadata": {"source": "sharegpt", "turn": i},
        }))
    return write_torchspec(root, rows)


def test_torchspec_folder_packs_in_manifest_order_with_split(tmp_path):
    cache = _torchspec(tmp_path / "cache")
    out = tmp_path / "packed"
    run("pack", str(cache), "-o", str(out), "-q")
    ds = libshard.open(str(out))
    lines = [json.loads(x) for x in (cache / "manifest.jsonl").read_text().splitlines()]
    assert len(ds) == len(lines) == 7
    for i, row in enumerate(lines):
        assert ds.source(i) == row["file"]
        want = torch.load(cache / row["file"], weights_only=True)
        got = ds[i]
        for k in ("input_ids", "hidden_states", "last_hidden_states"):
            assert got[k].dtype == want[k].dtype and bits(got[k]) == bits(want[k]), (i, k)
        assert got["data_id"] == want["data_id"] == row["data_id"]
        assert got["packed_loss_mask"] == want["packed_loss_mask"]
        assert got["metadata.turn"] == i
        assert got["split"] == row["split"]
    assert ds.attributes["torchspec.last_hidden_states_prenorm"] == "false"
    run("verify", str(out), "--against", str(cache))


def test_torchspec_sample_of_another_id_is_refused(tmp_path):
    cache = _torchspec(tmp_path / "cache")
    lines = (cache / "manifest.jsonl").read_text().splitlines()
    row = json.loads(lines[2])
    other = json.loads(lines[5])
    (cache / row["file"]).write_bytes((cache / other["file"]).read_bytes())
    r = run("pack", str(cache), "-o", str(tmp_path / "out"), ok=False)
    assert r.returncode == 1
    assert row["file"] in r.stderr and "data_id" in r.stderr, r.stderr
    r = run("pack", str(cache), "-o", str(tmp_path / "skip"), "--on-error", "skip")
    assert len(libshard.open(str(tmp_path / "skip"))) == 6


# ------------------------------------------------------------------------------------------------
# What the owners' own readers refuse, pack refuses (naming the file, the field and both values):
# a cache its trainer cannot read must not become a dataset (libshard.automodel would refuse at
# open what libshard.open serves). AutoModel's reader itself: tests/python/test_trainer_automodel.py.

def _edit_manifest(cache: Path, **changes) -> None:
    m = json.loads((cache / "manifest.json").read_text())
    for k, v in changes.items():
        if v is ...:
            m.pop(k, None)
        else:
            m[k] = v
    (cache / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True))


AUTOMODEL_REFUSALS = {
    "format_version it does not read": (
        {"format_version": 3}, ["manifest.json", "format_version 3", "EAGLE-3",
                                "reads format_version 2 only"]),
    "a DSpark version for EAGLE-3 shards": (
        {"format_version": 1}, ["manifest.json", "format_version 1", "reads format_version 2"]),
    "no draft_vocab_size": (
        {"draft_vocab_size": ...}, ["manifest.json", "draft_vocab_size is missing"]),
    "a topk the shards contradict": (
        {"target_probs_topk": 6}, ["shard-000000.safetensors", "target_probs_values",
                                   "[n, 7, 4] is 4 wide", "target_probs_topk 6"]),
    "a lossless manifest over top-k shards": (
        {"target_probs_topk": None}, ["shard-000000.safetensors", "no tensor 'target_probs'",
                                      "target_probs_topk null"]),
    "a topk that does not compress": (
        {"target_probs_topk": 20}, ["no tensor 'target_probs'", "target_probs_topk 20",
                                    "draft_vocab_size 20"]),
    "a topk of another type": (
        {"target_probs_topk": "4"}, ["manifest.json", "target_probs_topk is \"4\""]),
}


@pytest.mark.parametrize("case", sorted(AUTOMODEL_REFUSALS))
def test_automodel_cache_its_reader_refuses_is_refused(tmp_path, case):
    changes, wants = AUTOMODEL_REFUSALS[case]
    cache = _automodel(tmp_path / "cache")
    run("pack", str(cache), "-o", str(tmp_path / "ok"), "-q")  # the cache as written packs
    _edit_manifest(cache, **changes)
    out = tmp_path / "out"
    r = run("pack", str(cache), "-o", str(out), ok=False)
    assert r.returncode == 1, r.stderr
    for want in wants:
        assert want in r.stderr, (want, r.stderr)
    assert not (out / "manifest.json").exists()


def test_automodel_shard_without_a_tensor_its_reader_reads_is_refused(tmp_path):
    cache = _automodel(tmp_path / "cache")
    shard = cache / "shard-000001.safetensors"
    raw = shard.read_bytes()
    shard.write_bytes(raw.replace(b'"position_mask"', b'"positionXmask"', 1))
    r = run("pack", str(cache), "-o", str(tmp_path / "out"), ok=False)
    assert "shard-000001.safetensors" in r.stderr and "no tensor 'position_mask'" in r.stderr, \
        r.stderr


@pytest.mark.parametrize("file", ["manifest.json", "dataset.json", "manifest.jsonl"])
def test_a_manifest_with_a_byte_order_mark_is_refused(tmp_path, file):
    """The owners read their manifests with Python's json, which refuses a UTF-8 BOM."""
    cache = (_automodel(tmp_path / "cache") if file == "manifest.json"
             else _torchspec(tmp_path / "cache"))
    (cache / file).write_bytes(b"\xef\xbb\xbf" + (cache / file).read_bytes())
    r = run("pack", str(cache), "-o", str(tmp_path / "out"), ok=False)
    assert r.returncode == 1 and file in r.stderr and "byte-order mark" in r.stderr, r.stderr
    d = _deepspec(tmp_path / "ds")
    (d / "manifest.json").write_bytes(b"\xef\xbb\xbf" + (d / "manifest.json").read_bytes())
    r = run("pack", str(d), "-o", str(tmp_path / "out2"), ok=False)
    assert r.returncode == 1 and "byte-order mark" in r.stderr, r.stderr


def test_torchspec_sample_without_hidden_states_is_refused(tmp_path):
    """TorchSpec's OfflineDataset.load refuses a record without input_ids and hidden_states."""
    cache = _torchspec(tmp_path / "cache", n=3)
    for line in (cache / "manifest.jsonl").read_text().splitlines():
        row = json.loads(line)
        rec = torch.load(cache / row["file"], weights_only=True)
        rec.pop("hidden_states")
        torch.save(rec, cache / row["file"])
    r = run("pack", str(cache), "-o", str(tmp_path / "out"), ok=False)
    assert r.returncode == 1 and "no tensor 'hidden_states'" in r.stderr, r.stderr
    assert "samples/" in r.stderr
