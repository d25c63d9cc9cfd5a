#!/usr/bin/env python3
"""Long context: what each sequence-parallel rank reads of a long sample, and how fast.

For EAGLE-3 samples of 32K-128K tokens (input_ids, loss_mask int64 [L]; hidden_state bf16
[1, L, H]; aux_hidden_state bf16 [1, L, 3H]: 8·H + 16 bytes a token), stored raw and with
`compress="auto"` by libshard and as the per-sample `.pt` files SpecForge's offline reader
takes, every SP group of N = 1, 2, 4, 8 ranks reads each sample once per rank, rank after
rank, with the dataset's page-cache copy dropped before each rank's read, so that each rank's
figure is what it asks the storage for (as ranks on different nodes, or O_DIRECT readers):

- `libshard whole`   each rank reads the sample whole (`ds[i]`): what a loader without slices
                     costs, N x the sample a group;
- `libshard slice`   each rank reads its own rows (`ds.read(i, rows=(start, stop))`), the window
                     SpecForge's USP rule gives it (`sequence_parallel_slice("specforge-usp")`:
                     ceil(L / N) rows plus the TTT overlap), checked against the row blocks'
                     checksums (index version 4);
- `libshard loader`  `libshard.Loader(sequence_parallel=SequenceParallel(N, "specforge-usp"))`
                     on each rank of the group: the same slices through the streaming loader;
- `specforge mmap`   SpecForge's own reader: `torch.load(mmap=True)` and
                     `OfflineEagle3Dataset.process_data_usp` (its USP slicing), then a copy of
                     the slice tensors (what `.cuda()` costs the page cache; unchecked).

Reported per (length, storage, reader, N): the disk bytes a group read per sample against the
sample's stored size (`read_bytes` of /proc/self/io: every block read the process caused,
O_DIRECT, page-cache and mmap faults alike), each rank's GB/s of slice bytes and CPU-s per GB
read, and the time from opening the dataset to a rank's first slice. Each dataset is read
through once before its measured passes, so the readers compare host-warm (docs/performance.md);
the SpecForge row needs its package (the trainers' venv):

    PYTHONPATH=build/python .venv-trainers/bin/python bench/long_context_bench.py \
        --work /var/tmp/lc_bench --lengths 32768 131072 --hidden 1024
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MiB = 1 << 20
KEYS = ("input_ids", "loss_mask", "hidden_state", "aux_hidden_state")


def io_read_bytes() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def evict(path: Path) -> None:
    """Drops the page-cache copy of every file of the dataset (posix_fadvise DONTNEED on clean
    files), so the next read of each rank counts every byte it asks the storage for, whether it
    reads with O_DIRECT, buffered or through mmap faults; nothing else (the interpreter, the
    libraries) is evicted, so read_bytes counts the data alone."""
    for p in path.rglob("*"):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def sample(length: int, hidden: int, seed: int) -> dict:
    import torch
    gen = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.randint(0, 150000, (length,), generator=gen),
        "loss_mask": (torch.rand(length, generator=gen) < 0.7).to(torch.int64),
        "hidden_state": torch.randn(1, length, hidden, generator=gen).to(torch.bfloat16),
        "aux_hidden_state": torch.randn(1, length, 3 * hidden, generator=gen).to(torch.bfloat16),
    }


def write(work: Path, length: int, hidden: int, samples: int) -> dict:
    """The three copies of the same samples: libshard raw, libshard auto, SpecForge .pt files."""
    import torch
    import libshard
    base = work / f"L{length}_H{hidden}_n{samples}"
    paths = {"none": base / "raw", "auto": base / "auto", "pt": base / "pt"}
    if all((p / "done").exists() for p in paths.values()):
        return paths
    shutil.rmtree(base, ignore_errors=True)
    t0 = time.time()
    writers = {c: libshard.Writer(paths[c], compress=None if c == "none" else c, fsync=False)
               for c in ("none", "auto")}
    paths["pt"].mkdir(parents=True)
    for i in range(samples):
        s = sample(length, hidden, seed=length + i)
        for w in writers.values():
            w.write(s, key=f"s{i}")
        torch.save(s, paths["pt"] / f"data_{i}.ckpt")
    for w in writers.values():
        w.close()
    for p in paths.values():
        (p / "done").touch()
    print(f"  wrote {samples} x {length} tokens (H={hidden}) raw, auto and .pt in "
          f"{time.time() - t0:.0f} s", flush=True)
    return paths


def host_warm(path: Path) -> None:
    """Read every file once, so the virtual disk serves each reader from the same place."""
    for p in sorted(path.iterdir()):
        if p.is_file():
            with open(p, "rb", buffering=0) as f:
                while f.read(64 * MiB):
                    pass


class Measure:
    """Disk bytes, CPU and wall time around one rank's read of one sample."""

    def __enter__(self):
        self.bytes0, self.cpu0, self.t0 = io_read_bytes(), cpu_seconds(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.bytes = io_read_bytes() - self.bytes0
        self.cpu = cpu_seconds() - self.cpu0
        self.wall = time.perf_counter() - self.t0
        return False


def slice_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def window(length: int, n: int, rank: int, ttt: int) -> tuple:
    from libshard import _core
    s = _core.sequence_parallel_slice("specforge-usp", length, n, rank, ttt_length=ttt)
    return int(s["start"]), int(s["stop"])


def libshard_reader(path: Path, mode: str, ttt: int):
    """Returns open() -> read(i, n, rank) -> served bytes."""
    import libshard

    def open_():
        ds = libshard.open(path)

        def read(i, n, rank):
            if mode == "whole":
                s = ds[i]
                return slice_bytes(s.values())
            a, b = window(int(ds.lengths[i]), n, rank, ttt)
            s = ds.read(i, rows=(a, b))
            return slice_bytes(s.values())
        return read
    return open_


def loader_pass(path: Path, n: int, rank: int, ttt: int) -> list:
    """One rank of one group streams every sample of the dataset: [(served bytes, seconds to it)]."""
    import libshard
    t0 = time.perf_counter()
    out = []
    # SP 1: no group, the loader reads each sample whole (the rule's settings apply from SP 2).
    sp = libshard.SequenceParallel(n, rule="specforge-usp", ttt_length=ttt) if n > 1 else None
    loader = libshard.Loader(path, shuffle=False, world_size=n, rank=rank, sequence_parallel=sp)
    for s in loader:
        out.append((slice_bytes(v for k, v in s.items() if k != libshard.SP_KEY),
                    time.perf_counter() - t0))
        del s
    del loader
    return out


def specforge_reader(path: Path, length: int, ttt: int):
    import torch
    from specforge.data.preprocessing import OfflineEagle3Dataset
    files = sorted(str(p) for p in path.glob("data_*.ckpt"))

    def open_():
        def read(i, n, rank):
            data = torch.load(files[i], weights_only=False, mmap=True)
            out = OfflineEagle3Dataset.process_data_usp(data, length, ttt_length=ttt,
                                                        sp_rank=rank, sp_size=n)
            # What moving the slice to the GPU costs the page cache: every byte of it touched.
            kept = [t.clone() for t in out.values() if torch.is_tensor(t)]
            return slice_bytes(kept)
        return read
    return open_


def summary(name, n, samples, stored, group_bytes, served, cpu, wall, first) -> dict:
    """One row: a group of n ranks read group_bytes from the storage and served `served`."""
    return {"reader": name, "sp": n, "group_per_sample": group_bytes / samples,
            "ratio": group_bytes / max(1, sum(stored)), "rank_gbps": served / wall / 1e9,
            "cpu_per_gb": cpu / max(group_bytes, served) * 1e9 if served else 0.0,
            "first_slice": max(first)}


def run_reader(name, path, open_, samples, stored, n) -> dict:
    group_bytes, served, cpu, wall, first = 0, 0, 0.0, 0.0, []
    for i in range(samples):
        for rank in range(n):
            evict(path)
            t0 = time.perf_counter()
            with Measure() as m:
                read = open_()
                got = read(i, n, rank)
            if i == 0:
                first.append(time.perf_counter() - t0)
            group_bytes += m.bytes
            served += got
            cpu += m.cpu
            wall += m.wall
    return summary(name, n, samples, stored, group_bytes, served, cpu, wall, first)


def run_loader(path, samples, stored, n, ttt) -> dict:
    group_bytes, served, cpu, wall, first = 0, 0, 0.0, 0.0, []
    for rank in range(n):
        evict(path)
        with Measure() as m:
            got = loader_pass(path, n, rank, ttt)
        first.append(got[0][1])
        group_bytes += m.bytes
        served += sum(g for g, _ in got)
        cpu += m.cpu
        wall += m.wall
    return summary("libshard loader", n, samples, stored, group_bytes, served, cpu, wall, first)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", default="/var/tmp/libshard_long_context_bench")
    p.add_argument("--lengths", type=int, nargs="+", default=[32768, 131072])
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--sp", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--ttt-length", type=int, default=7, help="SpecForge's default TTT overlap")
    p.add_argument("--readers", nargs="+",
                   default=["whole", "slice", "loader", "specforge"],
                   help="whole slice loader specforge")
    args = p.parse_args()
    sys.path.insert(0, str(REPO / "build" / "python"))
    import libshard

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    try:
        import specforge.data.preprocessing  # noqa: F401  (only: is it there)
        have_specforge = True
    except Exception as e:  # the trainer's package is optional for this bench
        have_specforge = False
        print(f"  (no SpecForge here: {type(e).__name__}: {e}; its row is left out)")
        print(f"long_context_bench: the dataset's page cache dropped before each rank's read; "
          f"SP rule specforge-usp, ttt_length {args.ttt_length}")
    print(f"{'tokens':>7} {'store':>5} {'reader':<16} {'SP':>3} {'sample MiB':>10} "
          f"{'group MiB/sample':>16} {'group/sample':>12} {'rank GB/s':>9} {'CPU-s/GB':>8} "
          f"{'first slice s':>13}")
    for length in args.lengths:
        paths = write(work, length, args.hidden, args.samples)
        for store in ("none", "auto"):
            ds = libshard.open(paths[store])
            stored = [ds.location(i)["stored_size"] for i in range(len(ds))]
            runs = []
            host_warm(paths[store])
            for n in args.sp:
                if "whole" in args.readers:
                    runs.append(run_reader("libshard whole", paths[store], libshard_reader(
                        paths[store], "whole", args.ttt_length), args.samples, stored, n))
                if "slice" in args.readers:
                    runs.append(run_reader("libshard slice", paths[store], libshard_reader(
                        paths[store], "slice", args.ttt_length), args.samples, stored, n))
                if "loader" in args.readers:
                    runs.append(run_loader(paths[store], args.samples, stored, n,
                                           args.ttt_length))
            if store == "none" and "specforge" in args.readers and have_specforge:
                host_warm(paths["pt"])
                pt_size = [(paths["pt"] / f"data_{i}.ckpt").stat().st_size
                           for i in range(args.samples)]
                for n in args.sp:
                    runs.append(run_reader("specforge mmap", paths["pt"], specforge_reader(
                        paths["pt"], length, args.ttt_length), args.samples, pt_size, n))
            for r in runs:
                size = sum(stored) / len(stored) if r["reader"] != "specforge mmap" else \
                    sum(pt_size) / len(pt_size)
                print(f"{length:>7} {store:>5} {r['reader']:<16} {r['sp']:>3} {size / MiB:>10.1f} "
                      f"{r['group_per_sample'] / MiB:>16.1f} {r['ratio']:>12.3f} "
                      f"{r['rank_gbps']:>9.2f} {r['cpu_per_gb']:>8.2f} {r['first_slice']:>13.3f}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
