"""Dataset identity of an s3:// write (docs/guide/writing.md#identity): an interrupted write lives
in its local staging directory (journal, shards, the upload journal); a rerun with other
attributes is refused before any upload is resumed, and with allow_identity_change the staging
directory's write is set aside beside it (kept) and neither its samples nor its uploads are
reused: the published dataset is the new write's alone. Against moto on 127.0.0.1 behind the
fault proxy of s3_server.py, as the other s3:// write tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import libshard
from s3_server import env_fixture, proxy_fixture, server_fixture

pytest.importorskip("boto3")

BUCKET = "libshard-identity"

server = server_fixture(bucket=BUCKET)
proxy = proxy_fixture()
env = env_fixture(LIBSHARD_S3_PART_SIZE=128 * 1024, LIBSHARD_S3_UPLOAD_THREADS=2,
                  LIBSHARD_S3_STAGING=lambda tmp: tmp / "staging",
                  LIBSHARD_CACHE_DIR=lambda tmp: tmp / "cache")


def sample(i: int) -> dict:
    g = torch.Generator().manual_seed(i)
    n = 40 + i
    return {"input_ids": torch.randint(0, 100, (n,), generator=g),
            "hidden_state": torch.randn(1, n, 256, generator=g).to(torch.bfloat16)}


def test_staging_directory_of_another_identity_is_refused_then_set_aside(server, proxy, env,
                                                                          tmp_path):
    url = f"s3://{BUCKET}/ds"
    staging = tmp_path / "staging" / BUCKET / "ds"
    # An interrupted write: small shards, so some are sealed (and uploaded) before it stops.
    w = libshard.Writer(url, attrs={"target_model": "a"}, shard_size="64KiB", journal_every=1,
                        fsync=False)
    for i in range(6):
        w.write(sample(i), key=f"a{i}")
    w.flush()
    w.abort()
    assert (staging / "_journal.lsj").exists() and (staging / "_identity.json").exists()
    with pytest.raises(libshard.InvalidArgumentError) as e:
        libshard.Writer(url, attrs={"target_model": "b"}, fsync=False)
    assert "target_model='a'" in str(e.value) and "'b'" in str(e.value)
    assert (staging / "_journal.lsj").exists()  # untouched
    # Deliberately: the staging write goes aside, whole (its upload journal too).
    w = libshard.Writer(url, attrs={"target_model": "b"}, fsync=False, allow_identity_change=True)
    (aside,) = w.set_aside
    assert Path(aside).parent == staging.parent and Path(aside).name.startswith("ds.stale-")
    assert (Path(aside) / "_journal.lsj").exists()
    assert not any(w.has(f"a{i}") for i in range(6))
    for i in range(3):
        w.write(sample(10 + i), key=f"b{i}")
    w.close()
    ds = libshard.open(url, cache=tmp_path / "cache")
    assert [ds.key(i) for i in range(len(ds))] == ["b0", "b1", "b2"]
    assert ds.attributes == {"target_model": "b"} and ds.identity.recorded
    for i in range(3):
        got, want = ds[i], sample(10 + i)
        assert torch.equal(got["input_ids"], want["input_ids"])
        assert torch.equal(got["hidden_state"], want["hidden_state"])
    assert not staging.exists()  # published: the staging copy is gone, the set-aside one kept
    assert Path(aside).exists()
