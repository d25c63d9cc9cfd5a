#!/usr/bin/env python3
"""End-to-end loader benchmark (issue 4, "Benchmark"): in ONE run, on the same disk, with the
page cache dropped before each measurement:

  raw        a sequential O_DIRECT read of the shard files (io_uring, QD32, 1 MiB): the device
             limit, from `libshard bench`
  loader     libshard::Loader over the packed dataset, globally shuffled (`libshard bench`)
  python     libshard.Loader from Python, yielding dict[str, torch.Tensor] (what a trainer sees)
  torch.load torch.utils.data.DataLoader(num_workers=4) + torch.load on the source .pt files

with GB/s and CPU-seconds per GB for each, and the ratios loader/raw and loader/torch.load.

    python3 bench/loader_e2e_bench.py --work /var/tmp/lsbench --gb 4        # EAGLE-3-like
    python3 bench/loader_e2e_bench.py --work /var/tmp/lsbench --small       # 100k x 64 KB

The sources are made once with examples/make_eagle3_data.py (real torch.save files) or, for
--small, as 100k safetensors files of ~64 KB, and packed once with `libshard pack`; later runs
reuse them. Needs root for cold-cache numbers (otherwise it says so).
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

from benchlib import drop_caches

REPO = Path(__file__).resolve().parents[1]


def find_cli() -> str:
    if os.environ.get("LIBSHARD_CLI"):
        return os.environ["LIBSHARD_CLI"]
    for c in [REPO / "build" / "converters" / "libshard"] + [
            Path(p) for p in glob.glob(str(REPO / "build*" / "converters" / "libshard"))]:
        if c.exists():
            return str(c)
    sys.exit("libshard command not found: build first (make build) or set LIBSHARD_CLI")



def cpu_seconds() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def make_sources(src: Path, args) -> None:
    if src.exists() and any(src.rglob("*.*")):
        return
    print(f"making sources in {src} ...", flush=True)
    if args.small:
        import numpy as np
        from safetensors.numpy import save_file
        rng = np.random.default_rng(0)
        n = args.small_samples
        src.mkdir(parents=True)
        # ~64 KB: input_ids int64 [L] + hidden bf16-sized (uint16 here) [L, 24], L ~ 640
        for i in range(n):
            d = src / f"rows_{i // 10000}"
            d.mkdir(exist_ok=True)
            length = int(rng.integers(600, 700))
            save_file({"input_ids": rng.integers(0, 32000, length, dtype=np.int64),
                       "hidden_state": rng.integers(0, 65535, (length, 44), dtype=np.uint16)},
                      str(d / f"hs_{i}.safetensors"))
        return
    per_sample = 8 * args.hidden * (args.min_len + args.max_len) / 2
    samples = max(4, int(args.gb * 1e9 / per_sample))
    subprocess.run([sys.executable, str(REPO / "examples" / "make_eagle3_data.py"), str(src),
                    "--samples", str(samples), "--hidden", str(args.hidden),
                    "--min-len", str(args.min_len), "--max-len", str(args.max_len)], check=True)


def run_cli_bench(cli: str, packed: Path, epochs: int) -> dict:
    out = subprocess.run([cli, "bench", str(packed), "--shuffle", "--epochs", str(epochs)],
                         check=True, capture_output=True, text=True).stdout
    print(textwrap_indent(out))
    # The device limit: the best of the raw read shapes `libshard bench` tries.
    raws = re.findall(r"raw sequential read \(.*?\): ([\d.]+) GB/s.*?([\d.]+) CPU-s/GB", out)
    raw = max(raws, key=lambda r: float(r[0]))
    loader = re.findall(r"loader epoch (\d+):.*?: ([\d.]+) GB/s, ([\d.]+) CPU-s/GB", out)
    return {"raw_gbps": float(raw[0]), "raw_cpu": float(raw[1]),
            "epochs": [(int(e), float(g), float(c)) for e, g, c in loader]}


def textwrap_indent(s: str) -> str:
    return "\n".join("    " + line for line in s.strip().splitlines())


def measure(make_iterable) -> tuple[float, float, float]:
    cold = drop_caches()
    t0, c0 = time.perf_counter(), cpu_seconds()
    nbytes = 0
    for sample in make_iterable():
        for v in sample.values():
            if hasattr(v, "element_size"):
                nbytes += v.numel() * v.element_size()
    wall = time.perf_counter() - t0
    cpu = cpu_seconds() - c0
    gb = nbytes / 1e9
    return gb / wall, cpu / gb, gb


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", default="/var/tmp/libshard_e2e", help="where sources and the dataset live")
    p.add_argument("--gb", type=float, default=4.0)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--min-len", type=int, default=1000)
    p.add_argument("--max-len", type=int, default=3000)
    p.add_argument("--small", action="store_true", help="100k samples of ~64 KB instead")
    p.add_argument("--small-samples", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--skip-torch", action="store_true")
    args = p.parse_args(argv)

    import torch
    sys.path.insert(0, str(REPO / "build" / "python"))
    import libshard

    cli = find_cli()
    work = Path(args.work) / ("small" if args.small else f"eagle3_{args.gb:g}gb_h{args.hidden}")
    src, packed = work / "src", work / "packed"
    make_sources(src, args)
    if not (packed / "manifest.json").exists():
        print(f"packing {src} -> {packed} ...", flush=True)
        subprocess.run([cli, "pack", str(src), "-o", str(packed), "--progress", "none"], check=True)

    cold = os.geteuid() == 0
    print(f"dataset {packed} ({'cold cache: page cache dropped before each run' if cold else 'WARM cache: not root'})")
    cli_res = run_cli_bench(cli, packed, args.epochs)
    rows = [("raw O_DIRECT read", cli_res["raw_gbps"], cli_res["raw_cpu"])]
    for e, g, c in cli_res["epochs"]:
        rows.append((f"libshard loader (C++), epoch {e}", g, c))
    g, c, _ = measure(lambda: libshard.Loader(str(packed), shuffle=True, seed=0))
    rows.append(("libshard.Loader (Python dicts)", g, c))
    if not args.skip_torch and not args.small:
        files = sorted(glob.glob(str(src / "**" / "*.ckpt"), recursive=True))

        class Files(torch.utils.data.Dataset):
            def __len__(self):
                return len(files)

            def __getitem__(self, i):
                return torch.load(files[i], weights_only=True)

        warnings.filterwarnings("ignore", message=".*worker processes in total.*")
        g, c, _ = measure(lambda: torch.utils.data.DataLoader(
            Files(), batch_size=None, shuffle=True, num_workers=args.workers))
        rows.append((f"torch.load DataLoader({args.workers} workers)", g, c))

    print(f"\n{'reader':<40}{'GB/s':>8}{'CPU-s/GB':>10}")
    for name, g, c in rows:
        print(f"{name:<40}{g:>8.2f}{c:>10.3f}")
    loader = rows[1][1]
    print(f"\nloader / raw read:               {loader / rows[0][1]:.1%}")
    print(f"Python loader / raw read:        {rows[1 + len(cli_res['epochs'])][1] / rows[0][1]:.1%}")
    if rows[-1][0].startswith("torch.load"):
        print(f"loader / torch.load DataLoader:  {loader / rows[-1][1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
