#!/usr/bin/env python3
"""Writes an EAGLE-3-like directory of per-sample ``torch.save`` files, as SpecForge does.

Layout: ``OUT/rows_{g}-{g+G}/data_{i}.ckpt`` (``.ckpt.gz`` with ``--gzip``), each a dict
``input_ids`` int64 [L], ``loss_mask`` int64 [L], ``aux_hidden_state`` bf16 [1, L, 3H],
``hidden_state`` bf16 [1, L, H], with L drawn per sample from [--min-len, --max-len].

The hidden states are smooth functions of the token ids plus noise, so a small draft head can
actually learn to predict ``hidden_state`` from ``aux_hidden_state`` (examples/train_eagle3.py).
"""
import argparse
import gzip
import os
import sys

import torch


def make_sample(idx: int, length: int, hidden: int, vocab: int, gen: torch.Generator) -> dict:
    input_ids = torch.randint(0, vocab, (length,), generator=gen, dtype=torch.int64)
    loss_mask = torch.zeros(length, dtype=torch.int64)
    loss_mask[length // 3:] = 1  # the "assistant" part of the conversation
    # A fixed random embedding per token, shared by all samples (seeded by vocab/hidden only).
    emb_gen = torch.Generator().manual_seed(1234)
    emb = torch.randn(vocab, hidden, generator=emb_gen)
    base = emb[input_ids]  # [L, H]
    aux = torch.cat([base * s for s in (0.5, 1.0, 1.5)], dim=-1)
    aux = aux + 0.05 * torch.randn(aux.shape, generator=gen)
    nxt = torch.roll(base, shifts=-1, dims=0)
    hs = torch.tanh(base + 0.5 * nxt) + 0.01 * torch.randn(base.shape, generator=gen)
    return {
        "input_ids": input_ids,
        "loss_mask": loss_mask,
        "aux_hidden_state": aux.to(torch.bfloat16).unsqueeze(0).contiguous(),
        "hidden_state": hs.to(torch.bfloat16).unsqueeze(0).contiguous(),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="output directory")
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256, help="H (real targets: 2048..8192)")
    p.add_argument("--min-len", type=int, default=128)
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--group", type=int, default=2000, help="files per rows_* directory")
    p.add_argument("--gzip", action="store_true", help="write .ckpt.gz like SpecForge --compress")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)

    gen = torch.Generator().manual_seed(args.seed)
    total = 0
    for i in range(args.samples):
        g = (i // args.group) * args.group
        d = os.path.join(args.out, f"rows_{g}-{g + args.group}")
        os.makedirs(d, exist_ok=True)
        length = int(torch.randint(args.min_len, args.max_len + 1, (1,), generator=gen))
        sample = make_sample(i, length, args.hidden, args.vocab, gen)
        path = os.path.join(d, f"data_{i}.ckpt" + (".gz" if args.gzip else ""))
        if args.gzip:
            with gzip.open(path, "wb", compresslevel=1) as f:
                torch.save(sample, f)
        else:
            torch.save(sample, path)
        total += os.path.getsize(path)
    if not args.quiet:
        print(f"wrote {args.samples} samples, {total / 1e6:.1f} MB, to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
