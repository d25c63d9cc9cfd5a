#!/usr/bin/env python3
"""One table of the storage choices (issues 10, 26) per corpus: for each directory of .pt files,
packs it once per choice (none, zstd levels, the field codecs, fp8, fp8 + entropy coder) with one
thread, then loads each packed dataset with the loader, shuffled, and prints ratio, pack MB/s per
thread, loader decoded GB/s (and x the uncompressed dataset) and CPU-s per decoded GB.

    sudo python3 bench/codec_loader_bench.py [NAME=]SRC [[NAME=]SRC ...] [--work /var/tmp/libshard_codecs]
        [--rounds 3] [--choices none,auto,fp8-entropy] [--before OLD_CLI] [--old-writer OLD_CLI]
        [--reuse]

The corpus of issue 26 (bench/make_codec_corpus.py):

    sudo python3 bench/codec_loader_bench.py minilm=/var/tmp/corpus1g/minilm \
        smollm2=/var/tmp/corpus1g/smollm2 mpnet=/var/tmp/corpus1g/mpnet

Loader figures come from `libshard bench OUT --shuffle --epochs 3 --skip-raw` (default worker
threads), epochs 1 and 2 (host-warm), the datasets alternating round by round so that the
ratios compare runs taken side by side on the same disk. As root the page cache is dropped
before each pack and each bench. Pack MB/s: source bytes per wall second. Ratio: stored bytes
of the uncompressed dataset / stored bytes. Figures from a shared machine are noisy: compare
rows within one run.

--before OLD_CLI also loads every dataset with another build's CLI, alternated with this one's
within each round (same datasets, same page-cache drops), and adds its GB/s and CPU-s columns:
a before/after of a loader or decoder change measured side by side (both builds must read the
datasets). --old-writer OLD_CLI adds the auto and fp8-entropy rows packed by another build and
loaded by this one: a before/after of a change of what the writer stores. --reuse loads the
datasets already packed under --work (pack MB/s is then not measured).
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
# (key for --choices, row name, pack flags); "none" always runs: the other rows are x none.
CHOICES = [
    ("none", "none", ["--compress", "none"]),
    ("zstd:3", "zstd:3", ["--compress", "zstd:3"]),
    ("zstd:9", "zstd:9", ["--compress", "zstd:9"]),
    ("auto", "auto (field codecs, lossless)", ["--compress", "auto"]),
    ("fp8", "fp8 (float8_e4m3fn, lossy)", ["--store-dtype", "float8_e4m3fn"]),
    ("fp8-entropy", "fp8 + entropy coder", ["--compress", "auto", "--store-dtype", "float8_e4m3fn"]),
]
# With --old-writer OLD_CLI: the same two choices packed by an older build (before codecs 5 and
# 6: codec 2 for auto, codec 4 for fp8 + entropy) and loaded by --cli like every other row, so
# one run compares the stored layouts under the same loader.
OLD_WRITER_CHOICES = [
    ("auto", "auto, older writer", ["--compress", "auto"]),
    ("fp8-entropy", "fp8 + entropy coder, older writer",
     ["--compress", "auto", "--store-dtype", "float8_e4m3fn"]),
]
EPOCH = re.compile(r"loader epoch (\d+):.*decoded [0-9.]+ [KMGT]?i?B: ([0-9.]+) GB/s, ([0-9.]+) CPU-s")



def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def stored_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*.shard")) or dir_bytes(path)


def bench_corpus(name: str, src: Path, args) -> None:
    src_bytes = dir_bytes(src)
    rows = []
    plan = [(f"{name}_ds{i}", key, label, flags, args.cli) for i, (key, label, flags) in enumerate(CHOICES)]
    if args.old_writer:
        plan += [(f"{name}_old{i}", key, label, flags, args.old_writer)
                 for i, (key, label, flags) in enumerate(OLD_WRITER_CHOICES)]
    for dirname, key, label, flags, pack_cli in plan:
        if key != "none" and args.choices and key not in args.choices:
            continue
        out = args.work / dirname
        pack_mbps = None
        if not (args.reuse and (out / "index.lsi").exists()):
            shutil.rmtree(out, ignore_errors=True)
            drop_caches()
            t0 = time.perf_counter()
            subprocess.run([pack_cli, "pack", str(src), "-o", str(out), "--threads", "1", *flags],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            pack_mbps = src_bytes / (time.perf_counter() - t0) / 1e6
        rows.append({"name": label, "out": out, "pack_mbps": pack_mbps,
                     "stored": stored_bytes(out), "gbps": [], "cpu": [], "ratio": [],
                     "old_gbps": [], "old_cpu": []})
    # Rounds: every dataset once per round, in turn, so each ratio to none compares runs taken
    # side by side; the per-round ratio's spread says how noisy the wall clock was.
    def load(cli, out):
        drop_caches()
        text = subprocess.run([cli, "bench", str(out), "--shuffle", "--epochs", "3",
                               "--skip-raw"], check=True, capture_output=True, text=True).stdout
        return [(float(g), float(c)) for e, g, c in EPOCH.findall(text) if int(e) >= 1]

    for rnd in range(args.rounds):
        for row in rows:
            # The old build first in odd rounds, second in even ones.
            if args.before and rnd % 2 == 1:
                old = load(args.before, row["out"])
            got = load(args.cli, row["out"])
            if args.before and rnd % 2 == 0:
                old = load(args.before, row["out"])
            if args.before:
                row["old_gbps"] += [g for g, _ in old]
                row["old_cpu"] += [c for _, c in old]
            row["gbps"] += [g for g, _ in got]
            row["cpu"] += [c for _, c in got]
            row["round"] = sorted(g for g, _ in got)[len(got) // 2]
        for row in rows:
            row["ratio"].append(row["round"] / rows[0]["round"])
    raw = rows[0]
    base = sorted(raw["gbps"])[len(raw["gbps"]) // 2]
    print(f"\n{name}: {src} ({src_bytes / 1e9:.2f} GB); {args.rounds} rounds, epochs 1-2 each")
    med = lambda v: sorted(v)[len(v) // 2]
    extra = " before: GB/s (median) | before: CPU-s per GB (median) |" if args.before else ""
    print("| storage | ratio | pack MB/s, 1 thread | loader decoded GB/s (min-max) | x none "
          "(median; per-round min-max) | CPU-s per decoded GB (median) |" + extra)
    print("|---|---|---|---|---|---|" + ("---|---|" if args.before else ""))
    for row in rows:
        g = sorted(row["gbps"])
        r = sorted(row["ratio"])
        pack = "-" if row["pack_mbps"] is None else f"{row['pack_mbps']:.0f}"
        line = (f"| {row['name']} | {raw['stored'] / row['stored']:.2f} | {pack} | "
                f"{g[0]:.2f}-{g[-1]:.2f} | {med(g) / base:.2f} ({r[0]:.2f}-{r[-1]:.2f}) | "
                f"{med(row['cpu']):.3f} |")
        if args.before:
            line += f" {med(row['old_gbps']):.2f} | {med(row['old_cpu']):.3f} |"
        print(line)
    sys.stdout.flush()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", nargs="+", help="[NAME=]DIR of .pt files")
    p.add_argument("--work", type=Path, default=Path("/var/tmp/libshard_codecs"))
    p.add_argument("--cli", default=str(REPO / "build" / "converters" / "libshard"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--choices", type=lambda v: [c for c in v.split(",") if c], default=[],
                   help="keys of the rows besides none (default all): " +
                        ",".join(c[0] for c in CHOICES[1:]))
    p.add_argument("--before", default="", help="another build's CLI, loaded alternately with --cli")
    p.add_argument("--old-writer", default="",
                   help="another build's CLI that also packs auto and fp8-entropy (rows loaded by --cli)")
    p.add_argument("--reuse", action="store_true", help="load the datasets already under --work")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("not root: the page cache is not dropped between runs", file=sys.stderr)
    args.work.mkdir(parents=True, exist_ok=True)
    for i, spec in enumerate(args.src):
        name, _, path = spec.rpartition("=")
        bench_corpus(name or f"corpus{i}", Path(path), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
