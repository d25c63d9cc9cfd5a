#!/usr/bin/env python3
"""The measured design of a next planes layout (issue 26, lead 2): on a corpus of bf16 hidden
states (bench/make_codec_corpus.py), the average Huffman code length of today's coded plane (the
high byte, sign and exponent, less the channel base: FORMAT.md §4.3.4) against that of the
exponent coded alone with the sign stored as a bit plane, the symbols an 11-bit table lookup then
yields, and the size change. No libshard code runs: numpy over `torch.load`ed samples.

    python3 bench/codec_split_estimate.py minilm smollm2 [--corpus /var/tmp/libshard_corpus] [--files 40]
"""
from __future__ import annotations

import argparse
import glob
import heapq

import numpy as np
import torch


def huffman_bits(counts: np.ndarray) -> float:
    """Average code length of a Huffman code for `counts` (not length-limited: at ~2-3 bits a
    symbol the 11-bit limit of FORMAT.md §4.3.6 hardly binds)."""
    c = [int(x) for x in counts if x > 0]
    if len(c) <= 1:
        return 1.0
    heap = [(x, i) for i, x in enumerate(c)]
    heapq.heapify(heap)
    depth = [0] * len(c)
    members = {i: [i] for i in range(len(c))}
    nxt = len(c)
    while len(heap) > 1:
        a, ia = heapq.heappop(heap)
        b, ib = heapq.heappop(heap)
        for k in members[ia] + members[ib]:
            depth[k] += 1
        members[nxt] = members.pop(ia) + members.pop(ib)
        heapq.heappush(heap, (a + b, nxt))
        nxt += 1
    return sum(x * d for x, d in zip(c, depth)) / sum(c)


def one(corpus: str, name: str, nfiles: int) -> None:
    files = sorted(glob.glob(f"{corpus}/{name}/*/*.ckpt"))[:nfiles]
    n = 0
    bits_joint = 0.0
    bits_exp = 0.0
    for f in files:
        d = torch.load(f, weights_only=True)
        for key in ("aux_hidden_state", "hidden_state"):
            t = d[key].view(torch.int16).numpy().reshape(-1, d[key].shape[-1]).astype(np.uint16)
            hi = (t >> 8).astype(np.int32)
            exp, sign = hi & 0x7F, hi >> 7
            # The channel base of §4.3.4: rounded mean exponent, majority sign, per channel.
            base = np.round(exp.mean(0)).astype(np.int32)
            neg = (sign.mean(0) > 0.5).astype(np.int32)
            e7 = (exp - base) & 0x7F
            joint = e7 | ((sign ^ neg) << 7)
            m = joint.size
            n += m
            bits_joint += huffman_bits(np.bincount(joint.ravel(), minlength=256)) * m
            bits_exp += huffman_bits(np.bincount(e7.ravel(), minlength=128)) * m
    lj, le = bits_joint / n, bits_exp / n
    size_joint, size_split = 8 + lj, 8 + le + 1  # + the stored low byte
    print(f"{name} ({len(files)} files, {n} elements): sign+exponent coded {lj:.2f} bits "
          f"(~{11 / lj:.1f} symbols per 11-bit lookup); exponent alone {le:.2f} bits "
          f"(~{11 / le:.1f} per lookup) + 1 sign bit; stored bits per element {size_joint:.2f} -> "
          f"{size_split:.2f} ({(size_split / size_joint - 1) * 100:+.1f}%)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="+", help="corpus directories under --corpus")
    p.add_argument("--corpus", default="/var/tmp/libshard_corpus")
    p.add_argument("--files", type=int, default=40, help="samples read per corpus")
    a = p.parse_args()
    for name in a.names:
        one(a.corpus, name, a.files)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
