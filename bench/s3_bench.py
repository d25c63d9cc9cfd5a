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
With --nodes 2,4, simulated nodes (each its own cache directory, each epoch of each node its own
process) read the dataset for --epochs epochs with the global order and with the node-local one
(locality="node"): the bytes each node fetches, as a multiple of dataset / N (issue 35's target:
<= 1.05 for node-local over all epochs).
With --upload, the write path instead: libshard's upload (merge of the packed dataset to s3://)
against the same bytes PUT alone by curl --parallel in pieces of the part size.
Targets: cold >= 0.9x server alone, warm ~ local, exactly 1 GET per block, first sample within
one manifest GET + one index GET + the HEADs + one block GET. The machines are shared and noisy:
compare the ratios of one run.

With --peers, the same samples side by side with Mosaic Streaming and LitData, from the same
server through the same counting proxy:

    make bench-deps      # once: the peers in .venv-peers (bench/peers_env.sh; torch stays 2.13.0)
    PYTHONPATH=build/python python3 bench/s3_bench.py --peers --samples 48 --seq 1536

The libshard dataset's samples are written as an MDS dataset (streaming.MDSWriter) and a LitData
optimized dataset (its BinaryWriter), each at its default shard/chunk size and uncompressed, and
all three are uploaded to one bucket. Then, in rounds with the order of the readers rotated: the
server alone (as above), and per reader a cold epoch (empty cache directory) and a warm one (the
same directory), each in a process of its own: libshard.Loader("s3://..."), Mosaic
StreamingDataset(remote="s3://...", local=CACHE), LitData StreamingDataset(Dir(CACHE, "s3://...")),
all shuffled, one process, no DataLoader workers. Per reader: time to first sample, GB/s of
decoded tensor bytes, CPU-s/GB of the reader's process, the GETs the proxy forwarded and the bytes
they asked for. Every reader must deliver every sample once, with the same decoded bytes (every
sample's token ids and every byte of the first samples are hashed and compared), or the run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Dict

import torch

import libshard

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from s3_server import FaultProxy, MotoServer, s3_env  # noqa: E402

BUCKET = "libshard-bench"


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime


def make_dataset(out: Path, n: int, seq: int, hidden: int, shard_size=None) -> None:
    gen = torch.Generator().manual_seed(0)
    opts = {} if shard_size is None else {"shard_size": shard_size}
    with libshard.Writer(out, fsync=False, **opts) as w:
        for i in range(n):
            length = max(1, int(seq * (0.75 + 0.5 * ((i * 37) % 100) / 100)))
            w.write({
                "input_ids": torch.randint(0, 32000, (length,), generator=gen, dtype=torch.int64),
                "hidden_state": torch.randn(1, length, hidden, generator=gen).bfloat16(),
                "aux_hidden_state": torch.randn(1, length, 3 * hidden, generator=gen).bfloat16(),
            }, key=f"s{i:06d}")


def epoch(url, **kw):
    """One epoch: of a new loader over `url`, or, when `url` is a Loader, its next epoch."""
    t0 = time.perf_counter()
    c0 = cpu()
    first = None
    nbytes = 0
    loader = url if isinstance(url, libshard.Loader) else \
        libshard.Loader(url, shuffle=True, seed=0, pin_memory=False, **kw)
    for s in loader:
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


# ---- --peers: Mosaic Streaming and LitData from the same server ---------------------------------
#
# Each reader's epoch runs in a subprocess of its own (this file with --peer-worker), in the
# interpreter of --peers-python (the bench-only environment of `make bench-deps`), so its CPU is its
# own: the worker reports getrusage (itself and any children) around its epoch, less the CPU of the
# hashing that checks the decoded bytes. The parent keeps the server, the counting proxy and the
# order of the runs, rotated each round so every reader sees the same machine load.

PEERS = ("libshard", "mosaic", "litdata")
PEER_FIELDS = ("input_ids", "hidden_state", "aux_hidden_state")
PEER_CHECKED = 4  # samples whose every decoded byte is hashed and compared across readers


def _torchvision_stub() -> None:
    """Mosaic Streaming's package __init__ imports streaming.vision, which imports torchvision.
    PyPI's torchvision wheels are built against CUDA torch and cannot load beside the CPU torch
    2.13.0 of this project, so `make bench-deps` leaves torchvision out; the two names
    streaming.vision needs at import are given here. Nothing of it runs: the bench reads MDS
    columns, never images."""
    try:
        import torchvision  # noqa: F401
        return
    except Exception:  # absent, or present and unloadable (RuntimeError from its ops)
        pass
    import importlib.machinery
    import types

    def mod(name):
        m = types.ModuleType(name)
        m.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = m
        return m

    tv, ds, tr, fn = (mod("torchvision"), mod("torchvision.datasets"),
                      mod("torchvision.transforms"), mod("torchvision.transforms.functional"))

    class VisionDataset:  # the base class streaming.vision derives from
        def __init__(self, *args, **kwargs) -> None:
            raise RuntimeError("torchvision is not installed (bench stub)")

    def to_tensor(*args, **kwargs):
        raise RuntimeError("torchvision is not installed (bench stub)")

    ds.VisionDataset, fn.to_tensor = VisionDataset, to_tensor
    tv.datasets, tv.transforms, tr.functional = ds, tr, fn


def _ids_digest(ids: torch.Tensor) -> str:
    import hashlib
    return hashlib.blake2b(ids.contiguous().view(torch.uint8).numpy().tobytes(),
                           digest_size=12).hexdigest()


def _sample_digest(s: dict) -> str:
    import hashlib
    h = hashlib.blake2b(digest_size=16)
    for f in PEER_FIELDS:
        t = s[f].contiguous()
        h.update(f"{f}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _mosaic_samples(spec: dict):
    """Mosaic Streaming as its users read a remote MDS dataset: StreamingDataset(remote=s3://,
    local=CACHE), its own downloader (boto3), shuffled; bf16 columns are stored as int16 ndarrays
    (MDS has no bf16) and viewed back, zero-copy."""
    _torchvision_stub()
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory
    clean_stale_shared_memory()
    ds = StreamingDataset(remote=spec["url"], local=spec["cache"], shuffle=True, shuffle_seed=0,
                          batch_size=1)
    for s in ds:
        yield {"input_ids": torch.from_numpy(s["input_ids"]),
               "hidden_state": torch.from_numpy(s["hidden_state"]).view(torch.bfloat16),
               "aux_hidden_state": torch.from_numpy(s["aux_hidden_state"]).view(torch.bfloat16)}


def _litdata_samples(spec: dict):
    """LitData as its users read a remote optimized dataset: StreamingDataset(input_dir=Dir(cache,
    s3://)), its own downloader (boto3 for the index, obstore for chunks), shuffled; bf16 tensors
    are stored as int16 (its tensor serializer goes through numpy, which has no bf16) and viewed
    back, zero-copy."""
    import litdata.streaming.downloader as litdata_downloader
    from litdata import StreamingDataset
    from litdata.streaming.resolver import Dir
    # LitData 0.2.76 builds its obstore S3Store from the boto3 client's endpoint but without
    # `allow_http`, so a plain-http endpoint (this loopback server) fails every chunk GET with
    # "BadScheme"; allowing it is the one change, the rest is LitData's own path.
    if spec["endpoint"].startswith("http://"):
        litdata_downloader._OBSTORE_CLIENT_OPTIONS = {
            **litdata_downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": "true"}
    ds = StreamingDataset(input_dir=Dir(path=spec["cache"], url=spec["url"]), shuffle=True,
                          seed=0, storage_options={"endpoint_url": spec["endpoint"]})
    for s in ds:
        yield {"input_ids": s["input_ids"],
               "hidden_state": s["hidden_state"].view(torch.bfloat16),
               "aux_hidden_state": s["aux_hidden_state"].view(torch.bfloat16)}


def _libshard_samples(spec: dict):
    yield from libshard.Loader(spec["url"], cache=spec["cache"], shuffle=True, seed=0,
                               pin_memory=False)


def peer_worker(spec_json: str) -> None:
    """--peer-worker SPEC: one epoch of one reader; prints one JSON line. Time to first sample is
    from before the dataset object is made (its modules already imported); CPU is the process's
    (all threads, and children) over the same span, less the hashing's."""
    import json
    spec = json.loads(spec_json)
    checked = set(spec["checked"])
    gen = {"libshard": _libshard_samples, "mosaic": _mosaic_samples,
           "litdata": _litdata_samples}[spec["reader"]]
    # The reader's modules are imported before the clock starts: a training job pays that once.
    if spec["reader"] == "mosaic":
        _torchvision_stub()
        import streaming  # noqa: F401
    elif spec["reader"] == "litdata":
        import litdata  # noqa: F401
    ids, digests = [], {}
    nbytes, hash_cpu, first = 0, 0.0, None
    t0, c0 = time.perf_counter(), cpu()
    for s in gen(spec):
        if first is None:
            first = time.perf_counter() - t0
        nbytes += sum(s[f].numel() * s[f].element_size() for f in PEER_FIELDS)
        h0 = time.thread_time()
        d = _ids_digest(s["input_ids"])
        ids.append(d)
        if d in checked:
            digests[d] = _sample_digest(s)
        hash_cpu += time.thread_time() - h0
    secs, used = time.perf_counter() - t0, cpu() - c0 - hash_cpu
    print(json.dumps({"first": first, "seconds": secs, "cpu": used, "bytes": nbytes,
                      "ids": sorted(ids), "digests": digests}), flush=True)


def _peer_python(a) -> str:
    if a.peers_python:
        return a.peers_python
    venv = Path(__file__).resolve().parents[1] / ".venv-peers" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def write_peer_datasets(py: str, local: Path, work: Path) -> Dict[str, Path]:
    """The local libshard dataset's samples, decoded, written as an MDS dataset and a LitData
    optimized dataset (each peer's default shard/chunk size, no compression), in a subprocess of
    the peers' interpreter."""
    out = {"mosaic": work / "mds", "litdata": work / "litdata"}
    for p in out.values():
        shutil.rmtree(p, ignore_errors=True)
    subprocess.run([py, __file__, "--peer-write", str(local), str(out["mosaic"]),
                    str(out["litdata"])], check=True, timeout=3600,
                   env=dict(os.environ, PYTHONPATH=_pythonpath()))
    return out


def peer_write(local: str, mds: str, lit: str) -> None:
    """--peer-write LOCAL MDS LITDATA (run by write_peer_datasets)."""
    _torchvision_stub()
    from litdata.streaming.writer import BinaryWriter
    from streaming import MDSWriter
    ds = libshard.open(local)
    cols = {"input_ids": "ndarray:int64", "hidden_state": "ndarray:int16",
            "aux_hidden_state": "ndarray:int16"}
    lw = BinaryWriter(cache_dir=lit, chunk_bytes="64MB")
    with MDSWriter(out=mds, columns=cols, compression=None) as mw:
        for i in range(len(ds)):
            s = ds[i]
            as_int = {"input_ids": s["input_ids"],
                      "hidden_state": s["hidden_state"].view(torch.int16),
                      "aux_hidden_state": s["aux_hidden_state"].view(torch.int16)}
            mw.write({k: v.numpy() for k, v in as_int.items()})
            lw[i] = as_int
    lw.done()
    lw.merge()


def _pythonpath() -> str:
    here = [p for p in sys.path if p and (Path(p) / "libshard").is_dir()]
    return os.pathsep.join(dict.fromkeys(here + [os.environ.get("PYTHONPATH", "")]))


def _fetch_counts(proxy: FaultProxy, sizes: Dict[str, int]) -> Dict[str, float]:
    """What the proxy forwarded since its last reset: GETs, other requests, the bytes the GETs
    asked for (a range's length, else the object's size) and the most GETs of one (object, range)."""
    per = Counter()
    got = 0
    other = 0
    with proxy.lock:
        reqs = list(proxy.requests)
    for method, path, rng in reqs:
        if method != "GET":
            other += 1
            continue
        key = path.split("?")[0]
        per[(key, rng)] += 1
        if rng.startswith("bytes="):
            lo, _, hi = rng[6:].partition("-")
            size = sizes.get(key, 0)
            got += (int(hi) if hi else size - 1) - int(lo) + 1
        else:
            got += sizes.get(key, 0)
    return {"gets": sum(per.values()), "other": other, "bytes": got,
            "max_per_range": max(per.values(), default=0)}


def peers_bench(a, work: Path, local: Path) -> None:
    """--peers: libshard, Mosaic Streaming and LitData reading the same samples from the same
    server through the same counting proxy (--direct: to the server itself), cold then warm, in
    rounds with the readers' order rotated; and the server alone (parallel range GETs by curl)
    each round."""
    import json
    py = _peer_python(a)
    dirs = write_peer_datasets(py, local, work)
    dirs["libshard"] = local
    prefixes = {"libshard": "ds", "mosaic": "mds", "litdata": "litdata"}
    stored = {r: sum(p.stat().st_size for p in dirs[r].iterdir() if p.is_file()) for r in PEERS}
    ref = libshard.open(str(local))
    checked = [_ids_digest(ref[i]["input_ids"]) for i in range(min(PEER_CHECKED, len(ref)))]
    want = {d: _sample_digest(ref[i]) for i, d in enumerate(checked)}
    want_ids = sorted(_ids_digest(ref[i]["input_ids"]) for i in range(len(ref)))
    decoded = sum(ref[i][f].numel() * ref[i][f].element_size()
                  for i in range(len(ref)) for f in PEER_FIELDS)
    del ref

    server = MotoServer()
    proxy = FaultProxy(server.port)
    results = []  # (round, reader, phase, worker result, fetch counts)
    alone = []
    try:
        sizes = {}
        for r in PEERS:
            server.upload_dir(BUCKET, prefixes[r], dirs[r])
            for p in dirs[r].iterdir():
                if p.is_file():
                    sizes[f"/{BUCKET}/{prefixes[r]}/{p.name}"] = p.stat().st_size
        endpoint = server.endpoint if a.direct else proxy.endpoint
        env = s3_env(endpoint, server.access_key, server.secret_key,
                     LIBSHARD_CACHE_BLOCK_SIZE=a.block,
                     LIBSHARD_S3_CONNECTIONS=str(a.connections),
                     LIBSHARD_S3_MAX_ATTEMPTS="8", LIBSHARD_S3_BACKOFF_MS="100",
                     LIBSHARD_S3_STALL_SECONDS="30", LIBSHARD_S3_TIMEOUT_SECONDS="300",
                     # Mosaic's boto3 client takes its endpoint from S3_ENDPOINT_URL (LitData's
                     # from storage_options, libshard's from AWS_ENDPOINT_URL_S3).
                     S3_ENDPOINT_URL=endpoint,
                     PYTHONPATH=_pythonpath())
        for rnd in range(a.rounds):
            alone.append(_server_alone(work, local, endpoint, server, int(a.block), a.connections))
            order = PEERS[rnd % 3:] + PEERS[:rnd % 3]
            for r in order:
                cache = work / f"cache-{r}"
                shutil.rmtree(cache, ignore_errors=True)
                cache.mkdir()
                for phase in ("cold", "warm"):
                    proxy.reset_counts()
                    spec = {"reader": r, "url": f"s3://{BUCKET}/{prefixes[r]}",
                            "cache": str(cache), "endpoint": endpoint, "checked": checked}
                    p = subprocess.run([py, __file__, "--peer-worker", json.dumps(spec)],
                                       env=env, capture_output=True, text=True, timeout=3600)
                    if p.returncode != 0:
                        sys.stderr.write(p.stderr[-4000:])
                        raise SystemExit(f"{r} {phase} epoch failed (exit {p.returncode})")
                    res = json.loads(p.stdout.strip().splitlines()[-1])
                    if res["ids"] != want_ids:
                        raise SystemExit(f"{r} {phase}: the samples differ from the dataset's "
                                         f"({len(res['ids'])} read, {len(want_ids)} written)")
                    if res["digests"] != want:
                        raise SystemExit(f"{r} {phase}: decoded bytes differ from libshard's")
                    if res["bytes"] != decoded:
                        raise SystemExit(f"{r} {phase}: {res['bytes']} B decoded, want {decoded}")
                    results.append((rnd, r, phase, res, _fetch_counts(proxy, sizes)))
                    print(f"round {rnd + 1} {r:<8} {phase}: {res['seconds']:.2f} s", flush=True)
    finally:
        proxy.stop()
        server.stop()
    _print_peers(a, results, alone, decoded, stored, sizes, prefixes)


def _server_alone(work: Path, local: Path, endpoint: str, server, block: int,
                  connections: int) -> tuple:
    """Every libshard cache block by curl --parallel (the same libcurl, as many connections)."""
    cfg = work / "peers-curl.cfg"
    lines = []
    for p in sorted(local.glob("*.lss")):
        size = p.stat().st_size
        for off in range(0, size, block):
            lines += [f'url = "{endpoint}/{BUCKET}/ds/{p.name}"',
                      f'range = "{off}-{min(size, off + block) - 1}"', 'output = "/dev/null"']
    cfg.write_text("\n".join(lines) + "\n")
    t0, c0 = time.perf_counter(), cpu()
    subprocess.run(["curl", "-sS", "--no-progress-meter", "--fail", "--parallel",
                    "--parallel-max", str(connections), "--aws-sigv4", "aws:amz:us-east-1:s3",
                    "-u", f"{server.access_key}:{server.secret_key}",
                    "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-K", str(cfg)],
                   check=True, timeout=3600)
    return time.perf_counter() - t0, cpu() - c0


def _print_peers(a, results, alone, decoded, stored, sizes, prefixes) -> None:
    gb = decoded / 1e9
    shard_gb = stored["libshard"] / 1e9
    print(f"\n{a.samples} samples, {gb:.3f} GB decoded (every reader's tensors hash-equal); "
          f"stored: " + ", ".join(f"{r} {stored[r] / 1e9:.3f} GB in "
                                  f"{sum(1 for k in sizes if k.startswith(f'/{BUCKET}/{prefixes[r]}/'))}"
                                  f" objects" for r in PEERS)
          + f"; {'direct to the server' if a.direct else 'through the counting proxy'}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("server alone (curl --parallel, libshard's blocks): " + ", ".join(
        f"{shard_gb / s:.3f} GB/s" for s, _ in alone))
    print(f"{'round':<5} {'reader':<9} {'first s':>7} {'cold GB/s':>9} {'warm GB/s':>9} "
          f"{'cold CPU-s/GB':>13} {'warm CPU-s/GB':>13} {'cold GETs':>9} {'GB fetched':>10} "
          f"{'max GETs/range':>14} {'other req':>9} {'warm GETs':>9} {'cold / alone':>12}")
    by = {(rnd, r, ph): (res, cnt) for rnd, r, ph, res, cnt in results}
    for rnd in range(a.rounds):
        alone_gbs = shard_gb / alone[rnd][0]
        for r in PEERS:
            (c, cc), (w, wc) = by[(rnd, r, "cold")], by[(rnd, r, "warm")]
            cold_gbs = gb / c["seconds"]
            print(f"{rnd + 1:<5} {r:<9} {c['first']:7.3f} {cold_gbs:9.3f} "
                  f"{gb / w['seconds']:9.3f} {c['cpu'] / gb:13.2f} {w['cpu'] / gb:13.2f} "
                  f"{cc['gets'] if not a.direct else '-':>9} "
                  f"{cc['bytes'] / 1e9 if not a.direct else float('nan'):10.3f} "
                  f"{cc['max_per_range'] if not a.direct else '-':>14} "
                  f"{cc['other'] if not a.direct else '-':>9} "
                  f"{wc['gets'] if not a.direct else '-':>9} "
                  f"{(stored[r] / 1e9 / c['seconds']) / alone_gbs:11.2f}x")
    print("GB/s: decoded tensor bytes per second; GB fetched: the bytes the cold epoch's GETs asked "
          "for; other req: HEADs and the like; cold / alone: the reader's stored bytes per second "
          "over the server alone's")


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
    ap.add_argument("--peers", action="store_true",
                    help="libshard, Mosaic Streaming and LitData side by side from the same server "
                         "(`make bench-deps` installs the peers in .venv-peers)")
    ap.add_argument("--peers-python", default=None,
                    help="the interpreter that has the peers (--peers; default .venv-peers/bin/python)")
    ap.add_argument("--shard-size", default=None,
                    help="libshard shard size (default: the Writer's, 4GiB)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of cold+warm epochs (--peers)")
    ap.add_argument("--peer-worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--peer-write", nargs=3, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.peer_worker is not None:
        peer_worker(a.peer_worker)
        return
    if a.peer_write is not None:
        peer_write(*a.peer_write)
        return

    work = Path(a.work or tempfile.mkdtemp(prefix="s3_bench_"))
    local = work / "ds"
    if local.exists():
        shutil.rmtree(local)
    make_dataset(local, a.samples, a.seq, a.hidden, a.shard_size)
    total = sum(p.stat().st_size for p in local.glob("*.lss"))
    if a.upload:
        upload_bench(a, work, local, total)
        return
    if a.peers:
        peers_bench(a, work, local)
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
        # One loader for the cold and the warm epochs, as a trainer runs them (set_epoch). Its
        # first fast epoch grows the arena past what the network-bound cold epoch used, and on
        # these VMs the first touch of memory is slow (docs/performance.md, "The first fast
        # epoch"): compare it with the local loader's first epoch, and the second with the
        # second.
        remote = libshard.Loader(url, cache=cache, shuffle=True, seed=0, pin_memory=False)
        cold = epoch(remote)
        gets = proxy.shard_gets()
        block_gets = [v for k, v in gets.items() if k[1] != "bytes=0-4095"]
        warm = epoch(remote)
        warm2 = epoch(remote)
        del remote
        here = libshard.Loader(str(local), shuffle=True, seed=0, pin_memory=False)
        loc = epoch(here)
        loc2 = epoch(here)
        del here
    finally:
        proxy.stop()
        server.stop()

    gb = total / 1e9
    print(f"dataset: {a.samples} samples, {gb:.2f} GB in shards, {nblocks} blocks of {block} B, "
          f"{a.connections} connections")
    print(f"{'reader':<14} {'first s':>8} {'seconds':>8} {'GB/s':>7} {'CPU-s/GB':>9}")
    print(f"{'server alone':<14} {'':>8} {alone_s:8.2f} {gb / alone_s:7.3f} {alone_cpu / gb:9.2f}")
    for name, (first, secs, c, _) in (("cold epoch", cold), ("warm epoch", warm),
                                      ("warm epoch 2", warm2), ("local", loc),
                                      ("local epoch 2", loc2)):
        print(f"{name:<14} {first:8.3f} {secs:8.2f} {gb / secs:7.3f} {c / gb:9.2f}")
    print(f"cold / server alone: {alone_s / cold[1]:.2f}x   warm / local: {loc[1] / warm[1]:.2f}x"
          f"   warm 2 / local 2: {loc2[1] / warm2[1]:.2f}x")
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


NODE_EPOCH = r"""
import json, resource, sys, time
import libshard
spec = json.loads(sys.argv[1])
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
t0, c0, n, nbytes = time.perf_counter(), cpu(), 0, 0
loader = libshard.Loader(spec["url"], rank=spec["rank"], world_size=spec["world"],
                         locality=spec["locality"], nodes=spec["nodes"], seed=0,
                         cache=spec["cache"], cache_size=spec["cache_size"],
                         pin_memory=False, return_index=True, metadata=False)
loader.set_epoch(spec["epoch"])
indices = []
for s in loader:
    indices.append(int(s["__index__"]))
    nbytes += sum(t.numel() * t.element_size() for k, t in s.items() if k != "__index__")
print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": cpu() - c0, "bytes": nbytes,
                  "indices": indices}))
"""


def nodes_main() -> None:
    """`s3_bench.py --nodes 2,4 [--epochs 3]`: simulated nodes reading one s3:// dataset, each
    with its own cache directory (cache_size = --cache-fraction x the node's 1/N of the shards'
    bytes), one rank per node, each epoch of each node in a process of its own, through the
    counting proxy: the bytes each node fetches over the epochs with the global order and with
    the node-local one (locality="node", docs/ORDER.md §5), and each epoch's GB/s against the
    local dataset read the same way. Target (issue 35): node-local <= 1.05 x dataset / N per node
    over all epochs."""
    ap = argparse.ArgumentParser(description=nodes_main.__doc__.split("\n")[0])
    ap.add_argument("--nodes", required=True, help="node counts, e.g. 2,4")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--cache-fraction", type=float, default=1.25,
                    help="each node's cache_size as a multiple of dataset / N")
    ap.add_argument("--samples", type=int, default=160)
    ap.add_argument("--seq", type=int, default=1536)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--shard-size", default="256MiB")
    ap.add_argument("--block", default=str(4 << 20), help="cache block bytes")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    work = Path(a.work or tempfile.mkdtemp(prefix="s3_nodes_bench_"))
    local = work / "ds"
    if local.exists():
        shutil.rmtree(local)
    make_dataset(local, a.samples, a.seq, a.hidden, a.shard_size)
    sizes = {p.name: p.stat().st_size for p in local.glob("*.lss")}
    total = sum(sizes.values())
    server = MotoServer()
    proxy = FaultProxy(server.port)
    env = dict(os.environ)
    env["PYTHONPATH"] = _pythonpath()
    rows = []
    try:
        server.upload_dir(BUCKET, "ds", local)
        url = f"s3://{BUCKET}/ds"
        env.update(s3_env(proxy.endpoint, server.access_key, server.secret_key,
                          LIBSHARD_CACHE_BLOCK_SIZE=a.block,
                          LIBSHARD_S3_CONNECTIONS=str(a.connections),
                          LIBSHARD_S3_MAX_ATTEMPTS="8", LIBSHARD_S3_STALL_SECONDS="30",
                          LIBSHARD_S3_TIMEOUT_SECONDS="300"))

        def run(spec: dict) -> dict:
            out = subprocess.run([sys.executable, "-c", NODE_EPOCH, json.dumps(spec)], env=env,
                                 capture_output=True, text=True, timeout=3600)
            if out.returncode != 0:
                raise SystemExit(f"node {spec['rank']} epoch {spec['epoch']} failed:\n"
                                 f"{out.stderr[-3000:]}")
            return json.loads(out.stdout.strip().splitlines()[-1])

        for nodes in [int(x) for x in a.nodes.split(",")]:
            bound = int(a.cache_fraction * total / nodes)
            for locality in ("global", "node"):
                caches = [work / f"cache-{nodes}-{locality}-{k}" for k in range(nodes)]
                for c in caches:
                    shutil.rmtree(c, ignore_errors=True)
                fetched = [0] * nodes
                served = Counter()
                for ep in range(a.epochs):
                    secs = []
                    for k in range(nodes):
                        proxy.reset_counts()
                        r = run({"url": url, "rank": k, "world": nodes, "nodes": nodes,
                                 "locality": locality, "epoch": ep, "cache": str(caches[k]),
                                 "cache_size": bound})
                        got = 0
                        for (path, rng), count in proxy.shard_gets().items():
                            lo, hi = (int(x) for x in rng.split("=")[1].split("-"))
                            got += count * (hi - lo + 1)
                        fetched[k] += got
                        served.update(r["indices"])
                        secs.append((r["seconds"], r["bytes"], r["cpu"], got))
                    rows.append((nodes, locality, ep, secs))
                assert set(served) == set(range(a.samples)), "a sample was never served"
                rows.append((nodes, locality, "total", fetched))
        # The local dataset, one rank of the largest node count, host-warm, for the warm GB/s.
        loc = run({"url": str(local), "rank": 0, "world": 1, "nodes": None,
                   "locality": "global", "epoch": 0, "cache": None, "cache_size": None})
    finally:
        proxy.stop()
        server.stop()
    gb = total / 1e9
    print(f"dataset: {a.samples} samples, {gb:.2f} GB in {len(sizes)} shards, blocks of "
          f"{a.block} B; each node's cache_size {a.cache_fraction:.2f} x dataset / N")
    print(f"local dataset, one process: {loc['bytes'] / loc['seconds'] / 1e9:.3f} GB/s")
    print(f"{'nodes':>5} {'order':<7} {'epoch':>5} {'fetched per node, x dataset/N':<34} "
          f"{'GB/s per node (min..max)':>26}")
    for nodes, locality, ep, data in rows:
        share = total / nodes
        if ep == "total":
            per = ", ".join(f"{f / share:.3f}" for f in data)
            print(f"{nodes:5d} {locality:<7} {'all':>5} {per:<34} "
                  f"{'max ' + format(max(data) / share, '.3f'):>26}")
        else:
            per = ", ".join(f"{g / share:.3f}" for _, _, _, g in data)
            rates = [b / s / 1e9 for s, b, _, _ in data]
            print(f"{nodes:5d} {locality:<7} {ep:5d} {per:<34} "
                  f"{min(rates):12.3f}..{max(rates):.3f}")


if __name__ == "__main__":
    if "--evict" in sys.argv:
        evict_main()
    elif "--nodes" in sys.argv:
        nodes_main()
    else:
        main()
