"""Eviction in the node-local cache of s3:// datasets (docs/CACHE.md §3-5): an epoch over a
dataset larger than cache_size, processes sharing an evicting cache (one killed -9), a block
pinned by a reader is never evicted, a restart keeps the good blocks, and one bound for every
dataset under the root. Against moto (signatures checked) behind the fault proxy."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import libshard
from conftest import assert_sample_equal, pack_dir, write_eagle_dir
from s3_server import env_fixture, proxy_fixture, server_fixture

pytest.importorskip("boto3")

BUCKET = "libshard-evict"
BLOCK = 8192
CONNECTIONS = 2
# The read-ahead window of one process: 2 x max(4 x connections, 16) blocks (CACHE.md §5).
WINDOW = 2 * max(4 * CONNECTIONS, 16) * BLOCK
PRESENT = struct.unpack("<Q", b"PRESENT1")[0]


@pytest.fixture(scope="module")
def local_ds(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("evict_src")
    write_eagle_dir(src, 90, seed=5, min_len=100, max_len=400)
    return pack_dir(src, tmp_path_factory.mktemp("evict_packed") / "ds", shard_size="256KiB")


server = server_fixture()
proxy = proxy_fixture()
env = env_fixture(LIBSHARD_CACHE_BLOCK_SIZE=BLOCK, LIBSHARD_S3_CONNECTIONS=CONNECTIONS,
                  LIBSHARD_CACHE_MIN_FREE=0)


_uploaded = set()


def upload(server, local_ds, prefix: str) -> str:
    if prefix not in _uploaded:
        server.upload_dir(BUCKET, prefix, local_ds)
        _uploaded.add(prefix)
    return f"s3://{BUCKET}/{prefix}"


def dataset_bytes(local_ds: Path) -> int:
    return sum(p.stat().st_size for p in local_ds.glob("*.lss"))


def block_count(local_ds: Path) -> int:
    return sum((p.stat().st_size + BLOCK - 1) // BLOCK for p in local_ds.glob("*.lss"))


def cache_bytes(root: Path) -> int:
    """What CACHE.md §4 counts: st_blocks of every regular file under the root, once per inode,
    staging/ left out."""
    seen, total = set(), 0
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root and "staging" in dirnames:
            dirnames.remove("staging")
        for name in filenames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


class CacheWatch:
    """Samples the cache's size every few milliseconds while an epoch runs: the largest seen."""

    def __init__(self, root: Path) -> None:
        self.root, self.largest, self.stop = root, 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            if self.root.exists():
                self.largest = max(self.largest, cache_bytes(self.root))
            time.sleep(0.005)

    def done(self) -> int:
        self.stop.set()
        self.thread.join(timeout=10)
        return self.largest


def state_files(root: Path):
    return sorted(root.glob("*/*/objects/*.lss.*.blocks"))


def present_blocks(root: Path) -> set:
    out = set()
    for p in state_files(root):
        data = p.read_bytes()
        n = struct.unpack_from("<Q", data, 32)[0]
        for b in range(n):
            if struct.unpack_from("<Q", data, 64 + 16 * b)[0] == PRESENT:
                out.add((str(p), b))
    return out


def block_gets(proxy) -> dict:
    return {k: v for k, v in proxy.shard_gets().items() if k[1] != "bytes=0-4095"}


def digest(sample: dict) -> str:
    h = hashlib.sha256()
    for k in sorted(sample):
        v = sample[k]
        if hasattr(v, "contiguous"):
            h.update(k.encode())
            h.update(v.contiguous().view(-1).view(dtype=__import__("torch").uint8).numpy().tobytes())
    return h.hexdigest()


def test_epoch_larger_than_cache_size(server, proxy, env, local_ds, tmp_path):
    url = upload(server, local_ds, "epoch")
    size = dataset_bytes(local_ds)
    bound = WINDOW + 384 * 1024  # the window, the index and the state files, and some blocks
    assert size > 2 * bound, "the dataset must be larger than the cache"
    root = tmp_path / "cache"
    watch = CacheWatch(root)
    got = list(libshard.Loader(url, cache=root, cache_size=bound, shuffle=False,
                               return_index=True, pin_memory=False))
    largest = watch.done()
    want = list(libshard.Loader(local_ds, shuffle=False, return_index=True, pin_memory=False))
    assert len(got) == len(want) == 90
    for g, w in zip(got, want):
        assert_sample_equal(g, w, f"loader sample {w['__index__']}")
    # Never over the bound but for the blocks in flight (one per connection).
    assert largest <= bound + CONNECTIONS * BLOCK, (largest, bound)
    assert cache_bytes(root) <= bound + CONNECTIONS * BLOCK
    # Eviction by the schedule: about one GET per block in an epoch (more would be thrash).
    gets = block_gets(proxy)
    assert len(gets) == block_count(local_ds)
    per_block = sum(gets.values()) / len(gets)
    assert per_block <= 1.05, f"{per_block:.2f} GETs per block: {sorted(gets.values())[-5:]}"
    # A second epoch (shuffled) through the same small cache is still right.
    again = {s["__index__"]: s for s in libshard.Loader(url, cache=root, cache_size=bound,
                                                        shuffle=True, seed=3, return_index=True,
                                                        pin_memory=False)}
    assert len(again) == 90
    for w in want:
        assert_sample_equal(again[w["__index__"]], w, f"epoch 2 sample {w['__index__']}")
    assert cache_bytes(root) <= bound + CONNECTIONS * BLOCK


def _holder_script(state: Path, entry: int, ready: Path) -> str:
    # A reader's pin as CACHE.md §3 specifies it: a shared lock on the entry's 16 bytes.
    return textwrap.dedent(f"""
        import fcntl, os, time
        fd = os.open({str(state)!r}, os.O_RDONLY)
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 16, {entry}, os.SEEK_SET)
        open({str(ready)!r}, "w").write("held")
        time.sleep(600)
    """)


def test_block_held_by_a_reader_is_not_evicted(server, proxy, env, local_ds, tmp_path):
    url = upload(server, local_ds, "held")
    root = tmp_path / "cache"
    bound = WINDOW + 384 * 1024
    local = libshard.open(local_ds)
    remote = libshard.open(url, cache=root, cache_size=bound)
    assert_sample_equal(remote[0], local[0])  # block 0 of shard 0 is present
    state = state_files(root)[0]
    assert state.name.startswith("shard-00000.lss.")
    data = state.with_name(state.name[: -len(".blocks")])
    b = 1
    assert_sample_equal(remote[1], local[1])
    words = state.read_bytes()
    if struct.unpack_from("<Q", words, 64 + 16 * b)[0] != PRESENT:
        b = 0
    held_bytes = data.read_bytes()[b * BLOCK:(b + 1) * BLOCK]
    ready = tmp_path / "ready"
    holder = subprocess.Popen([sys.executable, "-c", _holder_script(state, 64 + 16 * b, ready)])
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert holder.poll() is None and time.monotonic() < deadline, "the holder did not lock"
            time.sleep(0.02)
        # Read everything through the small cache: eviction runs, and skips the held block.
        for i in range(len(local)):
            assert_sample_equal(remote[i], local[i], f"sample {i}")
        assert len(block_gets(proxy)) == block_count(local_ds)
        assert cache_bytes(root) <= bound + CONNECTIONS * BLOCK
        words = state.read_bytes()
        assert struct.unpack_from("<Q", words, 64 + 16 * b)[0] == PRESENT, "held block evicted"
        assert data.read_bytes()[b * BLOCK:(b + 1) * BLOCK] == held_bytes
        # Shard 0's other early blocks were evicted meanwhile (the cache is far smaller).
        assert (str(state), 3) not in present_blocks(root) or \
            (str(state), 4) not in present_blocks(root)
    finally:
        holder.kill()
        holder.wait(timeout=30)
    # Released (the holder is gone): read first, then the oldest read, so evicted again.
    for i in range(len(local)):
        assert_sample_equal(remote[i], local[i], f"sample {i}")
    assert (str(state), b) not in present_blocks(root)


def _reader_script(url: str, cache: Path, bound: int, out: Path, progress: Path) -> str:
    return textwrap.dedent(f"""
        import hashlib, json, os, sys, torch
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import libshard
        from test_s3_evict import digest
        got = {{}}
        for s in libshard.Loader({url!r}, cache={str(cache)!r}, cache_size={bound},
                                 shuffle=True, seed=11, return_index=True, pin_memory=False):
            got[s["__index__"]] = digest(s)
            open({str(progress)!r} + ".tmp", "w").write(str(len(got)))
            os.replace({str(progress)!r} + ".tmp", {str(progress)!r})  # never seen half-written
        open({str(out)!r}, "w").write(json.dumps(got))
    """)


def test_two_processes_share_an_evicting_cache_one_killed(server, proxy, env, local_ds,
                                                          tmp_path):
    url = upload(server, local_ds, "shared-evict")
    root = tmp_path / "cache"
    bound = 2 * WINDOW + 384 * 1024
    procs = []
    for k in range(2):
        out, progress = tmp_path / f"out{k}", tmp_path / f"progress{k}"
        procs.append((subprocess.Popen(
            [sys.executable, "-c", _reader_script(url, root, bound, out, progress)], env=env),
            out, progress))
    victim, vout, vprogress = procs[0]
    deadline = time.monotonic() + 120
    def served() -> int:  # the samples the victim has served so far (its file is replaced whole)
        text = vprogress.read_text() if vprogress.exists() else ""
        return int(text) if text else 0

    while served() < 10:
        assert victim.poll() is None and time.monotonic() < deadline, "the first reader stalled"
        time.sleep(0.01)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    survivor, sout, _ = procs[1]
    assert survivor.wait(timeout=240) == 0
    got = json.loads(sout.read_text())
    local = libshard.open(local_ds)
    assert len(got) == len(local)
    for i in range(len(local)):
        assert got[str(i)] == digest(local[i]), f"sample {i} differs"
    assert not vout.exists()
    assert cache_bytes(root) <= bound + 2 * CONNECTIONS * BLOCK
    # The killed reader pins nothing any more: a fresh reader evicts whatever it needs.
    remote = libshard.open(url, cache=root, cache_size=bound)
    for i in range(len(local)):
        assert_sample_equal(remote[i], local[i], f"sample {i}")


def test_restart_keeps_good_blocks_and_upgrades_version_1(server, proxy, env, local_ds,
                                                           tmp_path):
    url = upload(server, local_ds, "restart")
    root = tmp_path / "cache"
    bound = WINDOW + 384 * 1024
    list(libshard.Loader(url, cache=root, cache_size=bound, shuffle=False, pin_memory=False))
    kept = present_blocks(root)
    assert kept and len(kept) < block_count(local_ds)
    # A version 1 cache (same layout, version field 1): upgraded in place, nothing lost.
    for p in state_files(root):
        with open(p, "r+b") as f:
            f.seek(8)
            f.write(struct.pack("<I", 1))
    proxy.reset_counts()
    local = libshard.open(local_ds)
    remote = libshard.open(url, cache=root, cache_size=bound)
    assert present_blocks(root) == kept
    for p in state_files(root):
        assert struct.unpack_from("<I", p.read_bytes(), 8)[0] == 2
    # The last samples of the epoch are the most recently read: all cached, no GET.
    for i in range(len(local) - 3, len(local)):
        assert_sample_equal(remote[i], local[i], f"sample {i}")
    assert block_gets(proxy) == {}, "blocks kept across the restart were downloaded again"


def test_two_datasets_under_one_root_share_one_bound(server, proxy, env, local_ds, tmp_path):
    a = upload(server, local_ds, "first")
    b = upload(server, local_ds, "second")
    root = tmp_path / "cache"
    local = libshard.open(local_ds)
    # The first dataset alone, unbounded: all of it cached.
    ra = libshard.open(a, cache=root)
    for i in range(len(local)):
        assert_sample_equal(ra[i], local[i], f"first: sample {i}")
    first = present_blocks(root)
    assert len(first) == block_count(local_ds)
    del ra
    # One bound for the root: the first dataset's bytes and a little more. The second's index
    # and state files alone do not fit beside it, so its room comes from the first's blocks.
    bound = cache_bytes(root) + 64 * 1024
    watch = CacheWatch(root)
    rb = libshard.open(b, cache=root, cache_size=bound)
    for i in range(len(local)):
        assert_sample_equal(rb[i], local[i], f"second: sample {i}")
    largest = watch.done()
    assert largest <= bound + CONNECTIONS * BLOCK, (largest, bound)
    dirs = sorted(p.name for p in (root / BUCKET).iterdir())
    assert len(dirs) == 2 and dirs[0].startswith("first-") and dirs[1].startswith("second-")
    first_left = {k for k in present_blocks(root) if f"/{dirs[0]}/" in k[0]}
    assert len(first_left) < len(first), "nothing of the first dataset was evicted"
    # Both read right through the shared bound afterwards, in one process.
    ra = libshard.open(a, cache=root, cache_size=bound)
    for i in range(len(local)):
        assert_sample_equal(ra[i], local[i], f"first again: sample {i}")
        assert_sample_equal(rb[i], local[i], f"second again: sample {i}")
    assert cache_bytes(root) <= bound + CONNECTIONS * BLOCK


class _Tmpfs:
    """A tmpfs of `size` bytes mounted on `path` (root only; `mounted` says whether it is)."""

    def __init__(self, path: Path, size: int) -> None:
        import ctypes
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.mounted = self.libc.mount(b"tmpfs", str(path).encode(), b"tmpfs", 0,
                                       f"size={size}".encode()) == 0

    def __enter__(self) -> "_Tmpfs":
        return self

    def __exit__(self, *exc) -> None:
        if self.mounted:
            self.libc.umount2(str(self.path).encode(), 2)  # MNT_DETACH


def test_a_full_cache_file_system_evicts_or_reads_through(server, proxy, env, local_ds, tmp_path,
                                                          monkeypatch, capfd):
    """Issue 45: the cache's file system runs out of space (no floor kept). Blocks are evicted to
    make room; with the disk full of other files, reads go through uncached with one warning.
    Never an ENOSPC, never wrong data."""
    url = upload(server, local_ds, "fullfs")
    local = libshard.open(local_ds)
    assert dataset_bytes(local_ds) > 2 * (1 << 20)
    with _Tmpfs(tmp_path / "small", 1 << 20) as fs:
        if not fs.mounted:
            pytest.skip("cannot mount a tmpfs here (needs root)")
        # Twice the file system's size: blocks are evicted to make room.
        ds = libshard.open(url, cache=fs.path)
        for i in range(len(local)):
            assert_sample_equal(ds[i], local[i], f"sample {i}")
    assert "has no room" not in capfd.readouterr().err
    with _Tmpfs(tmp_path / "full", 1 << 20) as fs:
        root = fs.path
        ds = libshard.open(url, cache=root)
        with open(root / "other-file", "wb") as f:  # the disk full of someone else's bytes
            chunk = b"o" * 4096
            try:
                while os.statvfs(root).f_bavail * os.statvfs(root).f_frsize >= 4096:
                    f.write(chunk)
                    f.flush()
            except OSError:
                pass
        # Nothing of the cache's to evict: read through, uncached.
        for i in range(len(local)):
            assert_sample_equal(ds[i], local[i], f"sample {i} (full disk)")
        got = [s for s in libshard.Loader(url, cache=root, shuffle=False, pin_memory=False,
                                          return_index=True)]
        assert len(got) == len(local)
        for s in got:
            i = int(s["__index__"])
            assert_sample_equal({k: v for k, v in s.items() if k != "__index__"}, local[i],
                                f"loader sample {i}")
        assert (root / "other-file").exists()
    err = capfd.readouterr().err
    assert "has no room for more blocks" in err, err[-2000:]
