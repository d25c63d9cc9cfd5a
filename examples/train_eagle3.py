#!/usr/bin/env python3
"""A small but real EAGLE-3-style draft-head training loop on CPU, fed by ``libshard.Loader``.

The draft head sees, at position t, the target's three auxiliary hidden states (``aux_hidden_state``
[1, L, 3H]) and the embedding of the next token ``input_ids[t+1]``, and regresses the target's
hidden state at t (``hidden_state`` [1, L, H], the feature that produces token t+1) on the positions
where ``loss_mask`` is 1. Every interval it prints the loss, samples/s and the share of wall time
the loop spent waiting for data.

    # once: pack the torch.save dumps
    libshard pack SRC -o DATA                  # or: --src SRC below packs DATA when missing
    python examples/train_eagle3.py --data DATA --steps 200
    # the same data through a torch.load DataLoader(num_workers=N), for comparison
    python examples/train_eagle3.py --data DATA --src SRC --steps 200 --baseline --workers 4

The change in a training script is the data line: ``libshard.Loader(DATA, batch_size=B,
collate="pad")`` instead of ``DataLoader(FilesDataset(...), batch_size=B, num_workers=N,
collate_fn=...)``. rank/world_size come from torch.distributed or RANK/WORLD_SIZE when set.
Use ``--save-state``/``--resume-state`` to checkpoint the loader position with the model.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data

import libshard

SOURCE_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors")


class DraftHead(nn.Module):
    """fc(aux[t]) ++ embed(token[t+1]) -> MLP -> predicted hidden_state[t]."""

    def __init__(self, hidden: int, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.fc = nn.Linear(3 * hidden, hidden)
        self.embed = nn.Embedding(vocab, hidden)
        self.mlp = nn.Sequential(nn.Linear(2 * hidden, 2 * hidden), nn.SiLU(),
                                 nn.Linear(2 * hidden, hidden))

    def forward(self, aux: torch.Tensor, next_ids: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.fc(aux), self.embed(next_ids % self.vocab)], dim=-1)
        return self.mlp(x)


def step_loss(model: DraftHead, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
    """Masked MSE over positions t with t+1 inside the sample and loss_mask[t] == 1."""
    ids, mask, lengths = batch["input_ids"], batch["loss_mask"], batch["lengths"]
    aux = batch["aux_hidden_state"].float()[:, :-1]
    target = batch["hidden_state"].float()[:, :-1]
    positions = torch.arange(ids.shape[1] - 1)
    valid = (positions[None, :] + 1 < lengths[:, None]) & (mask[:, :-1] > 0)
    pred = model(aux, ids[:, 1:])
    err = F.mse_loss(pred, target, reduction="none").mean(-1)
    return (err * valid).sum() / valid.sum().clamp(min=1)


def natural_key(path: str) -> List[object]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path)]


def source_files(src: Path) -> List[Path]:
    files = [p for p in src.rglob("*")
             if p.is_file() and p.name.removesuffix(".gz").endswith(SOURCE_SUFFIXES)]
    return sorted(files, key=lambda p: natural_key(str(p.relative_to(src))))


class TorchLoadFiles(torch.utils.data.Dataset):
    """The baseline: one torch.load per sample file, as the EAGLE-3 trainers do."""

    def __init__(self, files: List[Path]) -> None:
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> Dict[str, torch.Tensor]:
        return torch.load(self.files[i], weights_only=True)


def forever(make_epoch) -> Iterator[Dict[str, torch.Tensor]]:
    while True:
        yield from make_epoch()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="packed dataset directory")
    p.add_argument("--src", help="source directory of torch.save files (packed into --data when "
                                 "--data holds no dataset; read directly with --baseline)")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--vocab", type=int, default=32000, help="embedding rows (ids are taken mod)")
    p.add_argument("--memory-budget", default="1GiB", help="libshard arena size")
    p.add_argument("--max-len", type=int, default=None, help="truncate samples to this length")
    p.add_argument("--baseline", action="store_true",
                   help="read --src with torch.load in a DataLoader instead of libshard")
    p.add_argument("--workers", type=int, default=4, help="DataLoader workers for --baseline")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--save-state", help="write the loader state (JSON) here at the end")
    p.add_argument("--resume-state", help="continue the loader from this state file")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    data = Path(args.data)
    if not (data / "manifest.json").exists():
        if not args.src:
            p.error(f"{data} holds no packed dataset; pack it first or pass --src to pack it")
        print(f"packing {args.src} -> {data}", file=sys.stderr)
        summary = libshard.pack(args.src, data)
        print(f"packed {summary['samples']} samples in {summary['seconds']:.1f}s", file=sys.stderr)
    ds = libshard.open(data)
    for name in ("input_ids", "loss_mask", "aux_hidden_state", "hidden_state"):
        if name not in ds.schema:
            p.error(f"{data} has no field {name!r} (fields: {ds.schema.names})")
    hidden = ds[0]["hidden_state"].shape[-1]
    seq_dims = ds.schema.seq_dims

    loader = None
    if args.baseline:
        if not args.src:
            p.error("--baseline reads the source files: pass --src")
        files = source_files(Path(args.src))
        dl = torch.utils.data.DataLoader(
            TorchLoadFiles(files), batch_size=args.batch_size, shuffle=True,
            num_workers=args.workers, persistent_workers=args.workers > 0,
            collate_fn=lambda s: libshard.pad_collate(s, seq_dims=seq_dims,
                                                      length_field="input_ids"))
        batches = forever(lambda: iter(dl))
        reader = f"torch.load DataLoader(num_workers={args.workers})"
    else:
        loader = libshard.Loader(ds, batch_size=args.batch_size, collate="pad", seed=args.seed,
                                 max_len=args.max_len, memory_budget=args.memory_budget)
        if args.resume_state:
            loader.load_state_dict(json.loads(Path(args.resume_state).read_text()))
        batches = forever(lambda: iter(loader))
        reader = f"libshard.Loader ({len(loader)} steps/epoch, rank {loader.rank}/{loader.world_size})"
    print(f"training a draft head (H={hidden}) for {args.steps} steps, batch {args.batch_size}, "
          f"reading with {reader}", flush=True)

    model = DraftHead(hidden, args.vocab)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    interval_start = time.perf_counter()
    wait = 0.0
    losses: List[float] = []
    samples = 0
    first_loss = None
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        batch = next(batches)
        wait += time.perf_counter() - t0
        loss = step_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        samples += batch["input_ids"].shape[0]
        first_loss = losses[0] if first_loss is None else first_loss
        if step % args.log_every == 0 or step == args.steps:
            elapsed = time.perf_counter() - interval_start
            line = (f"step {step:5d}  loss {sum(losses) / len(losses):.4f}  "
                    f"{samples / elapsed:7.1f} samples/s  data wait {100 * wait / elapsed:5.1f}%")
            if loader is not None:
                stats = loader.stats()
                line += (f"  (loader: wait share {100 * stats['wait_share']:.1f}%, "
                         f"{stats['throughput_gbps']:.2f} GB/s, {stats['engine']}"
                         f"{', O_DIRECT' if stats['direct_io'] else ''})")
            print(line, flush=True)
            interval_start, wait, losses, samples = time.perf_counter(), 0.0, [], 0
    if loader is not None and args.save_state:
        Path(args.save_state).write_text(json.dumps(loader.state_dict()))
        print(f"loader state saved to {args.save_state}", file=sys.stderr)
    print(f"first loss {first_loss:.4f}, last loss {loss.item():.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
