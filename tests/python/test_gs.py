"""gs:// datasets: Cloud Storage through its S3-interoperable XML API (HMAC key, SigV4, region
"auto"), the second store of the S3 dialect (libshard/src/objstore/gcs_store.cc). Against a real
server on 127.0.0.1: moto's S3 server with signature checking on, behind the fault proxy of
s3_server.py, named by gs:// URLs, LIBSHARD_GS_ENDPOINT and GS_ACCESS_KEY_ID /
GS_SECRET_ACCESS_KEY, with no AWS_ variable set. What s3:// does gs:// does the same way: open,
the Loader, the node-local cache, Writer, `pack -o` and follow mode."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import List

import pytest

import libshard
from conftest import assert_sample_equal, pack_dir, write_eagle_dir
from s3_server import env_fixture, proxy_fixture, server_fixture

pytest.importorskip("boto3")

BUCKET = "libshard-gs"
BLOCK = 8192  # small cache blocks: many blocks per shard
N = 30

server = server_fixture(bucket=BUCKET)
proxy = proxy_fixture()
env = env_fixture("gs", LIBSHARD_CACHE_BLOCK_SIZE=BLOCK, LIBSHARD_S3_CONNECTIONS=4,
                  LIBSHARD_S3_PART_SIZE=64 * 1024, LIBSHARD_S3_UPLOAD_THREADS=4,
                  LIBSHARD_S3_STAGING=lambda tmp: tmp / "staging",
                  LIBSHARD_CACHE_DIR=lambda tmp: tmp / "cache")


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("gs_src")
    write_eagle_dir(src, N, seed=5, min_len=8, max_len=60)
    return src


@pytest.fixture(scope="module")
def local_ds(source, tmp_path_factory) -> Path:
    return pack_dir(source, tmp_path_factory.mktemp("gs_local") / "ds", shard_size="96KiB")


_packed = set()


def packed_url(server, env, source: Path, prefix: str) -> str:
    """`libshard pack SOURCE -o gs://BUCKET/PREFIX` (once per prefix and module)."""
    from conftest import _cli
    cli = _cli()
    if cli is None:
        pytest.skip("the libshard command is not built")
    url = f"gs://{BUCKET}/{prefix}"
    if url not in _packed:
        r = subprocess.run([cli, "pack", str(source), "-o", url, "--shard-size", "96KiB"],
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        _packed.add(url)
    return url


def objects(server, prefix: str) -> dict:
    s3 = server.s3()
    out = s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    return {o["Key"][len(prefix) + 1:]: s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
            for o in out if o["Key"].startswith(prefix + "/")}


def test_pack_to_gs_reads_back_bit_exact(server, proxy, env, source, local_ds, tmp_path):
    url = packed_url(server, env, source, "packed")
    # The objects are a whole dataset: copied down as they are stored (by the test's own client),
    # they open as a local directory whose samples are the local pack's, bit for bit, and whose
    # shards have its sizes (a pack names each dataset anew, so the bytes differ in that id).
    stored = objects(server, "packed")
    local = {p.name: p.stat().st_size for p in local_ds.iterdir() if p.is_file()}
    shards = sorted(n for n in local if n.endswith(".lss"))
    assert shards and sorted(n for n in stored if n.endswith(".lss")) == shards
    assert {n: len(stored[n]) for n in shards} == {n: local[n] for n in shards}
    copy = tmp_path / "copy"
    copy.mkdir()
    for name, data in stored.items():
        (copy / name).write_bytes(data)
    want = libshard.open(local_ds)
    copied = libshard.open(copy, verify=True)
    assert len(copied) == N
    for i in range(N):
        assert_sample_equal(copied[i], want[i], f"copied sample {i}")
    # The shard bytes went up as multipart uploads (parts of 64 KiB) under the gs:// scheme's
    # own staging directory.
    assert any("partNumber=" in path for m, path, _ in proxy.requests if m == "PUT")
    # Read back through the cache: every sample equals the local pack's.
    got = libshard.open(url, cache=tmp_path / "cache")
    assert got.path == url and len(got) == len(want) == N
    for i in range(N):
        assert_sample_equal(got[i], want[i], f"sample {i}")


def test_writer_to_gs_round_trip(server, proxy, env, tmp_path):
    import torch
    url = f"gs://{BUCKET}/written"
    g = torch.Generator().manual_seed(3)
    samples = [{"x": torch.randn(16 + i, generator=g), "y": torch.arange(i + 1)}
               for i in range(20)]
    with libshard.Writer(url, shard_size="64KiB", fsync=False) as w:
        for i, s in enumerate(samples):
            w.write(s, key=f"k{i:03d}")
    assert "manifest.json" in objects(server, "written")
    ds = libshard.open(url, cache=tmp_path / "cache")
    assert len(ds) == len(samples)
    for i, s in enumerate(samples):
        assert_sample_equal(ds[i], s, f"sample {i}")
    # An existing dataset is not replaced.
    with pytest.raises(FileExistsError, match=f"gs://{BUCKET}/written"):
        with libshard.Writer(url) as w:
            w.write(samples[0], key="again")


def test_loader_covers_every_sample_once(server, proxy, env, source, local_ds, tmp_path):
    url = packed_url(server, env, source, "packed")
    want = libshard.open(local_ds)
    seen = []
    for s in libshard.Loader(url, cache=tmp_path / "cache", shuffle=True, seed=2,
                             return_index=True, pin_memory=False):
        i = int(s["__index__"])
        seen.append(i)
        s = {k: v for k, v in s.items() if k != "__index__"}
        assert_sample_equal(s, want[i], f"loader sample {i}")
    assert sorted(seen) == list(range(N))
    # Two ranks: each sample on exactly one of them.
    ranks = [[int(s["__index__"]) for s in libshard.Loader(
        url, cache=tmp_path / "cache", shuffle=True, seed=2, rank=r, world_size=2,
        return_index=True, pin_memory=False)] for r in range(2)]
    assert sorted(ranks[0] + ranks[1]) == list(range(N))


def test_ranged_reads_through_the_cache(server, proxy, env, source, local_ds, tmp_path):
    url = packed_url(server, env, source, "packed")
    proxy.reset_counts()
    ds = libshard.open(url, cache=tmp_path / "cache")
    want = libshard.open(local_ds)
    for i in reversed(range(N)):
        assert_sample_equal(ds[i], want[i], f"sample {i}")
    gets = proxy.shard_gets()
    assert gets and all(rng.startswith("bytes=") for _, rng in gets)
    # Blocks of BLOCK bytes (the shard header at open is its own range): each downloaded once.
    assert max(gets.values()) == 1
    blocks = {(p, r) for p, r in gets if r != "bytes=0-4095"}
    size = sum((p.stat().st_size + BLOCK - 1) // BLOCK for p in local_ds.glob("*.lss"))
    assert len(blocks) <= size
    # A warm cache: no shard byte downloaded again, by a new dataset on the same cache.
    proxy.reset_counts()
    again = libshard.open(url, cache=tmp_path / "cache")
    for i in range(N):
        assert_sample_equal(again[i], want[i], f"warm sample {i}")
    assert proxy.shard_gets() == {}


def test_missing_dataset_bucket_and_bad_names(server, proxy, env, tmp_path):
    with pytest.raises(FileNotFoundError, match=f"gs://{BUCKET}/nothing-here.*no manifest.json"):
        libshard.open(f"gs://{BUCKET}/nothing-here", cache=tmp_path / "cache")
    with pytest.raises(FileNotFoundError) as e:
        libshard.open("gs://no-such-bucket/ds", cache=tmp_path / "cache")
    assert "gs://no-such-bucket/ds" in str(e.value)
    with pytest.raises(ValueError, match="not a valid Cloud Storage bucket name.*gs://BUCKET"):
        libshard.open("gs://Bad-Bucket/ds", cache=tmp_path / "cache")


def test_credential_errors_name_gs_and_its_variables(server, proxy, env, source, tmp_path,
                                                     monkeypatch):
    url = packed_url(server, env, source, "packed")
    # A wrong secret: denied, naming the HMAC variables to check (not AWS's).
    monkeypatch.setenv("GS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(PermissionError) as e:
        libshard.open(url, cache=tmp_path / "cache")
    msg = str(e.value)
    assert "HTTP 403" in msg and "SignatureDoesNotMatch" in msg
    assert "GS_ACCESS_KEY_ID / GS_SECRET_ACCESS_KEY" in msg and "gs://" in msg
    assert "AWS_" not in msg
    # Half a key: refused before any request, naming the missing variable.
    monkeypatch.delenv("GS_SECRET_ACCESS_KEY")
    with pytest.raises(ValueError, match="gs://: GS_ACCESS_KEY_ID is set but "
                                         "GS_SECRET_ACCESS_KEY is not"):
        libshard.open(url, cache=tmp_path / "cache")
    # No key at all, with AWS's set: gs:// reads no AWS_ variable, so its requests are anonymous
    # and the server refuses them.
    monkeypatch.delenv("GS_ACCESS_KEY_ID")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret_key)
    with pytest.raises(PermissionError) as e:
        libshard.open(url, cache=tmp_path / "cache")
    msg = str(e.value)
    assert "anonymous requests" in msg and "GS_ACCESS_KEY_ID" in msg and "gs://" in msg
    # An endpoint without a scheme.
    monkeypatch.setenv("GS_ACCESS_KEY_ID", server.access_key)
    monkeypatch.setenv("GS_SECRET_ACCESS_KEY", server.secret_key)
    monkeypatch.setenv("LIBSHARD_GS_ENDPOINT", "127.0.0.1:9")
    with pytest.raises(ValueError, match="LIBSHARD_GS_ENDPOINT.* is not an endpoint"):
        libshard.open(url, cache=tmp_path / "cache")


def test_a_follower_of_a_gs_write_serves_it_once_its_manifest_is_up(env):
    url = f"gs://{BUCKET}/followed"
    n = 8
    seen: List[int] = []
    errors: List[BaseException] = []
    loader = libshard.Loader(url, follow=True, batch_size=2, slow_wait_warning_seconds=60)

    def follow() -> None:
        try:
            for step in loader:
                seen.extend(int(s["ident"][0]) for s in step)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    t = threading.Thread(target=follow)
    t.start()
    child = Path(__file__).resolve().parent / "follow_writer_child.py"
    r = subprocess.run([sys.executable, str(child), url, str(n)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    t.join(timeout=120)
    assert not t.is_alive() and not errors, errors
    assert sorted(seen) == list(range(n))


def test_storage_info_names_the_gs_driver(env):
    info = libshard._core.storage_info(f"gs://{BUCKET}/some/prefix")
    assert info["driver"] == "gs" and not info["local_files"]
    assert info["location"] == f"gs://{BUCKET}/some/prefix"
