#!/usr/bin/env python3
"""Benchmark s3:// reading through the node-local cache (issue 24, "Benchmark").

    PYTHONPATH=build/python python3 bench/s3_bench.py --samples 64 --seq 2048 --hidden 1024

One run, one S3 server on 127.0.0.1 (moto's standalone server, signature checking on), the same
dataset uploaded once, and in turn:
  server alone  every cache block of every shard fetched by parallel range GETs with the same
                client (libcurl: `curl --parallel --aws-sigv4`, as many connections as libshard
                uses), into /dev/null: what the server serves, with no libshard
  cold epoch    libshard.Loader("s3://...", cache=EMPTY): first-sample seconds, GB/s, CPU-s/GB,
                and GETs per block (counted at a loopback proxy that forwards everything; with
                --direct every reader talks to the server itself and nothing is counted)
  warm epoch    the same loader again over the now full cache
  local         libshard.Loader over the local copy (what the warm epoch should match)
With --upload, the write path instead: libshard's upload (merge of the packed dataset to s3://)
against the same bytes PUT alone by curl --parallel in pieces of the part size.
Targets: cold >= 0.9x server alone, warm ~ local, exactly 1 GET per block, first sample within
one manifest GET + one index GET + the HEADs + one block GET. The machines are shared and noisy:
compare the ratios of one run. Mosaic Streaming and LitData are not run here (not installed).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import libshard

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from s3_server import FaultProxy, MotoServer, s3_env  # noqa: E402

BUCKET = "libshard-bench"


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime


def make_dataset(out: Path, n: int, seq: int, hidden: int) -> None:
    gen = torch.Generator().manual_seed(0)
    with libshard.Writer(out, fsync=False) as w:
        for i in range(n):
            length = max(1, int(seq * (0.75 + 0.5 * ((i * 37) % 100) / 100)))
            w.write({
                "input_ids": torch.randint(0, 32000, (length,), generator=gen, dtype=torch.int64),
                "hidden_state": torch.randn(1, length, hidden, generator=gen).bfloat16(),
                "aux_hidden_state": torch.randn(1, length, 3 * hidden, generator=gen).bfloat16(),
            }, key=f"s{i:06d}")


def epoch(url: str, **kw):
    t0 = time.perf_counter()
    c0 = cpu()
    first = None
    nbytes = 0
    for s in libshard.Loader(url, shuffle=True, seed=0, pin_memory=False, **kw):
        if first is None:
            first = time.perf_counter() - t0
        nbytes += sum(t.numel() * t.element_size() for t in s.values()
                      if isinstance(t, torch.Tensor))
    return first, time.perf_counter() - t0, cpu() - c0, nbytes


def upload_bench(a, work: Path, local: Path, total: int) -> None:
    """--upload: libshard's upload of the packed dataset (merge of it to s3://, which links it
    into the staging directory and uploads it: multipart, parts in parallel, index and manifest
    last) against the same bytes PUT alone by libcurl (`curl --parallel --upload-file` of the
    same part-size pieces, as many at a time as libshard's upload threads)."""
    part = int(a.part_size)
    server = MotoServer()
    try:
        server.s3().create_bucket(Bucket=BUCKET)
        env = s3_env(server.endpoint, server.access_key, server.secret_key,
                     LIBSHARD_S3_PART_SIZE=str(part),
                     LIBSHARD_S3_UPLOAD_THREADS=str(a.connections),
                     LIBSHARD_S3_STAGING=str(work / "staging"),
                     LIBSHARD_S3_MAX_ATTEMPTS="8", LIBSHARD_S3_BACKOFF_MS="100",
                     LIBSHARD_S3_STALL_SECONDS="30", LIBSHARD_S3_TIMEOUT_SECONDS="300")
        os.environ.update(env)
        pieces = work / "pieces"
        shutil.rmtree(pieces, ignore_errors=True)
        pieces.mkdir()
        lines = []
        for p in sorted(local.iterdir()):
            if not p.is_file():
                continue
            data = p.read_bytes()
            for k, off in enumerate(range(0, max(1, len(data)), part)):
                piece = pieces / f"{p.name}.{k:05d}"
                piece.write_bytes(data[off:off + part])
                lines += [f'upload-file = "{piece}"',
                          f'url = "{server.endpoint}/{BUCKET}/alone/{piece.name}"']
        cfg = work / "put.cfg"
        cfg.write_text("\n".join(lines) + "\n")
        t0, c0 = time.perf_counter(), cpu()
        subprocess.run(["curl", "-sS", "--no-progress-meter", "--fail", "--parallel",
                        "--parallel-max", str(a.connections), "--aws-sigv4",
                        "aws:amz:us-east-1:s3", "-u", f"{server.access_key}:{server.secret_key}",
                        "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-o", "/dev/null",
                        "-K", str(cfg)], check=True, timeout=3600)
        alone_s, alone_cpu = time.perf_counter() - t0, cpu() - c0
        runs = []
        for name, md5 in (("libshard upload", "1"), ("  no Content-MD5", "0")):
            os.environ["LIBSHARD_S3_CONTENT_MD5"] = md5
            prefix = "uploaded" if md5 == "1" else "uploaded-nomd5"
            t0, c0 = time.perf_counter(), cpu()
            libshard.merge(f"s3://{BUCKET}/{prefix}", [str(local)])
            runs.append((name, time.perf_counter() - t0, cpu() - c0))
            n = len(libshard.open(f"s3://{BUCKET}/{prefix}", cache=work / "cache"))
            assert n == a.samples, n
    finally:
        server.stop()
    gb = sum(p.stat().st_size for p in local.iterdir() if p.is_file()) / 1e9
    print(f"upload: {gb:.2f} GB ({total / 1e9:.2f} GB in shards), parts of {part} B, "
          f"{a.connections} at a time")
    print(f"{'writer':<16} {'seconds':>8} {'GB/s':>7} {'CPU-s/GB':>9}")
    print(f"{'PUTs alone':<16} {alone_s:8.2f} {gb / alone_s:7.3f} {alone_cpu / gb:9.2f}")
    for name, up_s, up_cpu in runs:
        print(f"{name:<16} {up_s:8.2f} {gb / up_s:7.3f} {up_cpu / gb:9.2f}   "
              f"{alone_s / up_s:.2f}x of PUTs alone")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--block", default=str(4 << 20), help="cache block bytes")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--direct", action="store_true",
                    help="talk to the server directly, not through the counting proxy (whose "
                         "Python forwarding caps the rate); GETs per block are then not counted")
    ap.add_argument("--upload", action="store_true",
                    help="measure writing instead: libshard's upload (multipart, parallel parts) "
                         "against the same PUTs alone by curl --parallel")
    ap.add_argument("--part-size", default=str(16 << 20), help="upload part bytes (--upload)")
    a = ap.parse_args()

    work = Path(a.work or tempfile.mkdtemp(prefix="s3_bench_"))
    local = work / "ds"
    if local.exists():
        shutil.rmtree(local)
    make_dataset(local, a.samples, a.seq, a.hidden)
    total = sum(p.stat().st_size for p in local.glob("*.lss"))
    if a.upload:
        upload_bench(a, work, local, total)
        return
    server = MotoServer()
    proxy = FaultProxy(server.port)
    try:
        server.upload_dir(BUCKET, "ds", local)
        url = f"s3://{BUCKET}/ds"
        endpoint = server.endpoint if a.direct else proxy.endpoint
        env = s3_env(endpoint, server.access_key, server.secret_key,
                     LIBSHARD_CACHE_BLOCK_SIZE=a.block, LIBSHARD_S3_CONNECTIONS=str(a.connections),
                     # the defaults, not the tests' short fuses: a loaded server may pause
                     LIBSHARD_S3_MAX_ATTEMPTS="8", LIBSHARD_S3_BACKOFF_MS="100",
                     LIBSHARD_S3_STALL_SECONDS="30", LIBSHARD_S3_TIMEOUT_SECONDS="300")
        os.environ.update(env)
        block = int(a.block)

        # Server alone: the same block ranges with libcurl, a.connections at a time.
        cfg = work / "curl.cfg"
        lines = []
        nblocks = 0
        for p in sorted(local.glob("*.lss")):
            size = p.stat().st_size
            for off in range(0, size, block):
                end = min(size, off + block) - 1
                lines += [f'url = "{endpoint}/{BUCKET}/ds/{p.name}"',
                          f'range = "{off}-{end}"', 'output = "/dev/null"']
                nblocks += 1
        cfg.write_text("\n".join(lines) + "\n")
        t0, c0 = time.perf_counter(), cpu()
        subprocess.run(["curl", "-sS", "--no-progress-meter", "--fail", "--parallel", "--parallel-max",
                        str(a.connections), "--aws-sigv4", "aws:amz:us-east-1:s3",
                        "-u", f"{server.access_key}:{server.secret_key}",
                        "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-K", str(cfg)],
                       check=True, timeout=3600)
        alone_s, alone_cpu = time.perf_counter() - t0, cpu() - c0
        proxy.reset_counts()

        cache = work / "cache"
        if cache.exists():
            shutil.rmtree(cache)
        cold = epoch(url, cache=cache)
        gets = proxy.shard_gets()
        block_gets = [v for k, v in gets.items() if k[1] != "bytes=0-4095"]
        warm = epoch(url, cache=cache)
        loc = epoch(str(local))
    finally:
        proxy.stop()
        server.stop()

    gb = total / 1e9
    print(f"dataset: {a.samples} samples, {gb:.2f} GB in shards, {nblocks} blocks of {block} B, "
          f"{a.connections} connections")
    print(f"{'reader':<14} {'first s':>8} {'seconds':>8} {'GB/s':>7} {'CPU-s/GB':>9}")
    print(f"{'server alone':<14} {'':>8} {alone_s:8.2f} {gb / alone_s:7.3f} {alone_cpu / gb:9.2f}")
    for name, (first, secs, c, _) in (("cold epoch", cold), ("warm epoch", warm),
                                      ("local", loc)):
        print(f"{name:<14} {first:8.3f} {secs:8.2f} {gb / secs:7.3f} {c / gb:9.2f}")
    print(f"cold / server alone: {alone_s / cold[1]:.2f}x   warm / local: {loc[1] / warm[1]:.2f}x")
    if a.direct:
        print("GETs per block: not counted (--direct)")
    else:
        print(f"GETs per block (cold): min {min(block_gets)} max {max(block_gets)} "
              f"over {len(block_gets)} of {nblocks} blocks")


def evict_main() -> None:
    """`s3_bench.py --evict [--cache-fraction F]`: epochs through a cache smaller than the
    dataset (cache_size = F x the shards' bytes), GETs per block counted at the proxy: about 1
    per block per epoch with eviction by the schedule; more is thrash (docs/CACHE.md §5)."""
    ap = argparse.ArgumentParser(description=evict_main.__doc__.split("\n")[0])
    ap.add_argument("--evict", action="store_true")
    ap.add_argument("--cache-fraction", type=float, default=0.25)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--block", default=str(4 << 20), help="cache block bytes")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    work = Path(a.work or tempfile.mkdtemp(prefix="s3_evict_bench_"))
    local = work / "ds"
    if local.exists():
        shutil.rmtree(local)
    make_dataset(local, a.samples, a.seq, a.hidden)
    total = sum(p.stat().st_size for p in local.glob("*.lss"))
    block = int(a.block)
    nblocks = sum((p.stat().st_size + block - 1) // block for p in local.glob("*.lss"))
    bound = int(total * a.cache_fraction)
    server = MotoServer()
    proxy = FaultProxy(server.port)
    rows = []
    try:
        server.upload_dir(BUCKET, "ds", local)
        url = f"s3://{BUCKET}/ds"
        os.environ.update(s3_env(proxy.endpoint, server.access_key, server.secret_key,
                                 LIBSHARD_CACHE_BLOCK_SIZE=a.block,
                                 LIBSHARD_S3_CONNECTIONS=str(a.connections),
                                 LIBSHARD_S3_MAX_ATTEMPTS="8", LIBSHARD_S3_STALL_SECONDS="30",
                                 LIBSHARD_S3_TIMEOUT_SECONDS="300"))
        cache = work / "cache"
        if cache.exists():
            shutil.rmtree(cache)
        for name, shuffle in (("sequential", False), ("sequential again", False),
                              ("shuffled", True)):
            proxy.reset_counts()
            t0, c0 = time.perf_counter(), cpu()
            n = sum(1 for _ in libshard.Loader(url, cache=cache, cache_size=bound,
                                               shuffle=shuffle, seed=0, pin_memory=False))
            secs, c = time.perf_counter() - t0, cpu() - c0
            gets = [v for k, v in proxy.shard_gets().items() if k[1] != "bytes=0-4095"]
            rows.append((name, n, secs, c, sum(gets) / nblocks))
    finally:
        proxy.stop()
        server.stop()
    gb = total / 1e9
    print(f"dataset: {a.samples} samples, {gb:.2f} GB, {nblocks} blocks of {block} B; "
          f"cache_size {bound} B ({a.cache_fraction:.2f} of it), {a.connections} connections")
    print(f"{'epoch':<18} {'samples':>7} {'seconds':>8} {'GB/s':>7} {'CPU-s/GB':>9} "
          f"{'GETs/block':>10}")
    for name, n, secs, c, per in rows:
        print(f"{name:<18} {n:7d} {secs:8.2f} {gb / secs:7.3f} {c / gb:9.2f} {per:10.2f}")


if __name__ == "__main__":
    if "--evict" in sys.argv:
        evict_main()
    else:
        main()
