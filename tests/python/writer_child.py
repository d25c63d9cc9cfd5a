"""Child process of test_writer.py: one rank of a libshard.Writer job.

    python writer_child.py OUT N [--mode env|torchrun] [--slow SECONDS]

Writes the samples whose index i (0 <= i < N) satisfies i % world == rank, key "s{i:05d}",
content a function of i alone, skipping keys the output already has (a resumed run). Rank and
world size come from the environment (RANK/WORLD_SIZE, Slurm's variables) or, with
--mode torchrun, from torch.distributed (gloo). --slow sleeps between samples so that a test can
kill the process in the middle.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

import libshard


def make_sample(i: int):
    gen = torch.Generator().manual_seed(1000 + i)
    length = 3 + (i * 7) % 29
    return {
        "input_ids": torch.randint(0, 32000, (length,), generator=gen, dtype=torch.int64),
        "loss_mask": torch.randint(0, 2, (length,), generator=gen, dtype=torch.int64),
        "hidden_state": torch.randn(1, length, 64, generator=gen).to(torch.bfloat16),
        "aux_hidden_state": torch.randn(1, length, 192, generator=gen).to(torch.bfloat16),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("n", type=int)
    ap.add_argument("--mode", default="env", choices=["env", "torchrun"])
    ap.add_argument("--slow", type=float, default=0.0)
    ap.add_argument("--compress", default=None)
    args = ap.parse_args()
    if args.mode == "torchrun":
        import torch.distributed as dist
        dist.init_process_group("gloo")
    # Small shards and frequent journal checkpoints: a kill lands between many durable points.
    with libshard.Writer(args.out, shard_size="256KiB", journal_every="64KiB",
                         compress=args.compress, threads=2, queue_size="256KiB") as w:
        for i in range(w.rank, args.n, w.world_size):
            key = f"s{i:05d}"
            if w.has(key):
                continue
            w.write(make_sample(i), key=key)
            if args.slow and i < w.world_size * 2:
                print("writing", flush=True)  # tells a killing test that writes have begun
            if args.slow:
                time.sleep(args.slow)
    print(f"rank {w.rank}/{w.world_size} done joined={getattr(w, 'joined', None)}", flush=True)
    if args.mode == "torchrun":
        import torch.distributed as dist
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
