"""Child process of test_follow.py: a libshard.Writer writing while a test follows the dataset.

    python follow_writer_child.py OUT N [--delay S] [--commit-interval S] [--hang-after K]

Writes samples i = rank, rank + W, ... < N (rank and world size from RANK/WORLD_SIZE, else 0 of
1), key "s{i:05d}", each holding its own index (tensor "ident" and metadata "sid") so a test can
tell every served sample by its bytes, skipping keys the output already has (a resumed run).
--delay sleeps after each sample; --hang-after K stops writing after K samples of this rank and
sleeps (a writer that hangs or is killed then), printing "hanging" once they are durable.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

import libshard


def make_sample(i: int):
    gen = torch.Generator().manual_seed(7000 + i)
    length = 3 + (i * 5) % 11
    return {
        "input_ids": torch.randint(0, 1000, (length,), generator=gen, dtype=torch.int64),
        "hidden_state": torch.randn(1, length, 16, generator=gen).to(torch.bfloat16),
        "ident": torch.tensor([i], dtype=torch.int64),
        "sid": i,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("n", type=int)
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--commit-interval", type=float, default=0.05)
    ap.add_argument("--hang-after", type=int, default=-1)
    ap.add_argument("--shard-size", default="64KiB")
    args = ap.parse_args()
    with libshard.Writer(args.out, shard_size=args.shard_size, threads=2,
                         commit_interval=args.commit_interval) as w:
        written = 0
        for i in range(w.rank, args.n, w.world_size):
            key = f"s{i:05d}"
            if w.has(key):
                continue
            if written == args.hang_after:
                w.flush()  # durable and journaled: the follower sees them
                print("hanging", flush=True)
                while True:
                    time.sleep(60)
            w.write(make_sample(i), key=key)
            written += 1
            if args.delay:
                time.sleep(args.delay)
    print(f"rank {w.rank}/{w.world_size} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
