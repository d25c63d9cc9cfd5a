#!/usr/bin/env python3
"""Other projects' caches packed by libshard (issue 37), measured on the same data: REAL hidden
states (bench/make_codec_corpus.py) laid out as DeepSpec's target cache, then

  1. packing speed: `libshard pack CACHE` (raw and --compress auto) against a plain copy of the
     cache (`cp -r` + sync), page cache dropped before each;
  2. stored size: the cache (bf16), DeepSpec's own fp8 cache (hidden_dtype float8_e4m3fn: a plain
     cast, no scale), and libshard's raw, --compress auto, --store-dtype float8_e4m3fn (a scale per
     token) and both;
  3. fp8 error on the hidden states, DeepSpec's unscaled cast against libshard's per-token scaled
     fp8: relative RMS error, mean and max relative error over non-zero values, values flushed to
     zero, values that became non-finite;
  4. loading, cold cache, one shuffled epoch: DeepSpec's reader (bench/deepspec_reader.py, its
     mmap + np.frombuffer().copy() reader reimplemented per its code) in a DataLoader with
     num_workers 0 and 2 (its default is 4; this machine has 2 cores), against libshard.Loader on
     the raw and the --compress auto datasets: GB/s of hidden states served and CPU-s per GB
     (process and workers).

    python3 bench/make_codec_corpus.py /var/tmp/corpus --models smollm2 --gb 0.3
    python3 bench/cache_bench.py /var/tmp/corpus/smollm2 --work /var/tmp/cache_bench

Run as root (it drops the page cache). Needs the libshard command (LIBSHARD_CLI or build*/) and
the Python package (PYTHONPATH=build/python).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "python"))
from benchlib import drop_caches  # noqa: E402
from cache_writers import DEEPSPEC_RECORD  # noqa: E402
from deepspec_reader import DeepSpecCacheDataset  # noqa: E402


def cpu_seconds() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def cli() -> str:
    env = os.environ.get("LIBSHARD_CLI")
    if env:
        return env
    found = sorted(glob.glob(str(HERE.parent / "build*" / "converters" / "libshard")),
                   key=os.path.getmtime)
    if not found:
        sys.exit("no libshard command: build it or set LIBSHARD_CLI")
    return found[-1]


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def bits(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def write_deepspec(corpus: Path, out: Path, fp8: bool) -> int:
    """The corpus as DeepSpec's prepare_target_cache lays a single rank's cache out (one shard:
    its default max_shard_bytes is 64 GiB): input_ids int32, attention_mask and loss_mask uint8,
    target_hidden_states = the three aux layers [L, 3H], target_last_hidden_states [L, H]."""
    files = sorted(corpus.rglob("*.ckpt"), key=lambda p: int(p.stem.split("_")[-1]))
    out.mkdir(parents=True)
    dt = torch.float8_e4m3fn if fp8 else torch.bfloat16
    hidden = None
    with open(out / "shard-00000.bin", "wb") as shard, open(out / "samples.idx", "wb") as idx:
        pos = 0
        for i, f in enumerate(files):
            d = torch.load(f, weights_only=True)
            L = d["input_ids"].numel()
            hidden = d["hidden_state"].shape[-1]
            parts = [bits(d["input_ids"].to(torch.int32)), bytes([1]) * L,
                     bits(d["loss_mask"].to(torch.uint8)),
                     bits(d["aux_hidden_state"][0].to(dt)), bits(d["hidden_state"][0].to(dt))]
            offsets = []
            for p in parts:
                offsets.append(pos)
                shard.write(p)
                pos += len(p)
            idx.write(DEEPSPEC_RECORD.pack(i, 0, L, *offsets))
    manifest = {"version": 2, "num_samples": len(files), "num_shards": 1,
                "target_layer_ids": [1, 14, 26],
                "hidden_dtype": "float8_e4m3fn" if fp8 else "bfloat16", "token_dtype": "int32",
                "mask_dtype": "uint8", "index_record_size": DEEPSPEC_RECORD.size,
                "hidden_size": hidden, "shards": [{"shard_id": 0, "file_name": "shard-00000.bin"}],
                "target_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct"}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return len(files)


def timed(fn):
    drop_caches()
    t0, c0 = time.perf_counter(), cpu_seconds()
    fn()
    return time.perf_counter() - t0, cpu_seconds() - c0


def fp8_errors(cache: Path, deepspec_fp8: Path, libshard_fp8: Path) -> dict:
    import libshard
    ours = libshard.open(str(libshard_fp8))
    theirs = DeepSpecCacheDataset(str(deepspec_fp8))
    ref = DeepSpecCacheDataset(str(cache))
    acc = {k: {"sq_err": 0.0, "sq_ref": 0.0, "rel_sum": 0.0, "rel_max": 0.0, "n": 0, "nz": 0,
               "zeroed": 0, "nonfinite": 0, "above": 0} for k in ("deepspec fp8 (no scale)",
                                                      "libshard fp8 (scale per token)")}
    for i in range(len(ref)):
        want = ref[i]
        got = {"deepspec fp8 (no scale)": theirs[i], "libshard fp8 (scale per token)": ours[i]}
        for name, item in got.items():
            a = acc[name]
            for k in ("target_hidden_states", "target_last_hidden_states"):
                x = want[k].float()
                y = item[k].to(torch.bfloat16).float()
                fin = torch.isfinite(y)
                a["nonfinite"] += int((~fin).sum())
                d = torch.where(fin, y - x, torch.zeros_like(x))
                a["sq_err"] += float((d * d).sum())
                a["sq_ref"] += float((x * x).sum())
                nz = x != 0
                rel = (d.abs() / x.abs().clamp_min(1e-30))[nz & fin]
                a["rel_sum"] += float(rel.sum())
                a["rel_max"] = max(a["rel_max"], float(rel.max()) if rel.numel() else 0.0)
                a["n"] += x.numel()
                a["nz"] += int((nz & fin).sum())
                a["zeroed"] += int((nz & (y == 0)).sum())
                a["above"] += int((x.abs() > 448).sum())
    return {k: {"rel_rms": (a["sq_err"] / a["sq_ref"]) ** 0.5, "rel_mean": a["rel_sum"] / a["nz"],
                "rel_max": a["rel_max"], "zeroed": a["zeroed"] / a["n"],
                "nonfinite": a["nonfinite"] / a["n"], "above": a["above"] / a["n"]}
            for k, a in acc.items()}


def load_deepspec(cache: Path, workers: int) -> tuple:
    ds = DeepSpecCacheDataset(str(cache))
    loader = torch.utils.data.DataLoader(ds, batch_size=None, shuffle=True, num_workers=workers,
                                         generator=torch.Generator().manual_seed(0))
    served = [0]

    def run():
        for item in loader:
            served[0] += item["target_hidden_states"].nbytes + item["target_last_hidden_states"].nbytes

    wall, cpu = timed(run)
    return served[0], wall, cpu


def load_libshard(path: Path) -> tuple:
    import libshard
    served = [0]

    def run():
        loader = libshard.Loader(str(path), shuffle=True, seed=0, memory_budget="512MiB")
        for item in loader:
            served[0] += item["target_hidden_states"].nbytes + item["target_last_hidden_states"].nbytes
        loader.close()

    wall, cpu = timed(run)
    return served[0], wall, cpu


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("corpus", type=Path, help="a model's folder of make_codec_corpus.py")
    p.add_argument("--work", type=Path, default=Path("/var/tmp/libshard_cache_bench"))
    args = p.parse_args(argv)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    lib = cli()
    cache, cache_fp8 = args.work / "deepspec", args.work / "deepspec_fp8"
    n = write_deepspec(args.corpus, cache, fp8=False)
    write_deepspec(args.corpus, cache_fp8, fp8=True)
    gb_in = du(cache) / 1e9
    print(f"{args.corpus}: {n} samples, DeepSpec cache {gb_in:.3f} GB", flush=True)

    def pack(out: str, *flags: str):
        return timed(lambda: subprocess.run([lib, "pack", str(cache), "-o", str(args.work / out),
                                             "-q", *flags], check=True))

    rows = []
    wall, cpu = timed(lambda: (subprocess.run(["cp", "-r", str(cache), str(args.work / "copy")],
                                              check=True), subprocess.run(["sync"])))
    rows.append(("cp -r + sync (plain copy)", wall, cpu))
    for out, flags in (("raw", ()), ("auto", ("--compress", "auto")),
                       ("fp8", ("--store-dtype", "float8_e4m3fn")),
                       ("auto_fp8", ("--compress", "auto", "--store-dtype", "float8_e4m3fn"))):
        wall, cpu = pack(out, *flags)
        rows.append((f"libshard pack {' '.join(flags) or '(raw)'}", wall, cpu))
    print("\npacking (page cache dropped before each; GB of cache read)")
    print(f"{'':56} {'s':>7} {'GB/s':>7} {'vs copy':>8} {'CPU-s/GB':>9}")
    for label, wall, cpu in rows:
        print(f"{label:56} {wall:7.2f} {gb_in / wall:7.2f} {rows[0][1] / wall:8.2f} "
              f"{cpu / gb_in:9.2f}")

    print("\nstored size")
    sizes = [("DeepSpec cache, bf16", du(cache)), ("DeepSpec cache, fp8 (no scale)", du(cache_fp8))]
    for out in ("raw", "auto", "fp8", "auto_fp8"):
        sizes.append((f"libshard {out}", du(args.work / out)))
    for label, b in sizes:
        print(f"{label:56} {b / 1e9:7.3f} GB  {sizes[0][1] / b:5.2f}x smaller than the bf16 cache")

    print("\nfp8 error on the hidden states (target_hidden_states + target_last_hidden_states)")
    errs = fp8_errors(cache, cache_fp8, args.work / "fp8")
    print(f"{'':34} {'rel RMS':>9} {'mean rel':>9} {'max rel':>9} {'to zero':>9} {'non-finite':>10}")
    for k, e in errs.items():
        print(f"{k:34} {e['rel_rms']:9.4f} {e['rel_mean']:9.4f} {e['rel_max']:9.3g} "
              f"{e['zeroed']:9.2%} {e['nonfinite']:10.2%}")
    print(f"values of magnitude above 448 (fp8 e4m3's largest): "
          f"{next(iter(errs.values()))['above']:.4%}")

    print("\nloading, cold cache, one shuffled epoch (GB of hidden states served)")
    loads = [("DeepSpec reader, DataLoader(0)", load_deepspec(cache, 0)),
             ("DeepSpec reader, DataLoader(2)", load_deepspec(cache, 2)),
             ("libshard.Loader, raw", load_libshard(args.work / "raw")),
             ("libshard.Loader, --compress auto", load_libshard(args.work / "auto"))]
    base = loads[0][1][0] / 1e9 / loads[0][1][1]
    for label, (served, wall, cpu) in loads:
        gb = served / 1e9
        print(f"{label:56} {gb / wall:7.2f} GB/s {gb / wall / base:6.2f}x {cpu / gb:7.3f} CPU-s/GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
