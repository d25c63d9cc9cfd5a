"""Hostile datasets: every entry point gives a clear error (naming the file) or the right data, and
never crashes, hangs or raises UnicodeDecodeError. Anything that could crash or hang without the
fix runs in a child process with a generous timeout, so a regression fails the test instead of
the session."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import libshard
from conftest import _cli, assert_sample_equal, pack_dir, write_eagle_dir

TIMEOUT = 60  # liveness only: each of these finishes in well under a second


def cli() -> str:
    path = _cli()
    if path is None:
        pytest.skip("libshard binary not built (set LIBSHARD_CLI)")
    return path


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([cli(), *map(str, args)], capture_output=True, text=True,
                          errors="replace", timeout=TIMEOUT)


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, errors="replace", timeout=TIMEOUT, env=os.environ.copy())


@pytest.fixture(scope="module")
def small_src(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("hostile_src")
    write_eagle_dir(src, 6, seed=3)
    return src


@pytest.fixture(scope="module")
def small_dataset(small_src, tmp_path_factory) -> Path:
    return pack_dir(small_src, tmp_path_factory.mktemp("hostile") / "ds", shard_size="8KiB")


@pytest.fixture
def dataset_copy(small_dataset, tmp_path) -> Path:
    out = tmp_path / "ds"
    shutil.copytree(small_dataset, out)
    return out


OPEN_SCRIPT = """
import sys, libshard
try:
    libshard.open(sys.argv[1] if len(sys.argv) > 1 else {path!r})
except libshard.Error as e:
    print(type(e).__name__, e, file=sys.stderr)
    sys.exit(1)
print("opened")
"""


def entry_point(name: str, dataset: Path, src: Path) -> subprocess.CompletedProcess:
    if name == "open":
        return run_python(OPEN_SCRIPT.format(path=str(dataset)))
    if name == "info":
        return run_cli("info", dataset)
    if name == "info --json":
        return run_cli("info", dataset, "--json")
    if name == "verify":
        return run_cli("verify", dataset)
    if name == "pack --append":
        return run_cli("pack", src, "-o", dataset, "--append")
    raise AssertionError(name)


ENTRY_POINTS = ["info", "info --json", "verify", "pack --append", "open"]


@pytest.mark.parametrize("member", ["version", "provenance", "unknown"])
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_deeply_nested_manifest_is_a_clear_error(dataset_copy, small_src, entry, member):
    """200,000 nested lists in manifest.json crashed (SIGSEGV) every entry point."""
    manifest = dataset_copy / "manifest.json"
    text = manifest.read_text()
    deep = "[" * 200_000 + "]" * 200_000
    if member == "version":
        text = re.sub(r'"version": \d+', lambda m: '"version": ' + deep, text, count=1)
    elif member == "provenance":
        text = text.replace('"provenance": {', '"provenance": {"nested": ' + deep + ", ", 1)
    else:
        text = text.replace("{", '{"x": ' + deep + ", ", 1)
    manifest.write_text(text)
    p = entry_point(entry, dataset_copy, small_src)
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert str(manifest) in p.stderr
    assert "JSON nested deeper than 64 levels" in p.stderr


@pytest.mark.parametrize("victim", ["manifest.json", "index.lsi", "shard-00000.lss"])
@pytest.mark.parametrize("entry", ["info", "verify", "open"])
def test_fifo_in_place_of_a_dataset_file_is_refused(dataset_copy, small_src, victim, entry):
    """A FIFO named like a dataset file made info, verify and libshard.open hang forever."""
    path = dataset_copy / victim
    path.unlink()
    os.mkfifo(path)
    try:
        p = entry_point(entry, dataset_copy, small_src)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{entry} blocked on a FIFO in place of {victim}")
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert str(path) in p.stderr
    assert "FIFO" in p.stderr and "not a regular file" in p.stderr


def test_index_changed_while_open_never_gives_wrong_data(dataset_copy):
    """The index is read into memory at open: truncating it (SIGBUS with a mapping; on a small
    index, shape-(0,) tensors and an empty source) or rewriting it afterwards changes nothing."""
    p = run_python(f"""
        import os, torch, libshard
        path = {str(dataset_copy)!r}
        ds = libshard.open(path)
        want = [ds[i] for i in range(len(ds))]
        sources = [ds.source(i) for i in range(len(ds))]
        assert all(s for s in sources), sources
        index = os.path.join(path, "index.lsi")
        size = os.path.getsize(index)

        def check():
            for i in range(len(ds)):
                got = ds[i]
                assert ds.source(i) == sources[i], (i, ds.source(i))
                for k, t in want[i].items():
                    if isinstance(t, torch.Tensor):
                        assert got[k].shape == t.shape and torch.equal(got[k], t), (i, k)
            seen = 0
            for sample in libshard.Loader(ds, shuffle=False, memory_budget="8MiB"):
                seen += 1
            assert seen == len(ds), seen

        os.truncate(index, 0)
        check()
        with open(index, "wb") as f:
            f.write(os.urandom(size))
        check()
        print("ok")
    """)
    assert p.returncode == 0, (p.returncode, p.stderr[-3000:])
    assert "ok" in p.stdout


def test_strings_that_are_not_utf8_read_back_everywhere(tmp_path):
    """A metadata string 'caf\\udce9' and a source named b'data_\\xe9.pt' raised
    UnicodeDecodeError in ds[0], ds.source(i) and the Loader (losing the batch), and made
    `info --json` fail with a bare JSON exception."""
    src = tmp_path / "src"
    src.mkdir()
    gen = torch.Generator().manual_seed(5)
    samples = {}
    for name in [b"data_\xe9.pt", b"data_1.pt"]:
        x = torch.randn(4, 3, generator=gen)
        samples[name] = {"x": x, "m": "caf\udce9"}
        fd = os.open(os.path.join(os.fsencode(src), name), os.O_WRONLY | os.O_CREAT, 0o644)
        with os.fdopen(fd, "wb") as f:
            torch.save(samples[name], f)
    out = tmp_path / "ds"
    p = run_cli("pack", src, "-o", out)
    assert p.returncode == 0, p.stderr

    ds = libshard.open(out)
    assert len(ds) == 2
    by_source = {}
    for i in range(len(ds)):
        source = ds.source(i)
        raw = os.fsencode(source)  # the original file name bytes come back
        assert raw in samples, raw
        by_source[raw] = i
        got = ds[i]
        assert torch.equal(got["x"], samples[raw]["x"])
        assert got["m"] == "caf\udce9"
        assert ds.metadata(i)["m"] == "caf\udce9"
    assert set(by_source) == set(samples)

    delivered = 0
    for sample in libshard.Loader(ds, shuffle=False, memory_budget="8MiB"):
        assert sample["m"] == "caf\udce9"
        delivered += 1
    assert delivered == len(ds)

    assert run_cli("info", out).returncode == 0
    p = run_cli("info", out, "--json")
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    assert info["samples"] == 2
    p = run_cli("verify", out)
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("option,value", [("worker_threads", 100_000), ("worker_threads", 257),
                                          ("queue_depth", 1_000_000), ("read_size", 1 << 40),
                                          ("memory_budget", 1 << 50), ("batch_size", 1 << 30)])
def test_loader_numeric_options_are_bounded(small_dataset, option, value):
    """worker_threads=100000 spent seconds creating threads, then failed with 'Resource
    temporarily unavailable'. Every numeric option is checked before any thread starts."""
    with pytest.raises(ValueError) as e:
        libshard.Loader(small_dataset, **{option: value})
    assert option in str(e.value)
    assert "out of range" in str(e.value)
