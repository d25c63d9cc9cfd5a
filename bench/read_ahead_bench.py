"""The trainer-shaped loop over a map-style dataset: a torch DataLoader with workers, a sampler
and a Python collate of the trainer's own, fed by

  memory     the same samples already in memory (the loop's ceiling),
  readahead  libshard.open(read_ahead=...) + libshard.ReadAheadSampler (issue 32),
  plain      libshard.open() alone: one synchronous read per ds[i],
  loader     libshard.Loader(sampler=..., collate="pad") alone (batches built in C++),

on the same EAGLE-3-like samples (H=4096 by default), cold page cache for the libshard rows,
no step time. Each row runs in a process of its own; the rows alternate over `--rounds` and the
table gives each row's median. Reports GB/s (sample bytes / wall time), CPU-s/GB (the row's
process and its DataLoader workers) and the ratio to the in-memory ceiling; for the readahead
row, what the workers' read-aheads report (hits, waits, misses).

    python3 bench/read_ahead_bench.py --dir /var/tmp/ra_bench --gb 2

Target (issue 32): readahead >= 0.95x memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

import libshard  # noqa: E402


def make_dataset(out: Path, gb: float, hidden: int, lo: int, hi: int) -> None:
    if (out / "manifest.json").exists():
        return
    per_token = 16 + 8 * hidden  # input_ids, loss_mask (int64), aux [3H] + hidden [H] (bf16)
    g = torch.Generator().manual_seed(0)
    total = 0.0
    with libshard.Writer(out) as w:
        i = 0
        while total < gb * 1e9:
            s = int(torch.randint(lo, hi + 1, (1,), generator=g))
            w.write({"input_ids": torch.randint(0, 32000, (s,), generator=g),
                     "loss_mask": torch.ones(s, dtype=torch.long),
                     "aux_hidden_state": torch.randn(1, s, 3 * hidden, generator=g).bfloat16(),
                     "hidden_state": torch.randn(1, s, hidden, generator=g).bfloat16()},
                    key=f"data_{i}")
            total += s * per_token
            i += 1


def trainer_collate(samples):
    """A trainer's own padding collate (as Hugging Face's DataCollatorWithPadding does):
    [B, L] ids and masks, [B, L, D] hidden states, zeros on the right."""
    n = len(samples)
    longest = max(int(s["input_ids"].shape[0]) for s in samples)
    out = {}
    for key in ("input_ids", "loss_mask"):
        t = torch.zeros(n, longest, dtype=samples[0][key].dtype)
        for b, s in enumerate(samples):
            t[b, :s[key].shape[0]] = s[key]
        out[key] = t
    out["attention_mask"] = (out["input_ids"] != 0).long()
    for key in ("aux_hidden_state", "hidden_state"):
        width = samples[0][key].shape[-1]
        t = torch.zeros(n, longest, width, dtype=samples[0][key].dtype)
        for b, s in enumerate(samples):
            x = s[key].reshape(-1, width)
            t[b, :x.shape[0]] = x
        out[key] = t
    return out


def collate_with_stats(samples):
    batch = trainer_collate(samples)
    info = torch.utils.data.get_worker_info()
    stats = info.dataset.read_ahead_stats() if info is not None else None
    return batch, (os.getpid(), stats)


class SeededSampler(Sampler):
    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())

    def __len__(self) -> int:
        return self.n


class MemoryDataset(Dataset):
    """Every sample as ordinary tensors in this process (shared with forked workers)."""

    def __init__(self, path: str) -> None:
        ds = libshard.open(path, metadata=False)
        self.samples = [{k: v.clone() for k, v in ds[i].items()} for i in range(len(ds))]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        return self.samples[i]


def _children_cpu() -> tuple:
    """(user, system) CPU seconds of this process's live (or exited, not yet reaped) children."""
    me, tick = os.getpid(), os.sysconf("SC_CLK_TCK")
    user = system = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:  # ppid
            user += int(fields[11]) / tick
            system += int(fields[12]) / tick
    return user, system


def cpu_seconds() -> tuple:
    """(user, system) CPU seconds of this process and its DataLoader workers, alive or joined."""
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    lu, ls = _children_cpu()
    return s.ru_utime + c.ru_utime + lu, s.ru_stime + c.ru_stime + ls


def run_row(args) -> dict:
    path = str(Path(args.dir) / "ds")
    plain = libshard.open(path, metadata=False)
    n = len(plain)
    gb = plain.total_raw_bytes / 1e9
    sampler = SeededSampler(n, seed=1)
    workers = args.workers
    dl_kwargs = dict(num_workers=workers, multiprocessing_context=args.context,
                     prefetch_factor=args.prefetch_factor,
                     persistent_workers=args.epochs > 1) if workers else {}
    epoch_of = sampler  # what set_epoch goes to
    if args.row == "memory":
        ds = MemoryDataset(path)
        loader = DataLoader(ds, batch_sampler=BatchSampler(sampler, args.batch, False),
                            collate_fn=trainer_collate, **dl_kwargs)
    elif args.row == "plain":
        ds = libshard.open(path, metadata=False)
        loader = DataLoader(ds, batch_sampler=BatchSampler(sampler, args.batch, False),
                            collate_fn=trainer_collate, **dl_kwargs)
    elif args.row == "readahead":
        ds = libshard.open(path, metadata=False,
                           read_ahead={"memory_budget": args.read_ahead_budget})
        epoch_of = libshard.ReadAheadSampler(sampler, ds, batch_size=args.batch,
                                             num_workers=workers, depth=args.depth)
        loader = DataLoader(ds, batch_sampler=epoch_of, collate_fn=collate_with_stats,
                            **dl_kwargs)
    elif args.row == "loader":
        loader = libshard.Loader(path, sampler=sampler, batch_size=args.batch, collate="pad",
                                 metadata=False, pin_memory=False)
        epoch_of = loader
    else:
        raise SystemExit(f"unknown row {args.row}")
    epochs = []
    stats = {}
    for epoch in range(args.epochs):
        epoch_of.set_epoch(epoch)
        if args.row != "memory":
            benchlib.drop_caches()
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        steps = 0
        for batch in loader:
            if args.row == "readahead":
                batch, (pid, st) = batch
                stats[pid] = st
            steps += 1
            del batch
        wall = time.perf_counter() - t0
        user, system = (b - a for a, b in zip(cpu0, cpu_seconds()))
        epochs.append({"steps": steps, "GB_per_s": gb / wall, "cpu_s_per_GB": (user + system) / gb,
                       "user_s_per_GB": user / gb, "sys_s_per_GB": system / gb, "wall_s": wall})
    out = {"row": args.row, **epochs[-1], "epochs": epochs}
    if stats:
        keys = ("hits", "waits", "misses", "skipped", "evicted", "arena_peak")
        out["read_ahead"] = {k: sum(s[k] for s in stats.values() if s) for k in keys}
    del loader
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True)
    p.add_argument("--gb", type=float, default=2.0)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--min-len", type=int, default=128)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--prefetch-factor", type=int, default=2)
    p.add_argument("--context", default="fork")
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--read-ahead-budget", default="512MiB")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=1,
                   help="epochs per row (> 1: persistent workers); the table gives the last")
    p.add_argument("--rows", default="memory,readahead,plain,loader")
    p.add_argument("--row", help=argparse.SUPPRESS)
    p.add_argument("--json", help="write the results here too")
    args = p.parse_args()
    if args.row:
        print(json.dumps(run_row(args)))
        return
    make_dataset(Path(args.dir) / "ds", args.gb, args.hidden, args.min_len, args.max_len)
    if args.rounds == 0:  # --rounds 0: only make the data (outside the quiet run)
        return
    rows = args.rows.split(",")
    results = {r: [] for r in rows}
    passthrough = []
    skip = False
    for a in sys.argv[1:]:  # every option but --json goes to the rows' processes
        if skip or a.startswith("--json"):
            skip = a == "--json"
            continue
        passthrough.append(a)
    for _ in range(args.rounds):
        for r in rows:
            out = subprocess.run([sys.executable, __file__, *passthrough, "--row", r],
                                 check=True, capture_output=True, text=True).stdout
            results[r].append(json.loads(out.strip().splitlines()[-1]))
    ceiling = statistics.median(x["GB_per_s"] for x in results.get("memory", [])) \
        if "memory" in results else None
    print(f"{args.gb} GB, H={args.hidden}, batch {args.batch}, {args.workers} workers "
          f"({args.context}{', persistent' if args.epochs > 1 else ''}), prefetch_factor "
          f"{args.prefetch_factor}, read-ahead {args.read_ahead_budget} per worker, depth "
          f"{args.depth}, no step time, cold cache for libshard rows; epoch {args.epochs} of "
          f"{args.epochs}, median of {args.rounds}")
    print(f"{'row':<10} {'GB/s':>6} {'CPU-s/GB':>9} {'(sys)':>6} {'x memory':>9}   runs (GB/s)")
    table = []
    for r in rows:
        gbps = statistics.median(x["GB_per_s"] for x in results[r])
        cpu = statistics.median(x["cpu_s_per_GB"] for x in results[r])
        system = statistics.median(x["sys_s_per_GB"] for x in results[r])
        ratio = gbps / ceiling if ceiling else float("nan")
        runs = " ".join(f"{x['GB_per_s']:.2f}" for x in results[r])
        print(f"{r:<10} {gbps:6.2f} {cpu:9.2f} {system:6.2f} {ratio:9.2f}   {runs}")
        table.append({"row": r, "GB_per_s": gbps, "cpu_s_per_GB": cpu, "x_memory": ratio,
                      "runs": results[r]})
    for x in results.get("readahead", []):
        print("readahead workers:", x.get("read_ahead"))
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
