#!/usr/bin/env python3
"""Start time of a Loader (issue 21, "a start that does not grow with the arena"): on datasets of
10^6 and 10^7 tiny samples, page cache dropped, rank 7 of 1024, for each memory_budget, the time
``libshard.Loader(path, ...)`` takes to return (the dataset's opening included, as a training
job sees it) and the time from there to the first sample, next to one cold O_DIRECT read of that
sample's extent (what the first sample cannot avoid). Each measurement runs in a fresh Python
process (torch and libshard imported first, not timed; then the cache is dropped), so nothing
of an earlier Loader is warm. Also printed: the process's resident memory added by the Loader
and the first sample (an arena that is reserved, not touched, adds little), and the Loader's
pinning and engine status.

    sudo python3 bench/start_bench.py --work /var/tmp/libshard_start

The datasets are written once (build/bench/make_tiny_dataset: the EAGLE-3 schema, every
sample's index entry real; every 8th sample of 10^6 and every 64th of 10^7 carries a 1 KiB
payload, the others are empty, so the shards stay under 1 GB) and reused. The seed is chosen so
that the rank's first sample has bytes to read. Needs root for the cache drops (without root it
says so and measures a warm cache). Targets (issue 21): Loader(...) < 30 ms and the first
sample < 50 ms plus one read of it, at every budget.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from benchlib import drop_caches

REPO = Path(__file__).resolve().parents[1]
PAYLOAD = 1024


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGESIZE")


def find_tool(build: Path) -> Path:
    tool = build / "bench" / "make_tiny_dataset"
    if not tool.exists():
        sys.exit(f"{tool} not found: build first (make build)")
    return tool


def make_dataset(tool: Path, out: Path, n: int) -> None:
    if (out / "manifest.json").exists():
        return
    every = 8 if n <= 1_000_000 else 64
    parts = max(1, n // 1_000_000)
    print(f"writing {n} samples to {out} (a {PAYLOAD} B payload every {every}) ...", flush=True)
    subprocess.run([str(tool), str(out), str(n), "--parts", str(parts), "--payload",
                    str(PAYLOAD), "--payload-every", str(every)], check=True)


def first_index(path: str, rank: int, world: int, seed: int) -> int:
    import libshard
    loader = libshard.Loader(path, rank=rank, world_size=world, seed=seed, memory_budget="64MiB",
                             pin_memory=False, return_index=True)
    return int(next(iter(loader))["__index__"])


def choose_seed(path: str, rank: int, world: int) -> int:
    """The first seed whose first sample on `rank` has stored bytes (warm cache)."""
    import libshard
    ds = libshard.Dataset(path, verify=False)
    for seed in range(1000):
        if ds.location(first_index(path, rank, world, seed))["stored_size"] > 0:
            return seed
    sys.exit(f"no seed under 1000 gives rank {rank} a first sample with bytes in {path}")


def one_read_ms(path: str, index: int) -> float:
    """One cold O_DIRECT read of sample `index`'s 4 KiB-aligned extent."""
    import libshard
    ds = libshard.Dataset(path, verify=False)
    loc = ds.location(index)
    shard = ds.shards[loc["shard"]]["path"]
    length = max(4096, (loc["stored_size"] + 4095) // 4096 * 4096)
    buf = mmap.mmap(-1, length)  # page-aligned, as O_DIRECT needs
    drop_caches()
    fd = os.open(shard, os.O_RDONLY | os.O_DIRECT)
    try:
        t0 = time.perf_counter()
        os.preadv(fd, [buf], loc["offset"])
        return (time.perf_counter() - t0) * 1e3
    finally:
        os.close(fd)


def child(args) -> int:
    """One measurement, in this fresh process: prints one JSON object."""
    import torch  # noqa: F401  (imported before timing, as in a training script)
    import libshard
    cold = drop_caches()
    rss0 = rss_bytes()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    loader = libshard.Loader(args.child, rank=args.rank, world_size=args.world, seed=args.seed,
                             memory_budget=args.budget, return_index=True)
    t1 = time.perf_counter()
    sample = next(iter(loader))
    t2 = time.perf_counter()
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    rss1 = rss_bytes()
    index = int(sample["__index__"])
    stats = loader.stats()
    del sample, loader
    print(json.dumps({
        "cold_cache": cold,
        "construct_ms": (t1 - t0) * 1e3,
        "first_sample_ms": (t2 - t1) * 1e3,
        "cpu_ms": (cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) * 1e3,
        "rss_added_mb": (rss1 - rss0) / 1e6,
        "index": index,
        "one_read_ms": one_read_ms(args.child, index),
        "pin_status": stats.get("pin_status"),
        "engine_status": stats.get("engine_status"),
        "arena_budget": stats.get("arena_budget"),
    }))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", default="/var/tmp/libshard_start", help="where the datasets go")
    p.add_argument("--build", default=str(REPO / "build"), help="the CMake build directory")
    p.add_argument("--pythonpath", help="where the libshard package is (default BUILD/python); "
                   "another build's, to compare")
    p.add_argument("--samples", default="1000000,10000000", help="dataset sizes, comma-separated")
    p.add_argument("--budgets", default="64MiB,2GiB,8GiB", help="memory_budget values")
    p.add_argument("--rank", type=int, default=7)
    p.add_argument("--world", type=int, default=1024)
    p.add_argument("--runs", type=int, default=1, help="runs of each (the median is printed)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--budget", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)

    tool = find_tool(Path(args.build))
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if not drop_caches():
        print("not root: the page cache cannot be dropped, so these are warm-cache figures",
              flush=True)
    package = args.pythonpath or str(Path(args.build) / "python")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([package, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    sys.path.insert(0, package)
    rows = []
    for n in [int(float(x)) for x in args.samples.split(",")]:
        path = work / f"tiny_{n}"
        make_dataset(tool, path, n)
        seed = choose_seed(str(path), args.rank, args.world)
        for budget in args.budgets.split(","):
            runs = []
            for _ in range(args.runs):
                out = subprocess.run(
                    [sys.executable, __file__, "--child", str(path), "--budget", budget,
                     "--seed", str(seed), "--rank", str(args.rank), "--world", str(args.world)],
                    env=env, check=True, capture_output=True, text=True)
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            runs.sort(key=lambda r: r["construct_ms"] + r["first_sample_ms"])
            r = runs[len(runs) // 2]
            rows.append((n, budget, r))
            print(f"{n:>9} samples  memory_budget {budget:>6}:  Loader(...) "
                  f"{r['construct_ms']:6.1f} ms   first sample {r['first_sample_ms']:6.1f} ms "
                  f"(one read of it: {r['one_read_ms']:5.1f} ms)   CPU {r['cpu_ms']:6.1f} ms   "
                  f"RSS +{r['rss_added_mb']:6.1f} MB   cold={r['cold_cache']}", flush=True)
    print()
    print(json.dumps([{"samples": n, "memory_budget": b, **r} for n, b, r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
