#!/usr/bin/env python3
"""A hidden-state generator for bench/capture_bench.py: N EAGLE-3-like samples written one file
each with ``torch.save``, as SpecForge's prepare_hidden_states.py writes them, at a fixed rate
(``--rate`` samples/s) or as fast as a simulated forward pass allows (``--busy-ms`` of CPU work
on one thread per sample, the share of a GPU-driving process's CPU).

Prints one JSON line at the end: ``first_saved`` (the time.time() when the first sample's save
returned), ``loop_s`` (first sample started to last save returned), ``samples``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch


def busy(ms: float, a: torch.Tensor) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        a @ a


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--output-dir", required=True)
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--rate", type=float, default=0.0, help="samples/s (0: as fast as it can)")
    p.add_argument("--busy-ms", type=float, default=0.0, help="CPU work per sample")
    args = p.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    # A small pool of distinct samples, made before the clock starts (not the measured work).
    pool = []
    for i in range(4):
        n = args.seq - 64 * i
        pool.append({"input_ids": torch.randint(0, 32000, (n,), generator=gen),
                     "loss_mask": torch.ones(n, dtype=torch.int64),
                     "hidden_state": torch.randn(1, n, args.hidden, generator=gen).bfloat16(),
                     "aux_hidden_state": torch.randn(1, n, 3 * args.hidden,
                                                     generator=gen).bfloat16()})
    work = torch.randn(64, 64)
    first_saved = None
    t0 = time.time()
    for i in range(args.samples):
        if args.rate:
            delay = t0 + i / args.rate - time.time()
            if delay > 0:
                time.sleep(delay)
        if args.busy_ms:
            busy(args.busy_ms, work)
        d = os.path.join(args.output_dir, f"rows_{i // 2000 * 2000}-{i // 2000 * 2000 + 2000}")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"data_{i}.ckpt")
        if os.path.exists(path):
            continue
        torch.save(pool[i % len(pool)], path)
        if first_saved is None:
            first_saved = time.time()
    print(json.dumps({"first_saved": first_saved, "loop_s": time.time() - t0,
                      "samples": args.samples}), flush=True)


if __name__ == "__main__":
    main()
