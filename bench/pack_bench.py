#!/usr/bin/env python3
"""Benchmark `libshard pack` against a plain copy of the same bytes and a torch.load/torch.save
script, on an EAGLE-3-like directory (issue 3, "Speed").

    python3 bench/pack_bench.py --files 40 --seq 1024 --hidden 4096     # ~1.3 GB
    python3 bench/pack_bench.py --gb 8                                  # size by total bytes

Each measurement starts from a cold page cache (`sync; echo 3 > /proc/sys/vm/drop_caches`, needs
root; without it the numbers are warm-cache and the output says so). Reported, from one run
(these machines are shared and noisy, so compare the ratios, not absolute numbers):
  copy   = `cat SRC/* > /dev/null` + a sequential write of the same bytes (dd oflag=direct)
  pack   = `libshard pack SRC -o OUT` (fsync on, as a user runs it)
  python = torch.load + torch.save of every file
  safetensors = torch.load + safetensors.torch.save_file of every file (converting a .ckpt
           directory to per-sample .safetensors, as peers' tooling does; issue 11's yardstick)
each with its final fsync, and pack throughput relative to copy (goal: >= 0.80), to python and to
safetensors (goal: >= 1.0), with peak RSS of each.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from benchlib import drop_caches

REPO = Path(__file__).resolve().parents[1]


def find_cli(explicit: str | None) -> str:
    if explicit:
        return explicit
    if os.environ.get("LIBSHARD_CLI"):
        return os.environ["LIBSHARD_CLI"]
    cands = glob.glob(str(REPO / "build*" / "converters" / "libshard"))
    if not cands:
        sys.exit("libshard binary not found: build it or pass --cli")
    return max(cands, key=os.path.getmtime)



def make_dataset(src: Path, files: int, seq: int, hidden: int) -> int:
    """SpecForge-like files: input_ids/loss_mask int64 [L], hidden_state bf16 [1,L,H],
    aux_hidden_state bf16 [1,L,3H]; L varies +-25% around `seq`. Reused when present."""
    stamp = src / ".bench_params.json"
    params = {"files": files, "seq": seq, "hidden": hidden}
    if stamp.exists() and json.loads(stamp.read_text()) == params:
        return sum(p.stat().st_size for p in src.rglob("*.ckpt"))
    import torch
    shutil.rmtree(src, ignore_errors=True)
    gen = torch.Generator().manual_seed(0)
    total = 0
    for i in range(files):
        length = max(1, int(seq * (0.75 + 0.5 * ((i * 7919) % 101) / 100)))
        d = {
            "input_ids": torch.randint(0, 128000, (length,), generator=gen),
            "loss_mask": torch.ones(length, dtype=torch.int64),
            "hidden_state": torch.randn(1, length, hidden, generator=gen).bfloat16(),
            "aux_hidden_state": torch.randn(1, length, 3 * hidden, generator=gen).bfloat16(),
        }
        g = (i // 100) * 100
        path = src / f"rows_{g}-{g + 100}" / f"data_{i}.ckpt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(d, path)
        total += path.stat().st_size
    stamp.write_text(json.dumps(params))
    return total


def timed(cmd, **kw) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {cmd}\n{p.stderr}")
    return dt, p


PY_REWRITE = textwrap.dedent("""
    import os, resource, sys, torch
    src, dst = sys.argv[1], sys.argv[2]
    for root, _, names in os.walk(src):
        for n in sorted(names):
            if not n.endswith('.ckpt'):
                continue
            d = torch.load(os.path.join(root, n), weights_only=True)
            out = os.path.join(dst, os.path.relpath(root, src))
            os.makedirs(out, exist_ok=True)
            path = os.path.join(out, n)
            torch.save(d, path)
            with open(path, 'rb+') as f:
                os.fsync(f.fileno())
    print('peak_rss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
""")


PY_SAFETENSORS = PY_REWRITE.replace(
    "torch.save(d, path)",
    "from safetensors.torch import save_file; "
    "save_file({k: v.contiguous() for k, v in d.items() if isinstance(v, torch.Tensor)}, "
    "path[:-5] + '.safetensors'); path = path[:-5] + '.safetensors'")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/tmp/libshard_pack_bench", help="work directory")
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--seq", type=int, default=1024, help="mean tokens per sample")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--gb", type=float, default=0, help="size the directory to about this many GB")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--compress", default="none")
    ap.add_argument("--pack-args", default="", help="extra libshard pack flags, e.g. '--no-crc'")
    ap.add_argument("--cli")
    ap.add_argument("--skip-python", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep outputs")
    args = ap.parse_args()

    cli = find_cli(args.cli)
    work = Path(args.dir)
    src, out, pyout = work / "src", work / "packed", work / "python_out"
    work.mkdir(parents=True, exist_ok=True)
    if args.gb:
        per_file = 8 * args.hidden * args.seq
        args.files = max(1, int(args.gb * 1e9 / per_file))
    total = make_dataset(src, args.files, args.seq, args.hidden)
    gb = total / 1e9
    print(f"dataset: {args.files} files, {gb:.2f} GB, H={args.hidden}, L~{args.seq}  ({src})")
    cold = drop_caches()
    if not cold:
        print("warning: cannot drop the page cache (not root): numbers are warm-cache")

    files = sorted(str(p) for p in src.rglob("*.ckpt"))
    results = {}

    # copy = read everything + write the same number of bytes sequentially.
    drop_caches()
    t_read, _ = timed(["sh", "-c", 'xargs -0 cat > /dev/null'], input="\0".join(files))
    ddfile = work / "dd.out"
    block = 4 << 20
    drop_caches()
    t_write, _ = timed(["dd", "if=/dev/zero", f"of={ddfile}", f"bs={block}",
                        f"count={max(1, total // block)}", "oflag=direct", "status=none"])
    ddfile.unlink()
    results["copy"] = (t_read + t_write, None)
    print(f"  cat (read)        {t_read:7.2f} s  {gb / t_read:6.2f} GB/s")
    print(f"  dd (write)        {t_write:7.2f} s  {gb / t_write:6.2f} GB/s")

    shutil.rmtree(out, ignore_errors=True)
    drop_caches()
    cmd = [cli, "pack", str(src), "-o", str(out), "--progress", "none", "--compress", args.compress]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    cmd += args.pack_args.split()
    t_pack, p = timed(cmd)
    m = re.search(r"peak RSS ([\d.]+ \w+)", p.stdout)
    results["pack"] = (t_pack, m.group(1) if m else "?")

    if not args.skip_python:
        shutil.rmtree(pyout, ignore_errors=True)
        drop_caches()
        t_py, p = timed([sys.executable, "-c", PY_REWRITE, str(src), str(pyout)])
        m = re.search(r"peak_rss (\d+)", p.stdout)
        results["python"] = (t_py, f"{int(m.group(1)) / 2**20:.0f} MiB" if m else "?")
        shutil.rmtree(pyout, ignore_errors=True)
        drop_caches()
        t_st, p = timed([sys.executable, "-c", PY_SAFETENSORS, str(src), str(pyout)])
        m = re.search(r"peak_rss (\d+)", p.stdout)
        results["safetensors"] = (t_st, f"{int(m.group(1)) / 2**20:.0f} MiB" if m else "?")

    print(f"\n{'method':<12}{'seconds':>9}{'GB/s':>8}   peak RSS")
    for name, (t, rss) in results.items():
        print(f"{name:<12}{t:9.2f}{gb / t:8.2f}   {rss or '-'}")
    print(f"\npack throughput / copy throughput   = {results['copy'][0] / t_pack:.2f}  (goal >= 0.80)")
    if "python" in results:
        print(f"pack throughput / python throughput = {results['python'][0] / t_pack:.2f}")
        print(f"pack throughput / safetensors conversion = {results['safetensors'][0] / t_pack:.2f}"
              "  (goal >= 1.0)")
    print(f"(cold cache: {'yes' if cold else 'no'})")
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(pyout, ignore_errors=True)


if __name__ == "__main__":
    main()
