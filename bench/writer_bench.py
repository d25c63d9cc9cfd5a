#!/usr/bin/env python3
"""Benchmark libshard.Writer from one Python process (issue 11, "Targets").

    PYTHONPATH=build/python python3 bench/writer_bench.py --samples 24 --seq 2048 --hidden 4096

In one run, on the same file system, each writing the same bytes (all with their final sync):
  dd          `dd if=/dev/zero bs=4M oflag=direct conv=fsync`: the disk's sequential write
  writer      libshard.Writer: write() of EAGLE-3-like samples (tensors made beforehand, so the
              figure is the writer's, not the generator's), then close() (commit, fsync)
  torch.save  one torch.save file per sample, as SpecForge's prepare_hidden_states.py writes
              them, then one sync
  merge       64 parts of 1,000 small samples each joined into one dataset (hard links): the
              seconds, and that no shard byte was copied (link counts; blocks in use)
Reported: GB/s of each, writer / dd (target >= 0.9) and writer / torch.save (target >= 3); then
the writer again behind a simulated generator that spends, per sample, 1.2x the time the disk
needs to write it (or --simulate-gpu-ms N), and the share of that run's wall time write()
blocked the caller (target <= 5% when the disk keeps up); merge seconds (target < 1 s). The
machines are shared and noisy: compare the ratios of one run.

--tiny N also writes N tiny samples (two small int64 tensors each, as a token-level generator
makes them): samples/s, and how much address space the write added (the queue is bounded by
what each queued sample holds, so this stays flat for any N).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

import libshard
from benchlib import drop_caches



def make_samples(n: int, seq: int, hidden: int):
    gen = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        length = max(1, int(seq * (0.75 + 0.5 * ((i * 37) % 100) / 100)))
        out.append({
            "input_ids": torch.randint(0, 32000, (length,), generator=gen, dtype=torch.int64),
            "loss_mask": torch.ones(length, dtype=torch.int64),
            "hidden_state": torch.randn(1, length, hidden, generator=gen).bfloat16(),
            "aux_hidden_state": torch.randn(1, length, 3 * hidden, generator=gen).bfloat16(),
        })
    return out


def nbytes(sample) -> int:
    return sum(t.numel() * t.element_size() for t in sample.values())


def bench_dd(work: Path, total: int) -> float:
    path = work / "dd.out"
    block = 4 << 20
    drop_caches()
    cmd = ["dd", "if=/dev/zero", f"of={path}", f"bs={block}", f"count={max(1, total // block)}",
           "conv=fsync", "status=none"]
    t0 = time.perf_counter()
    if subprocess.run(cmd + ["oflag=direct"], stderr=subprocess.DEVNULL).returncode != 0:
        # No O_DIRECT here (tmpfs): buffered, as the Writer then writes too.
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
    t = time.perf_counter() - t0
    path.unlink()
    return t


def bench_writer(work: Path, samples, compress, threads, gpu_ms: float):
    out = work / "writer"
    shutil.rmtree(out, ignore_errors=True)
    drop_caches()
    blocked = 0.0
    t0 = time.perf_counter()
    w = libshard.Writer(out, compress=compress, threads=threads)
    for i, s in enumerate(samples):
        if gpu_ms:
            time.sleep(gpu_ms / 1000)  # the generator's forward pass
        b0 = time.perf_counter()
        w.write(s, key=f"sample_{i:06d}")
        blocked += time.perf_counter() - b0
    c0 = time.perf_counter()
    w.close()
    closing = time.perf_counter() - c0
    t = time.perf_counter() - t0
    return t, blocked, closing, w.blocked_seconds


def _vm_kib(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def bench_tiny(work: Path, n: int):
    """(seconds, peak address space added in MB) for n tiny samples through libshard.Writer."""
    out = work / "tiny"
    shutil.rmtree(out, ignore_errors=True)
    ids, mask = torch.arange(6, dtype=torch.int64), torch.ones(8, dtype=torch.int64)
    base = peak = _vm_kib("VmSize")
    t0 = time.perf_counter()
    with libshard.Writer(out, fsync=False) as w:
        for i in range(n):
            w.write({"input_ids": ids + i, "loss_mask": mask}, key=f"t{i:07d}")
            if i % 2000 == 0:
                peak = max(peak, _vm_kib("VmSize"))
    t = time.perf_counter() - t0
    peak = max(peak, _vm_kib("VmSize"))
    shutil.rmtree(out, ignore_errors=True)
    return t, (peak - base) / 1024


def bench_torch_save(work: Path, samples) -> float:
    out = work / "torch_save"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    drop_caches()
    t0 = time.perf_counter()
    for i, s in enumerate(samples):
        torch.save(s, out / f"data_{i}.ckpt")
    os.sync()
    return time.perf_counter() - t0


def bench_merge(work: Path, parts: int, per_part: int):
    root = work / "merge"
    shutil.rmtree(root, ignore_errors=True)
    part_dirs = []
    for p in range(parts):
        d = root / "parts" / f"p{p:03d}"
        with libshard.Writer(d, fsync=False) as w:
            ids = torch.arange(16, dtype=torch.int64)
            for i in range(per_part):
                w.write({"input_ids": ids}, key=f"k{p:03d}_{i:05d}")
        part_dirs.append(d)
    os.sync()
    shard_bytes = sum(os.path.getsize(s["path"]) for d in part_dirs
                      for s in libshard.open(d).shards)
    free0 = shutil.disk_usage(root).free
    t0 = time.perf_counter()
    libshard.merge(root / "out", part_dirs, by_key=True)
    t = time.perf_counter() - t0
    ds = libshard.open(root / "out")
    assert len(ds) == parts * per_part
    links = {os.stat(s["path"]).st_nlink for s in ds.shards}
    used = free0 - shutil.disk_usage(root).free
    shutil.rmtree(root, ignore_errors=True)
    return t, links, used, shard_bytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/tmp/libshard_writer_bench")
    ap.add_argument("--samples", type=int, default=24)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--compress", default=None)
    ap.add_argument("--simulate-gpu-ms", type=float, default=0.0)
    ap.add_argument("--merge-parts", type=int, default=64)
    ap.add_argument("--merge-samples", type=int, default=1000)
    ap.add_argument("--skip-torch-save", action="store_true")
    ap.add_argument("--tiny", type=int, default=0, help="also write this many tiny samples")
    args = ap.parse_args()

    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    samples = make_samples(args.samples, args.seq, args.hidden)
    total = sum(nbytes(s) for s in samples)
    gb = total / 1e9
    print(f"{args.samples} samples, {gb:.2f} GB (H={args.hidden}, L~{args.seq}), in {work}")

    t_dd = bench_dd(work, total)
    print(f"  dd (oflag=direct when the fs allows) {t_dd:5.2f} s  {gb / t_dd:6.2f} GB/s")
    t_w, blocked, closing, _ = bench_writer(work, samples, args.compress, args.threads, 0.0)
    print(f"  libshard.Writer       {t_w:7.2f} s  {gb / t_w:6.2f} GB/s   (flat out; close "
          f"{closing:.2f} s of it)")
    # The blocked share, with a generator that spends per sample 1.2x what the disk needs to
    # write it (the disk keeps up), or --simulate-gpu-ms.
    gpu_ms = args.simulate_gpu_ms or 1200 * t_dd / len(samples)
    t_g, blocked, closing, queue_wait = bench_writer(work, samples, args.compress, args.threads,
                                                     gpu_ms)
    print(f"  Writer + generator    {t_g:7.2f} s  ({gpu_ms:.0f} ms of generator work a sample): "
          f"write() blocked {blocked:.2f} s = {100 * blocked / t_g:.1f}% of wall (target <= 5%; "
          f"queue waits {queue_wait:.2f} s), close {closing:.2f} s")
    t_ts = None
    if not args.skip_torch_save:
        t_ts = bench_torch_save(work, samples)
        print(f"  torch.save per sample {t_ts:7.2f} s  {gb / t_ts:6.2f} GB/s")
    print(f"  writer / dd           {t_dd / t_w:6.2f}x   (target >= 0.9)")
    if t_ts:
        print(f"  writer / torch.save   {t_ts / t_w:6.2f}x   (target >= 3)")
    if args.tiny:
        t_t, added_mb = bench_tiny(work, args.tiny)
        print(f"  {args.tiny} tiny samples   {t_t:7.2f} s  {args.tiny / t_t:8.0f} samples/s, "
              f"address space +{added_mb:.0f} MB at most")
    t_m, links, used, shard_bytes = bench_merge(work, args.merge_parts, args.merge_samples)
    print(f"  merge {args.merge_parts} parts x {args.merge_samples} samples: {t_m:.3f} s "
          f"(target < 1 s); shard link counts {sorted(links)}, disk used by the merge "
          f"{used / 1e6:.1f} MB vs {shard_bytes / 1e6:.1f} MB of part shards")
    shutil.rmtree(work / "writer", ignore_errors=True)
    shutil.rmtree(work / "torch_save", ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
