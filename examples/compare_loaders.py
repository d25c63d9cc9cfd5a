#!/usr/bin/env python3
"""Streams a packed dataset with ``libshard.Loader`` and its source ``.pt`` files with a
``torch.load`` DataLoader, and prints both side by side: GB/s, CPU-seconds per GB, and the share
of wall time a consumer would spend waiting. Drops the page cache first when run as root, so
both read from the device.
"""
import argparse
import glob
import os
import resource
import subprocess
import sys
import time
import warnings

import torch

import libshard


def drop_caches() -> bool:
    if os.geteuid() != 0:
        return False
    try:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def cpu_seconds() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


class TorchLoadFiles(torch.utils.data.Dataset):
    def __init__(self, files):
        self.files = files

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        return torch.load(self.files[i], weights_only=True)


def measure(name, make_iterable):
    """Times one pass; the reader is created inside the timed region (a loader may start
    reading as soon as it exists)."""
    drop_caches()
    t0, c0 = time.perf_counter(), cpu_seconds()
    nbytes = samples = 0
    for sample in make_iterable():
        for v in sample.values():
            if isinstance(v, torch.Tensor):
                nbytes += v.numel() * v.element_size()
        samples += 1
    wall = time.perf_counter() - t0
    cpu = cpu_seconds() - c0
    gb = nbytes / 1e9
    return {"name": name, "samples": samples, "gb": gb, "wall": wall, "gbps": gb / wall,
            "cpu_per_gb": cpu / gb if gb else float("nan")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--packed", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--workers", type=int, default=4)
    args = p.parse_args(argv)

    files = sorted(glob.glob(os.path.join(args.src, "**", "*.ckpt*"), recursive=True) +
                   glob.glob(os.path.join(args.src, "**", "*.pt"), recursive=True))
    # The baseline users run in practice: 4 workers, even on a 2-core machine (PyTorch warns).
    warnings.filterwarnings("ignore", message=".*worker processes in total.*")
    rows = [measure("torch.load DataLoader",
                    lambda: torch.utils.data.DataLoader(TorchLoadFiles(files), batch_size=None,
                                                        shuffle=True, num_workers=args.workers)),
            measure("libshard.Loader", lambda: libshard.Loader(args.packed, shuffle=True, seed=0))]
    cold = "cold cache" if os.geteuid() == 0 else "page cache not dropped (not root)"
    print(f"{'reader':<24}{'samples':>8}{'GB':>8}{'seconds':>9}{'GB/s':>8}{'CPU-s/GB':>10}   ({cold})")
    for r in rows:
        print(f"{r['name']:<24}{r['samples']:>8}{r['gb']:>8.2f}{r['wall']:>9.2f}{r['gbps']:>8.2f}"
              f"{r['cpu_per_gb']:>10.2f}")
    print(f"libshard.Loader / torch.load DataLoader: {rows[1]['gbps'] / rows[0]['gbps']:.1f}x the "
          f"throughput, {rows[0]['cpu_per_gb'] / max(rows[1]['cpu_per_gb'], 1e-9):.1f}x less CPU per GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
