"""s3:// datasets through the node-local cache (docs/guide/object-storage.md, docs/CACHE.md),
against a real S3 server on 127.0.0.1 (moto, signature checking on) behind a fault proxy."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import libshard
from conftest import assert_sample_equal, pack_dir, write_eagle_dir
from s3_server import env_fixture, proxy_fixture, server_fixture

pytest.importorskip("boto3")

BUCKET = "libshard-test"
BLOCK = 8192  # small cache blocks: many blocks per shard


@pytest.fixture(scope="module")
def local_ds(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("s3_src")
    write_eagle_dir(src, 40, seed=3, min_len=8, max_len=60)
    return pack_dir(src, tmp_path_factory.mktemp("s3_packed") / "ds", shard_size="96KiB")


server = server_fixture()
proxy = proxy_fixture()
env = env_fixture(LIBSHARD_CACHE_BLOCK_SIZE=BLOCK, LIBSHARD_S3_CONNECTIONS=4)


_uploaded = set()


def upload(server, local_ds, prefix: str) -> str:
    if prefix not in _uploaded:
        server.upload_dir(BUCKET, prefix, local_ds)
        _uploaded.add(prefix)
    return f"s3://{BUCKET}/{prefix}"


def block_count(local_ds: Path) -> int:
    return sum((p.stat().st_size + BLOCK - 1) // BLOCK for p in local_ds.glob("*.lss"))


def test_every_sample_equals_local(server, proxy, env, local_ds, tmp_path):
    url = upload(server, local_ds, "equal")
    local = libshard.open(local_ds)
    remote = libshard.open(url, cache=tmp_path / "cache", cache_size="64MiB")
    assert len(remote) == len(local) and remote.path == url
    for i in range(len(local)):
        assert_sample_equal(remote[i], local[i], f"sample {i}")
    # The loader over the same URL (a fresh cache): same samples in the same order.
    got = list(libshard.Loader(url, cache=tmp_path / "cache2", shuffle=False,
                               return_index=True, pin_memory=False))
    want = list(libshard.Loader(local_ds, shuffle=False, return_index=True, pin_memory=False))
    assert len(got) == len(want) == len(local)
    for g, w in zip(got, want):
        assert_sample_equal(g, w, f"loader sample {w['__index__']}")
    # Each block was downloaded once per cache: two caches, so two GETs per block at most.
    assert max(proxy.shard_gets().values()) <= 2
    # A warm cache: no shard bytes downloaded again.
    proxy.reset_counts()
    again = list(libshard.Loader(url, cache=tmp_path / "cache2", shuffle=True, seed=1,
                                 pin_memory=False))
    assert len(again) == len(local)
    assert proxy.shard_gets() == {}
    assert all(m in ("HEAD", "GET") for m, _, _ in proxy.requests)


def test_bad_credentials(server, proxy, env, local_ds, tmp_path, monkeypatch):
    url = upload(server, local_ds, "equal")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(PermissionError) as e:
        libshard.open(url, cache=tmp_path / "cache")
    msg = str(e.value)
    assert "HTTP 403" in msg and "SignatureDoesNotMatch" in msg
    assert f"{proxy.endpoint}/{BUCKET}/equal/manifest.json" in msg
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY0000000")
    with pytest.raises(PermissionError, match="InvalidAccessKeyId"):
        libshard.open(url, cache=tmp_path / "cache")


def test_missing_dataset(server, proxy, env, tmp_path):
    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        libshard.open(f"s3://{BUCKET}/nothing-here", cache=tmp_path / "cache")


def test_faults_are_retried(server, proxy, env, local_ds, tmp_path):
    url = upload(server, local_ds, "equal")
    local = libshard.open(local_ds)
    remote = libshard.open(url, cache=tmp_path / "cache")
    proxy.inject("503", "reset", "truncate", "503", "stall:4", "reset")
    for i in range(len(local)):
        assert_sample_equal(remote[i], local[i], f"sample {i}")
    assert proxy.injected == {"503": 2, "reset": 2, "truncate": 1, "stall": 1}


def test_retries_are_bounded(server, proxy, env, local_ds, tmp_path, monkeypatch):
    url = upload(server, local_ds, "equal")
    remote = libshard.open(url, cache=tmp_path / "cache")
    monkeypatch.setenv("LIBSHARD_S3_MAX_ATTEMPTS", "3")
    remote = libshard.open(url, cache=tmp_path / "cache")
    proxy.inject(*["503"] * 3)
    start = time.monotonic()
    with pytest.raises(OSError) as e:
        remote[0]
    assert time.monotonic() - start < 20
    msg = str(e.value)
    assert "failed after 3 attempts" in msg and "HTTP 503 SlowDown" in msg
    assert "block 0 (bytes 0-8191)" in msg and "shard-00000.lss" in msg
    assert remote[0] is not None  # the next read tries again


def _reader_script(url: str, cache: Path, out: Path) -> str:
    return textwrap.dedent(f"""
        import libshard, sys
        n = 0
        for s in libshard.Loader({url!r}, cache={str(cache)!r}, shuffle=True, seed=7,
                                 pin_memory=False):
            n += 1
        open({str(out)!r}, "w").write(str(n))
    """)


def test_processes_share_one_cache_one_get_per_block(server, proxy, env, local_ds, tmp_path):
    url = upload(server, local_ds, "shared")
    cache = tmp_path / "cache"
    procs = []
    for k in range(3):
        out = tmp_path / f"n{k}"
        procs.append((subprocess.Popen([sys.executable, "-c", _reader_script(url, cache, out)],
                                       env=env), out))
    for p, _ in procs:
        assert p.wait(timeout=240) == 0
    n = len(libshard.open(local_ds))
    assert [int(out.read_text()) for _, out in procs] == [n] * 3
    gets = proxy.shard_gets()
    blocks = {k: v for k, v in gets.items() if k[1] != "bytes=0-4095"}
    assert len(blocks) == block_count(local_ds)
    assert set(blocks.values()) == {1}, f"blocks downloaded more than once: {blocks}"


def test_kill_mid_download_then_warm_restart(server, proxy, env, local_ds, tmp_path):
    url = upload(server, local_ds, "killed")
    cache = tmp_path / "cache"
    out = tmp_path / "n"
    # Let a few blocks arrive, then stall one for long: the reader is killed in the middle of it.
    e = dict(env, LIBSHARD_S3_CONNECTIONS="1", LIBSHARD_S3_STALL_SECONDS="60")
    script = _reader_script(url, cache, out)
    proxy.inject(*["pass"] * 6, "stall:30")  # six blocks arrive, the seventh stalls
    proc = subprocess.Popen([sys.executable, "-c", script], env=e)
    assert proxy.stalling.wait(timeout=120), "no block download stalled"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    before = {k for k, v in proxy.shard_gets().items() if k[1] != "bytes=0-4095"}
    assert before
    proxy.reset_counts()
    # Restart: every sample right (the half-written block is fetched again, nothing else).
    local = libshard.open(local_ds)
    remote = libshard.open(url, cache=cache)
    for i in range(len(local)):
        assert_sample_equal(remote[i], local[i], f"sample {i}")
    again = {k for k in proxy.shard_gets() if k[1] != "bytes=0-4095"}
    assert not (again & before), f"good blocks downloaded again: {sorted(again & before)}"
    assert len(again) + len(before) == block_count(local_ds)


def test_object_replaced_mid_epoch(server, proxy, env, local_ds, tmp_path):
    url = upload(server, local_ds, "replaced")
    remote = libshard.open(url, cache=tmp_path / "cache")
    local = libshard.open(local_ds)
    assert_sample_equal(remote[0], local[0])
    # Replace shard 0 with other bytes of the same size (a re-upload): a new ETag.
    shard0 = local_ds / "shard-00000.lss"
    data = bytearray(shard0.read_bytes())
    data[-1] ^= 0xFF
    server.s3().put_object(Bucket=BUCKET, Key="replaced/shard-00000.lss", Body=bytes(data))
    errors = []
    for i in range(1, len(local)):
        try:
            assert_sample_equal(remote[i], local[i], f"sample {i}")  # old version only
        except OSError as err:
            errors.append(str(err))
    assert errors, "no read saw the replaced object"
    assert all("replaced" in m and "HTTP 412" in m and "shard-00000.lss" in m for m in errors)
    # A new open reads the new version into another view of the cache.
    assert len(libshard.open(url, cache=tmp_path / "cache")) == len(local)


def test_cache_full(server, proxy, env, local_ds, tmp_path):
    url = upload(server, local_ds, "equal")
    # Smaller than the index and state files, which are never evicted: the open already fails
    # (with eviction, a bound that holds them and a block reads through; test_s3_evict.py).
    with pytest.raises(MemoryError, match="the cache is full") as e:
        remote = libshard.open(url, cache=tmp_path / "cache", cache_size=3 * BLOCK)
        for i in range(len(remote)):
            remote[i]
    assert "cache_size 24576" in str(e.value)


def test_cli_info_verify_bench(server, proxy, env, local_ds, tmp_path):
    from conftest import _cli
    cli = _cli()
    if cli is None:
        pytest.skip("the libshard command is not built")
    url = upload(server, local_ds, "equal")
    e = dict(env, LIBSHARD_CACHE_DIR=str(tmp_path / "cache"))
    info = subprocess.run([cli, "info", url], env=e, capture_output=True, text=True, timeout=120)
    assert info.returncode == 0, info.stderr
    assert str(len(libshard.open(local_ds))) in info.stdout
    verify = subprocess.run([cli, "verify", url], env=e, capture_output=True, text=True,
                            timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    bench = subprocess.run([cli, "bench", url], env=e, capture_output=True, text=True,
                           timeout=120)
    assert bench.returncode == 0, bench.stdout + bench.stderr
    bad = subprocess.run([cli, "verify", f"s3://{BUCKET}/nothing-here"], env=e,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "no manifest.json" in bad.stderr


def test_cli_cache_options_mean_what_python_cache_options_mean(server, proxy, env, local_ds,
                                                             tmp_path):
    """`info/verify/bench --cache DIR --cache-size SIZE` are read by the library's dataset option
    table, as Python's cache= / cache_size= are: the cache lands in DIR, the bound is enforced
    (the same MemoryError text as test_cache_full), 0 means no bound, a bad size is a usage
    error naming the flag."""
    from conftest import _cli
    cli = _cli()
    if cli is None:
        pytest.skip("the libshard command is not built")
    url = upload(server, local_ds, "equal")
    e = dict(env, LIBSHARD_CACHE_DIR=str(tmp_path / "not-this-one"))
    cache = tmp_path / "cli-cache"
    for cmd in (["info"], ["verify"], ["bench"]):
        r = subprocess.run([cli, *cmd, url, "--cache", str(cache), "--cache-size", "0"], env=e,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, cmd + [r.stdout, r.stderr]
    assert any(cache.rglob("*.blocks")) and not (tmp_path / "not-this-one").exists()
    full = subprocess.run([cli, "verify", url, "--cache", str(tmp_path / "small"),
                           "--cache-size", str(3 * BLOCK)], env=e, capture_output=True,
                          text=True, timeout=120)
    assert full.returncode == 1 and "cache_size 24576" in full.stderr, full.stderr
    bad = subprocess.run([cli, "info", url, "--cache-size", "lots"], env=e, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "--cache-size" in bad.stderr and "lots" in bad.stderr


def test_cache_size_zero_or_none_is_no_bound(server, proxy, env, local_ds, tmp_path):
    """cache_size means what the C++ option means: 0 and None are "no bound" (C++'s 0), a
    size string is parsed by the library; a negative or unreadable size is a ValueError."""
    url = upload(server, local_ds, "equal")
    local = libshard.open(local_ds)
    for size in (0, None, "0", "64MiB", 64 << 20):
        remote = libshard.open(url, cache=tmp_path / "cache", cache_size=size)
        assert_sample_equal(remote[len(local) - 1], local[len(local) - 1], f"cache_size={size!r}")
        again = pickle.loads(pickle.dumps(remote))  # spawned workers reopen with the same
        assert len(again) == len(local)
    for bad in (-1, "lots", True):
        with pytest.raises(ValueError, match="cache_size"):
            libshard.open(url, cache=tmp_path / "cache", cache_size=bad)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers(server, proxy, env, local_ds, tmp_path, context):
    """A remote Dataset used by DataLoader workers: forked ones inherit it (and start their own
    fetcher, never the parent's), spawned ones reopen it by URL and cache options."""
    import torch.utils.data
    url = upload(server, local_ds, "workers")
    remote = libshard.open(url, cache=tmp_path / "cache")
    remote[0]  # the parent's fetcher is running when the workers fork
    local = libshard.open(local_ds)
    dl = torch.utils.data.DataLoader(remote, batch_size=None, num_workers=2,
                                     multiprocessing_context=context, timeout=120)
    got = list(dl)
    assert len(got) == len(local)
    for i, g in enumerate(got):
        assert_sample_equal(g, local[i], f"sample {i}")
    blocks = {k: v for k, v in proxy.shard_gets().items() if k[1] != "bytes=0-4095"}
    assert set(blocks.values()) == {1}


def test_profile_credentials_rotated_mid_run(server, proxy, env, local_ds, tmp_path, monkeypatch):
    """Credentials from AWS_PROFILE in the shared credentials file; a key rotated in that file
    while the dataset is open is picked up at the first 403 (issue 24: credentials expiring)."""
    import boto3
    import json
    url = upload(server, local_ds, "equal")
    iam = boto3.client("iam", endpoint_url=server.endpoint, region_name="us-east-1",
                       aws_access_key_id=server.access_key,
                       aws_secret_access_key=server.secret_key)
    user = f"rotate-{os.getpid()}"
    iam.create_user(UserName=user)
    iam.put_user_policy(UserName=user, PolicyName="all", PolicyDocument=json.dumps(
        {"Version": "2012-10-17",
         "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    creds = tmp_path / "credentials"

    def new_key() -> str:
        k = iam.create_access_key(UserName=user)["AccessKey"]
        creds.write_text(f"[other]\naws_access_key_id = AKIAWRONG\naws_secret_access_key = x\n"
                         f"[train]\naws_access_key_id = {k['AccessKeyId']}\n"
                         f"aws_secret_access_key = {k['SecretAccessKey']}\n")
        return k["AccessKeyId"]

    first = new_key()
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_PROFILE", "train")
    local = libshard.open(local_ds)
    remote = libshard.open(url, cache=tmp_path / "cache")
    assert_sample_equal(remote[0], local[0])
    new_key()
    iam.delete_access_key(UserName=user, AccessKeyId=first)
    proxy.reset_counts()
    for i in range(len(local)):
        assert_sample_equal(remote[i], local[i], f"sample {i}")
    assert proxy.statuses[403] >= 1, "the old key was never refused"
    monkeypatch.setenv("AWS_PROFILE", "other")
    with pytest.raises(PermissionError, match="profile 'other' of"):
        libshard.open(url, cache=tmp_path / "cache")


def test_s3_parts_append_and_upgrade_are_refused_without_a_local_s3_directory(
        tmp_path, monkeypatch, local_ds):
    """Writing to s3:// works (test_s3_write.py); merging s3:// parts, appending to an s3://
    dataset and upgrading one do not, and are refused cleanly, creating nothing locally."""
    from conftest import _cli
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="merge reads local parts only"):
        libshard.merge(tmp_path / "merged", [f"s3://{BUCKET}/part"])
    cli = _cli()
    if cli is not None:
        r = subprocess.run([cli, "pack", str(tmp_path), "-o", f"s3://{BUCKET}/x", "--append"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "--append to an s3:// dataset is not supported" in r.stderr
        r = subprocess.run([cli, "upgrade", f"s3://{BUCKET}/x"], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode != 0 and "upgrade rewrites a local directory" in r.stderr, r.stderr
    assert not (tmp_path / "s3:").exists()


def _resident_pages(path: Path) -> tuple[int, int]:
    """(pages of `path` in the page cache, pages of `path`), by mincore(2) over a mapping."""
    import ctypes
    import mmap
    size = path.stat().st_size
    page = mmap.PAGESIZE
    pages = (size + page - 1) // page
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            vec = ctypes.create_string_buffer(pages)
            assert libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
            return sum(b & 1 for b in vec.raw), pages
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def test_fetched_blocks_leave_no_page_cache_copy(server, proxy, env, local_ds, tmp_path):
    # The loader reads the cache with O_DIRECT: a page-cache copy of a fetched block is memory
    # wasted on every rank's node and makes the first O_DIRECT read of it invalidate the pages
    # on the reading thread. The fetcher drops it once the block is durable.
    url = upload(server, local_ds, "nocopy")
    cache = tmp_path / "cache"
    got = list(libshard.Loader(url, cache=cache, shuffle=False, pin_memory=False))
    assert len(got) == len(libshard.open(local_ds))
    data = [p for p in cache.rglob("objects/shard-*.lss.*") if not p.name.endswith(".blocks")]
    assert data, sorted(str(p) for p in cache.rglob("*"))
    for p in data:
        resident, pages = _resident_pages(p)
        # The shard header page, written at open, may stay; no fetched block does.
        assert pages > 4 and resident <= 2, f"{p}: {resident} of {pages} pages cached"
