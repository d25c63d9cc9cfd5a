#!/usr/bin/env python3
"""One table of the storage choices (issue 10): for a directory of .pt files, packs it once per
choice (none, zstd levels, the field codecs, fp8, fp8 + entropy coder) with one thread, then
loads each packed dataset with the loader, shuffled, and prints ratio, pack MB/s per thread,
loader decoded GB/s (and x the uncompressed dataset) and CPU-s per decoded GB.

    sudo python3 bench/codec_loader_bench.py SRC [--work /var/tmp/libshard_codecs] [--rounds 3]

Loader figures come from `libshard bench OUT --shuffle --epochs 3 --skip-raw` (default worker
threads), epochs 1 and 2 (host-warm), the datasets alternating round by round so that the
ratios compare runs taken side by side on the same disk. As root the page cache is dropped
before each pack and each bench. Pack MB/s: source bytes per wall second. Ratio: stored bytes
of the uncompressed dataset / stored bytes. Figures from a shared machine are noisy: compare
rows within one run.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchlib import drop_caches

REPO = Path(__file__).resolve().parents[1]
CHOICES = [
    ("none", ["--compress", "none"]),
    ("zstd:3", ["--compress", "zstd:3"]),
    ("zstd:9", ["--compress", "zstd:9"]),
    ("auto (field codecs, lossless)", ["--compress", "auto"]),
    ("fp8 (float8_e4m3fn, lossy)", ["--store-dtype", "float8_e4m3fn"]),
    ("fp8 + entropy coder", ["--compress", "auto", "--store-dtype", "float8_e4m3fn"]),
]
EPOCH = re.compile(r"loader epoch (\d+):.*decoded [0-9.]+ [KMGT]?i?B: ([0-9.]+) GB/s, ([0-9.]+) CPU-s")



def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def stored_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*.shard")) or dir_bytes(path)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", type=Path)
    p.add_argument("--work", type=Path, default=Path("/var/tmp/libshard_codecs"))
    p.add_argument("--cli", default=str(REPO / "build" / "converters" / "libshard"))
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    if os.geteuid() != 0:
        print("not root: the page cache is not dropped between runs", file=sys.stderr)
    args.work.mkdir(parents=True, exist_ok=True)
    src_bytes = dir_bytes(args.src)
    rows = []
    for i, (name, flags) in enumerate(CHOICES):
        out = args.work / f"ds{i}"
        shutil.rmtree(out, ignore_errors=True)
        drop_caches()
        t0 = time.perf_counter()
        subprocess.run([args.cli, "pack", str(args.src), "-o", str(out), "--threads", "1", *flags],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows.append({"name": name, "out": out, "pack_mbps": src_bytes / (time.perf_counter() - t0) / 1e6,
                     "stored": stored_bytes(out), "gbps": [], "cpu": []})
    for _ in range(args.rounds):
        for row in rows:
            drop_caches()
            text = subprocess.run([args.cli, "bench", str(row["out"]), "--shuffle", "--epochs",
                                   "3", "--skip-raw"], check=True, capture_output=True,
                                  text=True).stdout
            for epoch, gbps, cpu in EPOCH.findall(text):
                if int(epoch) >= 1:
                    row["gbps"].append(float(gbps))
                    row["cpu"].append(float(cpu))
    raw = rows[0]
    base = sorted(raw["gbps"])[len(raw["gbps"]) // 2]
    print(f"source: {args.src} ({src_bytes / 1e9:.2f} GB); {args.rounds} rounds, epochs 1-2 each")
    print("| storage | ratio | pack MB/s, 1 thread | loader decoded GB/s (min-max) | x none "
          "(median) | CPU-s per decoded GB (median) |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        g = sorted(row["gbps"])
        c = sorted(row["cpu"])
        print(f"| {row['name']} | {raw['stored'] / row['stored']:.2f} | {row['pack_mbps']:.0f} | "
              f"{g[0]:.2f}-{g[-1]:.2f} | {g[len(g) // 2] / base:.2f} | {c[len(c) // 2]:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
