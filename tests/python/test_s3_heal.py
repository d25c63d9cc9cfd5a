"""The node-local cache heals instead of poisoning itself (docs/CACHE.md §7), the cache directory
is hostile input, and LIBSHARD_* variables are checked, against a real S3 server on 127.0.0.1
(moto, signature checking on) behind a fault proxy. tests/s3_cache_heal_test.cc runs the same
cases in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

import libshard
from conftest import assert_sample_equal, pack_dir, write_eagle_dir
from s3_server import env_fixture, proxy_fixture, server_fixture

pytest.importorskip("boto3")

BUCKET = "libshard-heal"
BLOCK = 8192


@pytest.fixture(scope="module")
def local_ds(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("heal_src")
    write_eagle_dir(src, 24, seed=5, min_len=8, max_len=60)
    return pack_dir(src, tmp_path_factory.mktemp("heal_packed") / "ds", shard_size="96KiB")


server = server_fixture()
proxy = proxy_fixture(other_version=True)
env = env_fixture(LIBSHARD_CACHE_BLOCK_SIZE=BLOCK, LIBSHARD_S3_CONNECTIONS=2)


def upload(server, local_ds, prefix: str) -> str:
    server.upload_dir(BUCKET, prefix, local_ds)
    return f"s3://{BUCKET}/{prefix}"


def cached(cache: Path, name: str) -> Path:
    found = [p for p in cache.rglob(f"objects/{name}.*")
             if not p.name.endswith(".blocks") and ".tmp-" not in p.name]
    assert len(found) == 1, found
    return found[0]


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))


def read_all(ds, local) -> None:
    for i in range(len(local)):
        assert_sample_equal(ds[i], local[i], f"sample {i}")


def test_block_damaged_in_transfer_heals(server, proxy, env, local_ds, tmp_path, capfd):
    url = upload(server, local_ds, "transfer")
    local = libshard.open(local_ds)
    # The header probe at open passes; block 0 arrives damaged (in its first sample).
    proxy.inject_get_path("shard-00000.lss", "pass", "flip")
    ds = libshard.open(url, cache=tmp_path / "cache")
    read_all(ds, local)
    assert proxy.injected["get-flip"] == 1
    err = capfd.readouterr().err
    assert "the cached copy was damaged" in err and "that download was damaged" in err, err
    assert "re-run libshard pack" not in err
    # Healed for good: a new process reads the cache, not the bucket.
    proxy.reset_counts()
    read_all(libshard.open(url, cache=tmp_path / "cache"), local)
    assert proxy.shard_gets() == {}


def test_block_zero_damaged_on_disk_heals(server, proxy, env, local_ds, tmp_path, capfd):
    url = upload(server, local_ds, "disk")
    local = libshard.open(local_ds)
    read_all(libshard.open(url, cache=tmp_path / "cache"), local)
    shard = cached(tmp_path / "cache", "shard-00000.lss")
    flip(shard, 100)    # the shard header, in block 0
    flip(shard, 5000)   # the first sample, in block 0 too
    ds = libshard.open(url, cache=tmp_path / "cache")
    read_all(ds, local)
    got = list(libshard.Loader(url, cache=tmp_path / "cache", shuffle=False, pin_memory=False))
    assert len(got) == len(local)
    err = capfd.readouterr().err
    assert "shard header was damaged" in err, err
    assert "re-run libshard pack" not in err


def test_loader_heals_damaged_cache(server, proxy, env, local_ds, tmp_path, capfd):
    url = upload(server, local_ds, "loader")
    local = libshard.open(local_ds)
    read_all(libshard.open(url, cache=tmp_path / "cache"), local)
    shard = cached(tmp_path / "cache", "shard-00001.lss")
    flip(shard, 3 * BLOCK + 200)
    want = list(libshard.Loader(local_ds, shuffle=False, return_index=True, pin_memory=False))
    got = list(libshard.Loader(url, cache=tmp_path / "cache", shuffle=False, return_index=True,
                               pin_memory=False))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_sample_equal(g, w, f"loader sample {w['__index__']}")
    assert "damaged on this node's disk" in capfd.readouterr().err


def test_damaged_in_the_bucket_names_the_object(server, proxy, env, local_ds, tmp_path):
    url = upload(server, local_ds, "bucket")
    # The bucket's shard damaged (as a bad upload or bit rot would leave it): the index's
    # checksums say so for a sample in it, on two downloads.
    name = "shard-00000.lss"
    data = bytearray((local_ds / name).read_bytes())
    data[4096 + 300] ^= 0x5A
    server.s3().put_object(Bucket=BUCKET, Key=f"bucket/{name}", Body=bytes(data))
    ds = libshard.open(url, cache=tmp_path / "cache")
    with pytest.raises(libshard.CorruptionError) as e:
        ds[0]
    msg = str(e.value)
    assert "the object in the bucket is damaged" in msg, msg
    assert f"bucket {BUCKET}, key bucket/{name}, bytes " in msg and "ETag" in msg, msg
    assert "re-run libshard pack" not in msg


def test_manifest_cut_short_without_length_is_not_cached(server, proxy, env, local_ds, tmp_path):
    url = upload(server, local_ds, "manifest")
    proxy.inject_get_path("manifest.json", "cut-nolength", "cut-nolength", "cut-nolength")
    with pytest.raises(libshard.CorruptionError, match="received"):
        libshard.open(url, cache=tmp_path / "cache")
    # The server is healthy again: the node is not poisoned.
    proxy.reset_counts()
    proxy.inject_get_path("manifest.json", "cut-nolength")
    ds = libshard.open(url, cache=tmp_path / "cache")
    read_all(ds, libshard.open(local_ds))
    assert cached(tmp_path / "cache", "manifest.json").read_bytes() == \
        (local_ds / "manifest.json").read_bytes()


def test_cached_manifest_and_index_damaged_are_repaired(server, proxy, env, local_ds, tmp_path,
                                                        capfd):
    url = upload(server, local_ds, "wholes")
    local = libshard.open(local_ds)
    read_all(libshard.open(url, cache=tmp_path / "cache"), local)
    manifest = cached(tmp_path / "cache", "manifest.json")
    index = cached(tmp_path / "cache", "index.lsi")
    flip(manifest, manifest.stat().st_size // 2)
    flip(index, 40)
    flip(index, index.stat().st_size - 10)
    read_all(libshard.open(url, cache=tmp_path / "cache"), local)
    assert manifest.read_bytes() == (local_ds / "manifest.json").read_bytes()
    assert index.read_bytes() == (local_ds / "index.lsi").read_bytes()
    assert "repaired" in capfd.readouterr().err


def test_index_damaged_in_transfer_is_not_cached(server, proxy, env, local_ds, tmp_path):
    url = upload(server, local_ds, "index")
    proxy.inject_get_path("index.lsi", "flip")
    read_all(libshard.open(url, cache=tmp_path / "cache"), libshard.open(local_ds))
    assert proxy.injected["get-flip"] == 1
    assert cached(tmp_path / "cache", "index.lsi").read_bytes() == \
        (local_ds / "index.lsi").read_bytes()


def test_server_that_ignores_if_match(server, proxy, env, local_ds, tmp_path):
    url = upload(server, local_ds, "ifmatch")
    ds = libshard.open(url, cache=tmp_path / "cache")
    # Replaced under the open dataset; the server then serves the new bytes for the old ETag
    # and hides which version it served.
    name = "shard-00000.lss"
    data = bytearray((local_ds / name).read_bytes())
    data[4096 + 8] ^= 1
    server.s3().put_object(Bucket=BUCKET, Key=f"ifmatch/{name}", Body=bytes(data))
    proxy.inject_get_path(name, *["ignore-if-match"] * 4)
    with pytest.raises(OSError, match="replaced since the dataset was opened"):
        ds[0]


def test_server_without_etags_heals_once_the_right_object_is_back(server, proxy, env, local_ds,
                                                                   tmp_path):
    """Issue 45: a server that ignores conditional requests and sends no ETag serves a replaced
    shard under the old name. The read that gets those bytes is a clear error (never the bytes);
    once the right object is back, the next read heals."""
    url = upload(server, local_ds, "noetag")
    proxy.unversion("/noetag/")
    local = libshard.open(local_ds)
    ds = libshard.open(url, cache=tmp_path / "cache")
    name = "shard-00000.lss"
    original = (local_ds / name).read_bytes()
    changed = bytearray(original)
    changed[4096 + 8] ^= 1  # sample 0
    s3 = server.s3()
    s3.put_object(Bucket=BUCKET, Key=f"noetag/{name}", Body=bytes(changed))
    for _ in range(2):
        with pytest.raises(OSError, match="does not hold the bytes the index records") as e:
            ds[0]
        assert "names no version" in str(e.value) and "reopen the dataset" in str(e.value)
    s3.put_object(Bucket=BUCKET, Key=f"noetag/{name}", Body=original)
    read_all(ds, local)
    read_all(libshard.open(url, cache=tmp_path / "cache"), local)


def test_cache_directory_symlinks_are_not_followed(server, proxy, env, local_ds, tmp_path):
    import subprocess
    import sys
    url = upload(server, local_ds, "symlinks")
    cache = tmp_path / "cache"
    read_all(libshard.open(url, cache=cache), libshard.open(local_ds))
    outside = tmp_path / "outside"
    outside.write_bytes(b"precious")
    usage = cache / ".usage"
    usage.unlink()
    usage.symlink_to(outside)
    shard = cached(cache, "shard-00000.lss")
    shard.unlink()
    shard.symlink_to(outside)
    # A new process (this one keeps the root's files open): reads every sample.
    script = (f"import libshard; ds = libshard.open({url!r}, cache={str(cache)!r}); "
              f"print(sum(len(ds[i]) > 0 for i in range(len(ds))))")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "24"
    assert outside.read_bytes() == b"precious"
    assert not usage.is_symlink() and not shard.is_symlink()


def test_usage_that_lies_is_measured_again(server, proxy, env, local_ds, tmp_path, monkeypatch):
    import struct
    import time
    first = upload(server, local_ds, "usage")
    second = upload(server, local_ds, "usage2")
    cache = tmp_path / "cache"
    local = libshard.open(local_ds)
    read_all(libshard.open(first, cache=cache), local)
    monkeypatch.setenv("LIBSHARD_CACHE_MEASURE_SECONDS", "3600")
    # 2^62 bytes used, measured a day from now: once, every download found the cache "full",
    # evicted everything it could, and the count was never measured again.
    rec = b"LSUSAGE1" + struct.pack("<IIQQ", 1, 64, 1 << 62, time.time_ns() + 86400 * 10**9)
    (cache / ".usage").write_bytes(rec + bytes(64 - len(rec)))
    read_all(libshard.open(second, cache=cache, cache_size="64MiB"), local)
    used, when = struct.unpack_from("<QQ", (cache / ".usage").read_bytes(), 16)
    assert used < 64 << 20 and when <= time.time_ns()
    # Nothing of the first dataset was evicted for the lie.
    proxy.reset_counts()
    read_all(libshard.open(first, cache=cache, cache_size="64MiB"), local)
    assert proxy.shard_gets() == {}


def test_bad_environment_variable_is_named(server, proxy, env, local_ds, tmp_path, monkeypatch):
    url = upload(server, local_ds, "knobs")
    monkeypatch.setenv("LIBSHARD_CACHE_MIN_FREE", "lots")
    with pytest.raises(ValueError, match="environment variable 'LIBSHARD_CACHE_MIN_FREE'"):
        libshard.open(url, cache=tmp_path / "cache")
    monkeypatch.setenv("LIBSHARD_CACHE_MIN_FREE", "1KiB")  # a size, as cache_size takes
    assert len(libshard.open(url, cache=tmp_path / "cache")) == 24
    monkeypatch.setenv("LIBSHARD_S3_CONNECTIONS", "0")
    with pytest.raises(ValueError, match="'LIBSHARD_S3_CONNECTIONS' = 0 is out of range"):
        libshard.open(url, cache=tmp_path / "cache")
    monkeypatch.delenv("LIBSHARD_S3_CONNECTIONS")
    monkeypatch.setenv("LIBSHARD_ENGINE", "fast")
    with pytest.raises(ValueError, match="LIBSHARD_ENGINE"):
        libshard.Loader(local_ds)
