"""Field codecs (docs/FORMAT.md §4.3) from Python and the CLI: `pack --compress auto` on real
torch.save EAGLE-3 files reads back bit-exact through the Loader (whole, max_len, fields=),
`--store-dtype float8_e4m3fn` within the §4.3.5 error bound, `info` shows each field's codec and
stored vs raw bytes, `verify --against` checks and reports the error."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import glob
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

import libshard
from conftest import REPO, assert_sample_equal, pack_dir, tensor_bytes, write_eagle_dir

N = 12
HIDDEN = 96  # rows of >= 64 elements: the channel base table is used (§4.3.4)


def _cli() -> str:
    env = os.environ.get("LIBSHARD_CLI")
    if env:
        return env
    candidates = glob.glob(str(REPO / "build*" / "converters" / "libshard"))
    if not candidates:
        pytest.skip("libshard binary not built (set LIBSHARD_CLI)")
    return max(candidates, key=os.path.getmtime)


def run(*args, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([_cli(), *map(str, args)], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"libshard {' '.join(map(str, args))} -> {p.returncode}\n"
                             f"stdout: {p.stdout}\nstderr: {p.stderr}")
    return p


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("codec_src")
    gen = torch.Generator().manual_seed(5)
    write_eagle_dir(root, N, seed=5, min_len=30, max_len=200)
    # Hidden states with per-channel scales, as real activations have.
    for path in sorted(root.rglob("*.ckpt")):
        d = torch.load(path)
        L = d["input_ids"].shape[0]
        scale = torch.linspace(0.1, 8.0, HIDDEN)
        d["hidden_state"] = (torch.randn(1, L, HIDDEN, generator=gen) * scale).to(torch.bfloat16)
        d["aux_hidden_state"] = (torch.randn(1, L, 3 * HIDDEN, generator=gen)
                                 * scale.repeat(3)).to(torch.bfloat16)
        torch.save(d, path)
    return root


def sources(root: Path):
    files = sorted(root.rglob("*.ckpt"), key=lambda p: int(p.stem.split("_")[1]))
    return [torch.load(p) for p in files]


def test_compress_auto_loader_bit_exact_vs_torch_load(src, tmp_path):
    out = pack_dir(src, tmp_path / "auto", compress="auto")
    want = sources(src)
    ds = libshard.Dataset(out)
    assert len(ds) == N
    for i in range(N):
        assert_sample_equal(ds[i], want[i], f"sample {i}")
    loader = libshard.Loader(out, shuffle=True, seed=1, return_index=True, memory_budget="16MiB",
                             worker_threads=2)
    seen = []
    for s in loader:
        i = s.pop("__index__")
        seen.append(i)
        assert_sample_equal(s, want[i], f"loader sample {i}")
    assert sorted(seen) == list(range(N))
    # max_len and fields=: prefixes of the decoded rows.
    loader = libshard.Loader(out, shuffle=False, return_index=True, memory_budget="16MiB",
                             max_len=41, fields=["hidden_state", "input_ids"])
    for s in loader:
        i = s.pop("__index__")
        assert list(s.keys()) == ["input_ids", "hidden_state"] or \
            sorted(s.keys()) == ["hidden_state", "input_ids"]
        assert tensor_bytes(s["hidden_state"]) == tensor_bytes(want[i]["hidden_state"][:, :41])
        assert tensor_bytes(s["input_ids"]) == tensor_bytes(want[i]["input_ids"][:41])
    # Smaller than raw, and verify --against is bit-exact.
    info = json.loads(run("info", out, "--json").stdout)
    assert info["totals"]["stored_bytes"] < info["totals"]["raw_bytes"]
    fields = {f["name"]: f for f in info["schema"]["fields"]}
    assert fields["hidden_state"]["codec"] == "planes2"  # codec 5 (FORMAT.md §4.3.7)
    assert fields["input_ids"]["codec"] == "zstd"
    assert fields["hidden_state"]["stored_bytes"] < fields["hidden_state"]["raw_bytes"]
    assert fields["input_ids"]["raw_bytes"] == sum(8 * w["input_ids"].numel() for w in want)
    text = run("info", out).stdout
    assert "planes2" in text and "stored of" in text
    v = run("verify", out, "--against", src).stdout
    assert "bit-exact" in v and "fp8" not in v


def test_store_dtype_fp8_within_bound(src, tmp_path):
    out = pack_dir(src, tmp_path / "fp8", compress="auto", store_dtype="float8_e4m3fn")
    want = sources(src)
    ds = libshard.Dataset(out)
    raw = sum(sum(t.numel() * t.element_size() for t in w.values()) for w in want)
    info = json.loads(run("info", out, "--json").stdout)
    fields = {f["name"]: f for f in info["schema"]["fields"]}
    # fp8 + compression writes codec 6 (FORMAT.md §4.3.8), no longer codec 4 (fp8-entropy).
    assert fields["hidden_state"]["codec"] == "fp8-planes"
    assert fields["aux_hidden_state"]["codec"] == "fp8-planes"
    assert fields["input_ids"]["codec"] == "zstd"
    assert fields["hidden_state"]["stored_bytes"] * 2 <= fields["hidden_state"]["raw_bytes"]
    assert sum(f["raw_bytes"] for f in fields.values()) == raw  # tensors, no padding
    for i in range(N):
        got = ds[i]
        for key in ("input_ids", "loss_mask"):
            assert tensor_bytes(got[key]) == tensor_bytes(want[i][key])
        for key in ("hidden_state", "aux_hidden_state"):
            g = got[key].float()
            x = want[i][key].float()
            assert got[key].dtype == torch.bfloat16 and g.shape == x.shape
            s = x.abs().amax(dim=-1, keepdim=True) / 448.0
            bound = torch.maximum(x.abs() / 16, s / 1024) + g.abs() / 256 + 1e-6 * s
            assert bool(((g - x).abs() <= bound).all()), f"sample {i} {key}"
            assert bool((g != x).any()), "fp8 is lossy: something must differ"
    # The same codes and scales as plain fp8 (codec 3): the same values, bit for bit.
    plain = pack_dir(src, tmp_path / "fp8_plain", store_dtype="float8_e4m3fn")
    info3 = json.loads(run("info", plain, "--json").stdout)
    assert {f["name"]: f["codec"] for f in info3["schema"]["fields"]}["hidden_state"] == "fp8"
    ds3 = libshard.Dataset(plain)
    for i in range(N):
        for key in ("hidden_state", "aux_hidden_state"):
            assert tensor_bytes(ds[i][key]) == tensor_bytes(ds3[i][key]), f"sample {i} {key}"
    v = run("verify", out, "--against", src).stdout
    assert "fp8 field hidden_state: relative error max" in v
    assert "within the FORMAT.md §4.3.5 bound" in v


def test_fp8_entropy_datasets_keep_loading(tmp_path):
    # tests/data/golden_v3_fp8_entropy: write_eagle_dir(root, 6) packed with `--compress auto
    # --store-dtype float8_e4m3fn` before codec 6, i.e. as codec 4 (fp8-entropy); frozen. It reads,
    # checksums verified, to exactly what codec 6 (fp8-planes, written now) decodes the same
    # sources to: the same codes and scales (FORMAT.md §4.3.8).
    frozen = REPO / "tests" / "data" / "golden_v3_fp8_entropy"
    info = json.loads(run("info", frozen, "--json").stdout)
    codecs = {f["name"]: f["codec"] for f in info["schema"]["fields"]}
    assert codecs["hidden_state"] == codecs["aux_hidden_state"] == "fp8-entropy"
    src = tmp_path / "src"
    write_eagle_dir(src, 6)
    now = pack_dir(src, tmp_path / "now", compress="auto", store_dtype="float8_e4m3fn")
    info = json.loads(run("info", now, "--json").stdout)
    assert {f["name"]: f["codec"] for f in info["schema"]["fields"]}["hidden_state"] == "fp8-planes"
    old, new = libshard.Dataset(str(frozen)), libshard.Dataset(str(now))
    assert len(old) == len(new) == 6
    for i in range(6):
        a, b = old[i], new[i]
        for key in ("input_ids", "loss_mask", "hidden_state", "aux_hidden_state"):
            assert tensor_bytes(a[key]) == tensor_bytes(b[key]), f"sample {i} {key}"


def test_compress_zstd_and_store_dtype_exclude_each_other(src, tmp_path):
    p = run("pack", src, "-o", tmp_path / "x", "--compress", "zstd", "--store-dtype",
            "float8_e4m3fn", check=False)
    assert p.returncode != 0
    assert "exclude each other" in p.stderr


def test_writer_compress_auto_round_trips(src, tmp_path):
    want = sources(src)
    with libshard.Writer(tmp_path / "w", compress="auto", fsync=False) as w:
        for i, d in enumerate(want):
            w.write(d, key=f"k{i:03d}")
    ds = libshard.Dataset(tmp_path / "w")
    info = json.loads(run("info", tmp_path / "w", "--json").stdout)
    assert {f["name"]: f["codec"] for f in info["schema"]["fields"]}["hidden_state"] == "planes2"
    for i in range(N):
        assert_sample_equal(ds[i], want[i], f"sample {i}")


@pytest.mark.parametrize("spec,codec", [("planes", "planes"), ("planes2", "planes2")])
def test_planes_codecs_by_name_round_trip(src, tmp_path, spec, codec):
    # "planes" keeps meaning codec 2 (datasets written with it keep loading); "planes2" is codec 5.
    out = pack_dir(src, tmp_path / spec, compress=spec)
    want = sources(src)
    info = json.loads(run("info", out, "--json").stdout)
    fields = {f["name"]: f for f in info["schema"]["fields"]}
    assert fields["hidden_state"]["codec"] == codec
    assert fields["input_ids"]["codec"] == "raw"
    assert fields["hidden_state"]["stored_bytes"] < fields["hidden_state"]["raw_bytes"]
    ds = libshard.Dataset(out)
    for i in range(N):
        assert_sample_equal(ds[i], want[i], f"sample {i}")
    loader = libshard.Loader(out, shuffle=False, return_index=True, memory_budget="16MiB",
                             max_len=41, fields=["hidden_state"])
    for s in loader:
        i = s.pop("__index__")
        assert tensor_bytes(s["hidden_state"]) == tensor_bytes(want[i]["hidden_state"][:, :41])


def test_resume_after_sigkill_with_codecs_equals_uninterrupted(src, tmp_path):
    """Journal version 2 (FORMAT.md §6) carries the codecs and the region sizes: a pack killed
    with SIGKILL and resumed stores exactly what an uninterrupted one stores."""
    import random
    import signal
    import time

    args = ["pack", str(src), "--compress", "auto", "--shard-size", "64K", "--journal-every",
            "8K", "--threads", "1", "--progress", "none"]
    t0 = time.monotonic()
    run(*args, "-o", tmp_path / "ref")
    full = time.monotonic() - t0
    ref = json.loads(run("info", tmp_path / "ref", "--json").stdout)
    rnd = random.Random(7)
    out = tmp_path / "ds"
    journal = out / "_journal.lsj"
    killed_after_checkpoint = False
    for attempt in range(8):
        extra = ["--resume"] if attempt else []
        proc = subprocess.Popen([_cli(), *args, "-o", str(out), *extra], text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if attempt < 3:
            start = journal.stat().st_size if journal.exists() else 0
            while proc.poll() is None and (journal.stat().st_size if journal.exists() else 0) <= start:
                time.sleep(0.001)
            time.sleep(rnd.uniform(0, full * 0.2))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                killed_after_checkpoint = True
        _, err = proc.communicate(timeout=120)
        if proc.returncode == 0:
            break
        assert proc.returncode == -signal.SIGKILL, err
        if run("info", out, check=False).returncode == 0:
            break  # killed after the commit
    got = json.loads(run("info", out, "--json").stdout)
    assert killed_after_checkpoint
    assert got["schema"] == ref["schema"]  # codecs, raw and stored bytes per field
    assert got["totals"]["stored_bytes"] == ref["totals"]["stored_bytes"]
    assert got["totals"]["samples"] == N
    assert "bit-exact" in run("verify", out, "--against", src).stdout
