#!/usr/bin/env python3
"""Row-range reads (docs/FORMAT.md §3.10): bytes read for a token slice against the whole sample.

For EAGLE-3 samples (input_ids, loss_mask int64 [L]; hidden_state bf16 [1, L, H];
aux_hidden_state bf16 [1, L, 3H]: 8·H bytes a token) of several lengths, stored raw and with
`compress="auto"` (planes2 for the bf16 fields, zstd per field for the ids), it reads each sample
whole (`ds[i]`) and as the token slices of N sequence-parallel ranks (`ds.read(i, rows=(a, b))`,
N = 1, 2, 4, 8, equal slices) and reports the bytes each read asks the kernel for (the process's
`rchar` from /proc/self/io around the call: shard bytes, and the block table read from the
index), per slice and per group of N ranks, against the sample's stored size. The cost rule says
a slice costs its rows plus less than one ~1 MiB block at each end of each field (and for a
compressed field the region's head), so a group of N reads the sample plus at most ~2 MiB a field
per rank boundary, against N whole samples when every rank reads whole.

--index-overhead also prints what index version 4 adds per sample (FORMAT.md §3.10.4): the record
columns (from the index header) and the block table (from the tables part), measured on the
written datasets, and the same computed by the writer's rule for the DESIGN.md workload and the
long-context sizes, with no data written.

    python3 bench/slice_bench.py --work /var/tmp/slice_bench            # 4K, 32K, 128K tokens, H=2048
    python3 bench/slice_bench.py --work /var/tmp/slice_bench --lengths 32768 --hidden 2048
    python3 bench/slice_bench.py --index-overhead --no-data

The datasets are written once (libshard.Writer) and reused; the page cache is not dropped (the
figures are bytes, not speed).
"""
from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MiB = 1 << 20
BLOCK = 1 << 20  # the writer's row blocks (FORMAT.md §3.10.5)


def rchar() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


def write(path: Path, length: int, hidden: int, samples: int, compress) -> None:
    import torch
    import libshard
    if (path / "manifest.json").exists():
        return
    if path.exists():
        shutil.rmtree(path)
    t0 = time.time()
    gen = torch.Generator().manual_seed(length)
    with libshard.Writer(path, compress=compress, fsync=False) as w:
        for i in range(samples):
            w.write({
                "input_ids": torch.randint(0, 150000, (length,), generator=gen),
                "loss_mask": (torch.rand(length, generator=gen) < 0.7).to(torch.int64),
                "hidden_state": torch.randn(1, length, hidden, generator=gen).to(torch.bfloat16),
                "aux_hidden_state": torch.randn(1, length, 3 * hidden,
                                                generator=gen).to(torch.bfloat16),
            }, key=f"s{i}")
    print(f"  wrote {path} ({samples} x {length} tokens, H={hidden}, compress={compress}) in "
          f"{time.time() - t0:.0f}s", flush=True)


def measure(path: Path, ranks=(1, 2, 4, 8)) -> list:
    import libshard
    ds = libshard.open(path)
    assert ds.has_row_blocks, f"{path}: index version {ds.index_version}, no row blocks"
    rows = []
    for i in range(len(ds)):
        length = int(ds.lengths[i])
        stored = ds.location(i)["stored_size"]
        before = rchar()
        whole = ds[i]
        whole_bytes = rchar() - before
        del whole
        for n in ranks:
            per = []
            for k in range(n):
                a, b = k * length // n, (k + 1) * length // n
                before = rchar()
                part = ds.read(i, rows=(a, b))
                per.append(rchar() - before)
                del part
            rows.append({"sample": i, "tokens": length, "stored": stored, "whole": whole_bytes,
                         "sp": n, "slice_max": max(per), "slice_min": min(per),
                         "group": sum(per)})
    return rows


def index_overhead_measured(path: Path) -> dict:
    """Per sample: the record columns version 4 adds and the tables part (FORMAT.md §3.10.1)."""
    import json
    manifest = json.loads((path / "manifest.json").read_text())
    index = (path / manifest["index"]["file"]).read_bytes()
    n = struct.unpack_from("<Q", index, 16)[0]
    tables_offset = struct.unpack_from("<Q", index, 88)[0]
    return {"record_bytes": index[96] + index[97] + 4,
            "table_bytes": (len(index) - tables_offset) / max(n, 1),
            "index_bytes": len(index) / max(n, 1)}


def table_bytes(length: int, hidden: int, coded: bool) -> int:
    """The writer's block table of an EAGLE-3 sample (FORMAT.md §3.10.2, §3.10.5), computed."""
    words = 0
    table = 0
    for rows, row_bytes in ((length, 8), (length, 8), (length, 2 * hidden), (length, 6 * hidden)):
        words += 1
        block_rows = max(1, BLOCK // row_bytes)
        if block_rows >= rows:
            continue
        n = -(-rows // block_rows)
        # ids under auto are zstd-coded (a codec field: head + 2 words a chunk), else raw.
        words += (1 + 2 * n) if coded else n
        table = 1
    return 4 * words if table else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", default="/var/tmp/libshard_slice_bench")
    p.add_argument("--lengths", type=int, nargs="+", default=[4096, 32768, 131072])
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--samples", type=int, default=2, help="samples per dataset (1 above 64K tokens)")
    p.add_argument("--compress", nargs="+", default=["none", "auto"])
    p.add_argument("--index-overhead", action="store_true")
    p.add_argument("--no-data", action="store_true", help="only the computed index overhead")
    args = p.parse_args()
    sys.path.insert(0, str(REPO / "build" / "python"))

    if not args.no_data:
        work = Path(args.work)
        work.mkdir(parents=True, exist_ok=True)
        print("slice_bench: bytes read per read (rchar), page cache not dropped")
        print(f"{'tokens':>7} {'H':>5} {'store':>5} {'stored MiB':>10} {'whole MiB':>9} "
              f"{'SP':>3} {'slice MiB (max)':>15} {'group MiB':>9} {'group/stored':>12} "
              f"{'N x whole':>9}")
        for length in args.lengths:
            for compress in args.compress:
                path = work / f"L{length}_H{args.hidden}_{compress}"
                n = args.samples if length <= 65536 else 1
                write(path, length, args.hidden, n, None if compress == "none" else compress)
                for r in measure(path):
                    if r["sample"] != 0:
                        continue
                    print(f"{r['tokens']:>7} {args.hidden:>5} {compress:>5} "
                          f"{r['stored'] / MiB:>10.1f} {r['whole'] / MiB:>9.1f} {r['sp']:>3} "
                          f"{r['slice_max'] / MiB:>15.2f} {r['group'] / MiB:>9.1f} "
                          f"{r['group'] / r['stored']:>12.3f} {r['sp'] * r['whole'] / MiB:>9.1f}",
                          flush=True)
                if args.index_overhead:
                    o = index_overhead_measured(path)
                    print(f"    index version 4, measured: +{o['record_bytes']} B a sample in the "
                          f"records, block tables {o['table_bytes']:.0f} B a sample "
                          f"(computed {table_bytes(length, args.hidden, compress != 'none')} B)")
    if args.index_overhead:
        print("\nindex version 4 per sample, computed by the writer's rule (FORMAT.md §3.10.4):")
        print(f"{'tokens':>7} {'H':>5} {'raw MiB':>8} {'table raw':>10} {'table auto':>10} "
              f"{'ppm raw':>8}")
        for length, hidden in ((2048, 4096), (4096, 8192), (32768, 2048), (131072, 8192)):
            raw = length * (16 + 8 * hidden)
            t_raw, t_auto = table_bytes(length, hidden, False), table_bytes(length, hidden, True)
            print(f"{length:>7} {hidden:>5} {raw / MiB:>8.0f} {t_raw:>10} {t_auto:>10} "
                  f"{1e6 * t_raw / raw:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
