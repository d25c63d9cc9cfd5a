#!/usr/bin/env python3
"""GPU-side benchmark (issue 13), run by scripts/gpu_check.sh on a machine with an NVIDIA GPU.

Two measurements, in one run, on one GPU:

1. Host-to-device bandwidth of the copies a trainer makes, for the same tensor sizes:
     pinned     torch.empty(pin_memory=True) buffers (CUDA's caching host allocator): the yardstick,
                what cudaMemcpy from page-locked memory reaches
     arena      tensors delivered by libshard.Loader from its pinned (cudaHostRegister) arena
     pageable   ordinary malloc'd host memory
   each as GB/s over the bytes of the delivered samples, timed with CUDA events; the target is
   arena >= 0.9 x pinned.

2. A training-shaped loop: every step copies a sample's hidden states to the GPU and runs a chain
   of bf16 matrix products (``--step-ms`` of GPU time). The GPU's wait share is
   1 - (GPU busy time) / (wall time), for libshard.Loader(device="cuda") and for a torch.load
   DataLoader (num_workers, pin_memory=True) over the source files. The target is < 2% for
   libshard whenever the step time exceeds bytes / min(disk, PCIe).

Prints a Markdown report and writes it to --out.

    python3 bench/gpu_bench.py --src SRC --packed DS --out gpu_figures.md
"""
from __future__ import annotations

import argparse
import glob
import os
import platform
import statistics
import sys
import time
from typing import Callable, Dict, Iterable, List

import torch

import libshard


class TorchLoadFiles(torch.utils.data.Dataset):
    def __init__(self, files: List[str]):
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        return torch.load(self.files[i], weights_only=True)


def source_files(src: str) -> List[str]:
    files = sorted(glob.glob(os.path.join(src, "**", "*.ckpt"), recursive=True))
    if not files:
        sys.exit(f"no .ckpt files under {src}")
    return files


def tensors(sample: Dict[str, object]) -> List[torch.Tensor]:
    return [v for v in sample.values() if isinstance(v, torch.Tensor)]


def timed_copies(bufs: List[torch.Tensor], dev: torch.device, repeats: int = 3) -> float:
    """GB/s of copying every buffer to the GPU (non_blocking, one stream), best of `repeats`."""
    nbytes = sum(b.numel() * b.element_size() for b in bufs)
    outs = [torch.empty(b.shape, dtype=b.dtype, device=dev) for b in bufs]
    best = 0.0
    for _ in range(repeats):
        torch.cuda.synchronize(dev)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for o, b in zip(outs, bufs):
            o.copy_(b, non_blocking=True)
        end.record()
        end.synchronize()
        best = max(best, nbytes / (start.elapsed_time(end) / 1e3) / 1e9)
    return best


def bandwidth(packed: str, dev: torch.device, max_bytes: int) -> Dict[str, float]:
    loader = libshard.Loader(packed, shuffle=False, pin_memory=True, metadata=False,
                             memory_budget=max_bytes + (256 << 20))
    arena: List[torch.Tensor] = []
    total = 0
    for s in loader:
        for t in tensors(s):
            arena.append(t)
            total += t.numel() * t.element_size()
        if total >= max_bytes:
            break
    pin_status = loader.stats()["pin_status"]
    pinned = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t) for t in arena]
    pageable = [t.clone() for t in arena]
    big = torch.empty(total, dtype=torch.uint8, pin_memory=True)
    result = {
        "bytes": total,
        "tensors": len(arena),
        "pin_status": pin_status,
        "arena": timed_copies(arena, dev),
        "pinned": timed_copies(pinned, dev),
        "pageable": timed_copies(pageable, dev),
        "pinned_one_copy": timed_copies([big], dev),
    }
    del arena, pinned, pageable, big
    loader.close()
    return result


def make_step(dev: torch.device, step_ms: float, hidden: int) -> Callable[[torch.Tensor], None]:
    """Returns a function that runs about `step_ms` of bf16 matmuls consuming the batch."""
    w = torch.randn(hidden, hidden, device=dev, dtype=torch.bfloat16) / hidden ** 0.5
    x = torch.randn(4096, hidden, device=dev, dtype=torch.bfloat16)

    def one(n: int, h: torch.Tensor) -> None:
        y = x
        for _ in range(n):
            y = torch.tanh(y @ w)
        # consume the batch so the copy is a real dependency of the step
        y[: min(4096, h.shape[-2] if h.dim() >= 2 else 1)].add_(h.reshape(-1)[:1].to(y.dtype))

    # calibrate: matmuls per step
    h0 = torch.zeros(1, 1, hidden, device=dev, dtype=torch.bfloat16)
    one(10, h0)
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    one(100, h0)
    torch.cuda.synchronize(dev)
    per = (time.perf_counter() - t0) / 100
    n = max(1, int(round(step_ms / 1e3 / per)))
    return lambda h: one(n, h)


def training_loop(name: str, batches: Iterable[Dict[str, object]], dev: torch.device,
                  step: Callable[[torch.Tensor], None], key: str, to_device: bool) -> Dict[str, float]:
    """Runs the loop; GPU busy time from per-step CUDA events; wait share = 1 - busy / wall."""
    events = []
    nbytes = 0
    steps = 0
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for batch in batches:
        h = batch[key]
        nbytes += sum(t.numel() * t.element_size() for t in tensors(batch))
        if to_device:
            h = h.to(dev, non_blocking=True)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        step(h)
        e.record()
        events.append((s, e))
        steps += 1
        del batch, h
    torch.cuda.synchronize(dev)
    wall = time.perf_counter() - t0
    busy = sum(s.elapsed_time(e) for s, e in events) / 1e3
    return {"name": name, "steps": steps, "wall": wall, "busy": busy,
            "wait_share": max(0.0, 1.0 - busy / wall), "gbps": nbytes / wall / 1e9}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", required=True, help="directory of the source .ckpt files")
    p.add_argument("--packed", required=True, help="the same files packed with libshard pack")
    p.add_argument("--out", required=True, help="where to write the Markdown report")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--copy-gb", type=float, default=2.0, help="bytes for the bandwidth test")
    p.add_argument("--step-ms", type=float, default=0.0,
                   help="GPU time per step; 0: 1.5 x bytes-per-sample / PCIe bandwidth measured")
    p.add_argument("--hidden-key", default="aux_hidden_state")
    p.add_argument("--workers", type=int, default=8, help="DataLoader workers for torch.load")
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args(argv)

    if not torch.cuda.is_available():
        sys.exit("gpu_bench: no CUDA device visible (torch.cuda.is_available() is False)")
    dev = torch.device(args.device)
    torch.cuda.init()
    lines: List[str] = []
    say = lambda s="": (print(s, flush=True), lines.append(s))  # noqa: E731

    say(f"# libshard GPU check — {torch.cuda.get_device_name(dev)}")
    say()
    say(f"- host: {platform.node()}, {os.cpu_count()} CPUs; torch {torch.__version__}, "
        f"CUDA {torch.version.cuda}; libshard {libshard.__version__}")
    files = source_files(args.src)
    src_bytes = sum(os.path.getsize(f) for f in files)
    say(f"- data: {len(files)} source files, {src_bytes / 1e9:.2f} GB; packed at {args.packed}")
    say("- page cache: warm (the files were just written; this machine's memory holds them)")
    say()

    bw = bandwidth(args.packed, dev, int(args.copy_gb * 1e9))
    say("## Host-to-device copies (same tensors, one stream, best of 3)")
    say()
    say(f"arena: {bw['pin_status']}; {bw['tensors']} tensors, {bw['bytes'] / 1e9:.2f} GB")
    say()
    say("| source memory | GB/s | vs pinned |")
    say("|---|---:|---:|")
    for k in ("pinned", "arena", "pageable"):
        say(f"| {k} | {bw[k]:.2f} | {bw[k] / bw['pinned']:.3f} |")
    say(f"| pinned, one {bw['bytes'] / 1e9:.2f} GB copy (cudaMemcpy peak) | "
        f"{bw['pinned_one_copy']:.2f} | {bw['pinned_one_copy'] / bw['pinned']:.3f} |")
    say()

    sample = torch.load(files[0], weights_only=True)
    h = sample[args.hidden_key]
    hidden = int(h.shape[-1])
    per_sample = src_bytes / len(files)
    step_ms = args.step_ms or 1.5 * per_sample / (bw["pinned"] * 1e9) * 1e3
    step = make_step(dev, step_ms, min(hidden, 8192))
    say(f"## Training-shaped loop: {step_ms:.2f} ms of bf16 matmuls per sample "
        f"({per_sample / 1e6:.1f} MB per sample), {args.epochs} epochs")
    say()
    results = []
    for epoch in range(args.epochs):
        ls = libshard.Loader(args.packed, shuffle=True, seed=epoch, device=dev, metadata=False)
        results.append(training_loop(f"libshard.Loader(device='cuda'), epoch {epoch}", ls, dev,
                                     step, args.hidden_key, to_device=False))
        ls.close()
        dl = torch.utils.data.DataLoader(TorchLoadFiles(files), batch_size=None, shuffle=True,
                                         num_workers=args.workers, pin_memory=True,
                                         persistent_workers=False, prefetch_factor=4)
        results.append(training_loop(f"torch.load DataLoader({args.workers} workers, pin_memory), "
                                     f"epoch {epoch}", dl, dev, step, args.hidden_key,
                                     to_device=True))
        del dl
    say("| reader | steps | wall s | GPU busy s | GPU waited | delivered GB/s |")
    say("|---|---:|---:|---:|---:|---:|")
    for r in results:
        say(f"| {r['name']} | {r['steps']} | {r['wall']:.2f} | {r['busy']:.2f} | "
            f"{100 * r['wait_share']:.1f}% | {r['gbps']:.2f} |")
    say()
    ours = [r["wait_share"] for r in results if r["name"].startswith("libshard")]
    say(f"libshard's GPU wait share, median over epochs: {100 * statistics.median(ours):.2f}% "
        f"(target < 2%); arena copies at {bw['arena'] / bw['pinned']:.3f} of pinned (target >= 0.9)")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
