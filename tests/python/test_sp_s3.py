"""Sequence parallelism over s3:// (docs/guide/long-context.md, "What each storage path reads";
docs/CACHE.md §3): a group of 4 ranks, each with a node cache of its own, fetches from the bucket
only the cache blocks covering its token slice, about one copy of each sample between them (not 4,
and not the whole sample per rank), and every slice equals the local dataset's rows bit for bit;
``Dataset.read(i, rows=...)`` on s3:// fetches only its rows' blocks. Against moto (signatures
checked) behind the counting proxy (tests/python/s3_server.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import libshard
from s3_server import env_fixture, proxy_fixture, server_fixture

pytest.importorskip("boto3")

BUCKET = "libshard-sp"
BLOCK = 64 << 10
HIDDEN = 1024  # 2 KiB rows of bf16
DEGREE = 4


def length(i: int) -> int:
    return 4096 + 1000 * i  # 8 .. 12 MiB of hidden_state


@pytest.fixture(scope="module")
def local_ds(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sp_s3") / "ds"
    with libshard.Writer(path, fsync=False) as w:
        for i in range(3):
            n = length(i)
            gen = torch.Generator().manual_seed(11 + i)
            w.write({"input_ids": torch.arange(n, dtype=torch.int64) + i,
                     "loss_mask": (torch.arange(n) % 3 != 0).to(torch.int64),
                     "hidden_state": torch.randn(1, n, HIDDEN, generator=gen).to(torch.bfloat16)},
                    key=f"s{i}")
    return path


server = server_fixture()
proxy = proxy_fixture()
env = env_fixture(LIBSHARD_CACHE_BLOCK_SIZE=BLOCK, LIBSHARD_S3_CONNECTIONS=4)


def fetched_bytes(proxy) -> int:
    """Bytes of the shards' ranged GETs since the last reset (the header read at open included)."""
    total = 0
    for (_, rng), count in proxy.shard_gets().items():
        first, last = rng.split("=")[1].split("-")
        total += (int(last) - int(first) + 1) * count
    return total


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit (bf16 compared as bytes)."""
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8),
                                              b.contiguous().view(torch.uint8))


def test_a_group_over_s3_fetches_about_one_copy(server, proxy, env, local_ds, tmp_path):
    server.upload_dir(BUCKET, "group", local_ds)
    url = f"s3://{BUCKET}/group"
    local = libshard.open(local_ds)
    assert local.has_row_blocks
    total = 0
    for rank in range(DEGREE):
        proxy.reset_counts()
        loader = libshard.Loader(url, cache=tmp_path / f"cache{rank}", rank=rank,
                                 world_size=DEGREE, sequence_parallel=DEGREE, seed=1,
                                 return_index=True, pin_memory=False)
        served = 0
        for s in loader:
            served += 1
            i = int(s[libshard.INDEX_KEY])
            sp = s[libshard.SP_KEY]
            want = local.read(i, rows=(sp["start"], sp["stop"]))
            for key in ("input_ids", "loss_mask", "hidden_state"):
                assert same(s[key], want[key]), (rank, i, key)
        assert served == len(local)
        fetched = fetched_bytes(proxy)
        total += fetched
        whole = sum(p.stat().st_size for p in local_ds.glob("*.lss"))
        # A quarter of each sample plus a row block (and a cache block) at each end of each field.
        assert fetched < 0.5 * whole, (rank, fetched, whole)
    whole = sum(p.stat().st_size for p in local_ds.glob("*.lss"))
    assert total < 1.45 * whole, (total, whole)


def test_read_of_rows_over_s3_fetches_only_their_blocks(server, proxy, env, local_ds, tmp_path):
    server.upload_dir(BUCKET, "rows", local_ds)
    remote = libshard.open(f"s3://{BUCKET}/rows", cache=tmp_path / "cache")
    local = libshard.open(local_ds)
    assert remote.has_row_blocks
    proxy.reset_counts()
    for i in range(len(local)):
        rows = (length(i) // 2, length(i) // 2 + length(i) // 4)
        got, want = remote.read(i, rows=rows), local.read(i, rows=rows)
        for key in ("input_ids", "loss_mask", "hidden_state"):
            assert same(got[key], want[key]), (i, key)
    whole = sum(p.stat().st_size for p in local_ds.glob("*.lss"))
    assert fetched_bytes(proxy) < 0.5 * whole, (fetched_bytes(proxy), whole)
