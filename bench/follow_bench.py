"""Follow mode (docs/guide/loading.md "Following a dataset being written"): what following costs.

    python3 bench/follow_bench.py [--work DIR] [--samples 400] [--hidden 2048] [--seq 512]

1. Visibility: a writer (child process) writes one sample, then pauses; the time from its
   write() to a follow Loader serving that sample, per commit_interval. Expected: about one
   commit interval (FORMAT.md §6.1) plus the follower's polling (0.1 s) and one snapshot.
2. Reading: one epoch of a complete dataset read as a follow epoch (windows of arrivals) and as an
   ordinary epoch, alternated, cold page cache each (run as root): GB/s and the ratio.
3. Waiting: the CPU time of a follow Loader waiting 10 s for a writer that writes nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import torch

import libshard

WRITER = textwrap.dedent("""
    import sys, time, torch, libshard
    out, interval = sys.argv[1], float(sys.argv[2])
    with libshard.Writer(out, commit_interval=interval) as w:
        w.write({"input_ids": torch.arange(16), "hidden_state": torch.zeros(1, 16, 64,
                 dtype=torch.bfloat16)}, key="k0")
        print(repr(time.time()), flush=True)
        time.sleep(interval * 3 + 2)
""")


def drop_caches() -> None:
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass


def visibility(work: Path, interval: float) -> float:
    out = work / f"vis-{interval}"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(out), str(interval)],
                            stdout=subprocess.PIPE, text=True)
    try:
        loader = libshard.Loader(out, follow=True, slow_wait_warning_seconds=0)
        it = iter(loader)
        written = float(proc.stdout.readline())
        next(it)
        served = time.time()
        loader.close()
        return served - written
    finally:
        proc.kill()
        proc.wait()


def make_dataset(out: Path, n: int, seq: int, hidden: int) -> None:
    g = torch.Generator().manual_seed(0)
    with libshard.Writer(out, shard_size="256MiB", commit_interval=0) as w:
        for i in range(n):
            w.write({"input_ids": torch.randint(0, 32000, (seq,), generator=g),
                     "hidden_state": torch.randn(1, seq, hidden, generator=g).to(torch.bfloat16)},
                    key=f"s{i:06d}")


def epoch_gbps(out: Path, follow: bool) -> float:
    drop_caches()
    loader = libshard.Loader(out, follow=follow, batch_size=4, shuffle_window=256, seed=1)
    start = time.perf_counter()
    n = 0
    for batch in loader:
        n += sum(s["hidden_state"].numel() * 2 for s in batch)
    elapsed = time.perf_counter() - start
    loader.close()
    return n / elapsed / 1e9


def waiting_cpu(work: Path, seconds: float) -> float:
    out = work / "idle"
    w = libshard.Writer(out, commit_interval=0.05)
    w.write({"input_ids": torch.arange(4)}, key="k0")
    w.flush()
    loader = libshard.Loader(out, follow=True, batch_size=2, slow_wait_warning_seconds=0)
    it = iter(loader)
    t = threading.Thread(target=lambda: next(it, None), daemon=True)
    before = resource.getrusage(resource.RUSAGE_SELF)
    t.start()
    time.sleep(seconds)
    after = resource.getrusage(resource.RUSAGE_SELF)
    loader.close()
    w.abort()
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=None)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="follow_bench_"))
    work.mkdir(parents=True, exist_ok=True)
    print("1. write() to served, per commit_interval")
    for interval in (0.2, 1.0, 5.0):
        print(f"   commit_interval {interval:4.1f} s: {visibility(work, interval):.2f} s")
    data = work / "data"
    if not (data / "manifest.json").exists():
        make_dataset(data, args.samples, args.seq, args.hidden)
    gb = args.samples * args.seq * args.hidden * 2 / 1e9
    print(f"2. one epoch of {args.samples} samples ({gb:.2f} GB of hidden states), cold cache")
    for r in range(args.rounds):
        plain = epoch_gbps(data, follow=False)
        followed = epoch_gbps(data, follow=True)
        print(f"   round {r}: ordinary {plain:.2f} GB/s, follow epoch {followed:.2f} GB/s, "
              f"ratio {followed / plain:.2f}")
    print(f"3. CPU time of a follow Loader waiting 10 s: {waiting_cpu(work, 10.0):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
