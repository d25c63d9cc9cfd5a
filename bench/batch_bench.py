#!/usr/bin/env python3
"""Batches from Python (issue 16, "Batches assembled where the bytes land"): in ONE run, on a
dataset of small samples (20,000 x ~66 KB) and one of large samples (~8 MB), with the page cache
dropped before each reader and each reader host-warm (one untimed pass first: for the loaders,
the first epoch of the same loader, then the second is timed), as DESIGN.md's yardsticks say:

  fio            random O_DIRECT reads of the mean sample size, QD64, io_uring, buffers on huge
                 pages (--iomem=shmhuge): the device's limit for this access pattern
  unbatched      libshard.Loader, one dict of zero-copy tensors per sample (each loader: one
                 untimed epoch, the page cache dropped, then --epochs timed epochs)
  pack (C++)     libshard.Loader(batch_size=32, collate="pack"): one dict per batch, assembled
                 in C++ into one region
  pad (C++)      the same with collate="pad"
  pack (Python)  collate=lambda s: pack_collate(s, ...): the Python collate of earlier versions

with GB/s (payload bytes read from the dataset per second), the ratio to fio, CPU-s/GB (process
CPU time over the pass: every loader thread plus Python) and, for pad, the padding share.

    sudo python3 bench/batch_bench.py --work /var/tmp/libshard_batch

Datasets are written once with libshard.Writer and reused. Needs root for the cache drops and
for vm.nr_hugepages (raised for fio and restored); without root it says so and fio runs on
normal pages. Figures from a shared machine are noisy: compare readers within one run.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from benchlib import drop_caches

REPO = Path(__file__).resolve().parents[1]


def cpu_seconds() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    return s.ru_utime + s.ru_stime



def make_dataset(out: Path, n: int, min_len: int, max_len: int, hidden: int, seed: int) -> None:
    import torch
    import libshard
    if (out / "manifest.json").exists():
        return
    print(f"writing {n} samples to {out} ...", flush=True)
    gen = torch.Generator().manual_seed(seed)
    with libshard.Writer(str(out), compress=None) as w:
        for i in range(n):
            length = int(torch.randint(min_len, max_len + 1, (1,), generator=gen))
            w.write({"input_ids": torch.randint(0, 32000, (length,), generator=gen),
                     "loss_mask": torch.ones(length, dtype=torch.int64),
                     "hidden_state": torch.randn(1, length, hidden, generator=gen)
                     .to(torch.bfloat16)}, key=f"s{i}")


class HugePages:
    """Raises vm.nr_hugepages by what fio's buffers need for the run, and restores it."""

    def __init__(self, nbytes: int):
        self.need = nbytes // (2 << 20) + 16
        self.old = None

    def __enter__(self) -> bool:
        path = "/proc/sys/vm/nr_hugepages"
        try:
            self.old = int(open(path).read())
            with open(path, "w") as f:
                f.write(str(self.old + self.need))
            return int(open(path).read()) >= self.old + self.need
        except OSError:
            self.old = None
            return False

    def __exit__(self, *exc) -> None:
        if self.old is not None:
            with open("/proc/sys/vm/nr_hugepages", "w") as f:
                f.write(str(self.old))


def fio(files: list[str], block: int, nbytes: int, huge: bool) -> tuple[float, float]:
    cmd = ["fio", "--name=randread", "--rw=randread", f"--bs={block}", "--iodepth=64",
           "--ioengine=io_uring", "--direct=1", f"--io_size={nbytes}", "--numjobs=1",
           "--filename=" + ":".join(files), "--output-format=json", "--randrepeat=0",
           "--norandommap"]
    if huge:
        cmd.append("--iomem=shmhuge")
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    job = out["jobs"][0]
    seconds = job["read"]["runtime"] / 1e3
    gb = job["read"]["io_bytes"] / 1e9
    cpu = (job["usr_cpu"] + job["sys_cpu"]) / 100 * seconds
    return gb / seconds, cpu / gb


def loader_pass(make, padding: bool, warm: bool, epochs: int) -> tuple[float, float, float]:
    """(GB/s, CPU-s/GB, padding share) of `epochs` epochs of a fresh loader; with `warm`, after
    an untimed first one (host-warm, and the loader's arenas faulted in, as in a training run
    past its first steps)."""
    loader = make()

    def epoch(count: bool) -> tuple[int, int]:
        positions = padded = 0
        for step in loader:
            if count:
                lengths = step["lengths"]
                batch = int(lengths.numel()) * int(lengths.max())
                positions += batch
                padded += batch - int(lengths.sum())
            del step
        return positions, padded

    if warm:
        epoch(False)
    read0 = loader.stats()["bytes_read"]
    drop_caches()
    t0, c0 = time.perf_counter(), cpu_seconds()
    positions = padded = 0
    for _ in range(epochs):
        p, q = epoch(padding)
        positions, padded = positions + p, padded + q
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    gb = (loader.stats()["bytes_read"] - read0) / 1e9
    loader.close()
    return gb / wall, cpu / gb, (padded / positions if positions else 0.0)


def run(name: str, path: Path, batch: int, memory_budget: str, rows: list, warm: bool,
        epochs: int) -> None:
    import libshard
    from libshard import pack_collate
    ds = libshard.open(str(path))
    schema = ds.schema
    shards = [s["path"] if os.path.isabs(s["path"]) else str(path / s["path"]) for s in ds.shards]
    mean = ds.total_stored_bytes // len(ds)
    block = max(4096, (mean + 4095) // 4096 * 4096)
    print(f"\n{name}: {len(ds)} samples, mean {mean / 1e3:.0f} KB, "
          f"{ds.total_stored_bytes / 1e9:.2f} GB, {epochs} epoch(s) timed per loader", flush=True)
    common = dict(shuffle=True, seed=0, memory_budget=memory_budget)
    readers = [
        ("unbatched", lambda: libshard.Loader(ds, **common), False),
        (f"batch {batch} pack (C++)",
         lambda: libshard.Loader(ds, batch_size=batch, collate="pack", **common), False),
        (f"batch {batch} pad (C++)",
         lambda: libshard.Loader(ds, batch_size=batch, collate="pad", **common), True),
        (f"batch {batch} pack (Python)",
         lambda: libshard.Loader(ds, batch_size=batch, collate=lambda s: pack_collate(
             s, seq_dims=schema.seq_dims, length_field=schema.length_field), **common), False),
    ]
    nbytes = ds.total_stored_bytes
    with HugePages(64 * block) as huge:
        for _ in range(2 if warm else 1):  # the first pass only warms the host
            drop_caches()
            fio_gbps, fio_cpu = fio(shards, block, nbytes, huge)
    rows.append((name, f"fio randread {block // 1024} KiB QD64" +
                 (" shmhuge" if huge else " (4 KiB pages)"), fio_gbps, 1.0, fio_cpu, None))
    for label, make, padding in readers:
        gbps, cpu, pad = loader_pass(make, padding, warm, epochs)
        rows.append((name, label, gbps, gbps / fio_gbps, cpu, pad if padding else None))
        print(f"  {label:<28} {gbps:6.2f} GB/s  {cpu:6.3f} CPU-s/GB", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", default="/var/tmp/libshard_batch")
    p.add_argument("--small-samples", type=int, default=20_000)
    p.add_argument("--large-samples", type=int, default=200)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--no-warm", action="store_true", help="skip the untimed warming passes")
    p.add_argument("--epochs", type=int, default=3,
                   help="epochs timed per loader (the large dataset has 7 batches an epoch, and "
                        "an epoch of the small one lasts well under a second: one epoch would "
                        "time mostly filling and draining the pipeline, and noise)")
    p.add_argument("--only", choices=["small", "large"])
    args = p.parse_args(argv)

    sys.path.insert(0, str(REPO / "build" / "python"))
    import torch  # noqa: F401
    import libshard  # noqa: F401

    work = Path(args.work)
    small = work / f"small_{args.small_samples}"
    large = work / f"large_{args.large_samples}"
    # ~66 KB: 84 tokens on average x (8 + 8 + 2 x 384) bytes.
    make_dataset(small, args.small_samples, 64, 104, 384, seed=1)
    # ~8 MB: 2,000 tokens on average x (16 + 2 x 2048) bytes.
    make_dataset(large, args.large_samples, 1000, 3000, 2048, seed=2)
    root = os.geteuid() == 0
    print("page cache dropped before each reader" if root else
          "NOT root: warm page cache, fio on 4 KiB pages; figures are not the yardstick")
    rows: list = []
    if args.only in (None, "small"):
        run("small", small, args.batch, "2GiB", rows, not args.no_warm, args.epochs)
    if args.only in (None, "large"):
        run("large", large, args.batch, "2GiB", rows, not args.no_warm, args.epochs)

    print(f"\n| dataset | reader | GB/s | × fio | CPU-s/GB | padding |")
    print("|---|---|---|---|---|---|")
    for name, label, gbps, ratio, cpu, pad in rows:
        print(f"| {name} | {label} | {gbps:.2f} | {ratio:.2f} | {cpu:.3f} | "
              f"{'' if pad is None else f'{pad:.1%}'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
