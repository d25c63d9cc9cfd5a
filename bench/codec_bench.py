#!/usr/bin/env python3
"""Prints one table of the field codecs (FORMAT.md §4.3) on directories of EAGLE-3-like .pt files.

  python3 bench/codec_bench.py [--bench build/bench/codec_bench] NAME=DIR [NAME=DIR ...] [--methods ...]

Each DIR is read with torch.load (e.g. bench/make_real_hidden_states.py's output and
examples/make_eagle3_data.py's); its tensors go to build/bench/codec_bench, which encodes and
decodes them in memory on one thread. Columns: ratio = raw bytes / stored bytes (whole samples,
ints included), encode MB/s of raw bytes per thread, decode GB/s of decoded bytes per thread,
CPU-s per decoded GB (the fastest of at least 5 passes, thread CPU time: the figure least disturbed by
other work on a shared machine; the wall-clock GB/s column is not), and for fp8 the max relative error (elements in e4m3's normal range of their
row), the mean relative error (every non-zero element) and the max error over the row's absmax.
"""
import argparse
import glob
import os
import struct
import subprocess
import sys
import tempfile

import torch

DTYPES = {torch.bool: 1, torch.uint8: 2, torch.int8: 3, torch.int16: 4, torch.int32: 5,
          torch.int64: 6, torch.float16: 10, torch.bfloat16: 11, torch.float32: 12,
          torch.float64: 13}


def geometry(t: torch.Tensor, name: str):
    # FORMAT.md §4.3.1: rows = dims up to and including seq_dim. EAGLE-3 tensors: [L] (seq_dim 0)
    # or [1, L, H] (seq_dim 1).
    shape = list(t.shape)
    seq_dim = 1 if len(shape) == 3 else 0
    rows = 1
    for d in shape[:seq_dim + 1]:
        rows *= d
    elems = 1
    for d in shape[seq_dim + 1:]:
        elems *= d
    return rows, elems


def write_input(src_dir: str, out_path: str) -> int:
    files = sorted(glob.glob(os.path.join(src_dir, "**", "*.ckpt"), recursive=True) +
                   glob.glob(os.path.join(src_dir, "**", "*.pt"), recursive=True))
    if not files:
        sys.exit(f"no .ckpt/.pt files under {src_dir}")
    with open(out_path, "wb") as f:
        f.write(b"LSCB0001" + struct.pack("<I", len(files)))
        for path in files:
            sample = torch.load(path, weights_only=True)
            keys = sorted(sample)
            f.write(struct.pack("<I", len(keys)))
            for k in keys:
                t = sample[k].contiguous()
                rows, elems = geometry(t, k)
                data = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
                f.write(struct.pack("<IQQQ", DTYPES[t.dtype], rows, elems, len(data)))
                f.write(data)
    return len(files)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sets", nargs="+", help="NAME=DIR")
    p.add_argument("--bench", default="build/bench/codec_bench")
    p.add_argument("--methods", nargs="*", default=[],
                   help="none zstd:1 zstd:3 zstd:9 zstd:19 planes planes-entropy-only planes2 planes2-entropy-only "
                        "huffman-variants planes-zstd planes-nobase "
                        "zstd-field fp8 fp8-entropy fp8-entropy-other fp8-planes fp8-planes-entropy-only "
                        "fp8-planes-zstd (default: all)")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.sets:
            name, _, d = spec.partition("=")
            inp = os.path.join(tmp, name + ".lscb")
            n = write_input(d, inp)
            print(f"{name}: {n} samples from {d}", file=sys.stderr)
            out = subprocess.run([args.bench, inp, name] + args.methods, check=True,
                                 capture_output=True, text=True).stdout
            rows += [line.split("\t") for line in out.splitlines() if line]
    head = ["data", "method", "raw MB", "ratio", "enc MB/s/thr", "dec GB/s/thr", "CPU-s/dec GB",
            "fp8 max rel", "fp8 mean rel", "max err/absmax"]
    table = []
    for r in rows:
        part = r[1].startswith("  of which")  # a part of the row above: decode time only
        cells = [r[0], r[1].strip(), f"{int(r[2]) / 1e6:.1f}", "—" if part else r[4] + "×",
                 "—" if r[1] == "none" or part else r[5], r[6], r[7]]
        cells += r[8:11] if len(r) > 8 else ["", "", ""]
        table.append(cells)
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for c in table:
        print("| " + " | ".join(c) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
