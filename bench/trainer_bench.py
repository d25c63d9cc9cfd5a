"""Trainer data paths, native reader vs libshard (issue 23): the share of each step spent waiting
for data, and GB/s, cold cache; and the time to the first batch on many samples.

Run with the trainers' environment (scripts/trainers_env.sh) and a libshard build on PYTHONPATH:

    PYTHONPATH=build/python .venv-trainers/bin/python bench/trainer_bench.py \\
        --dir /var/tmp/trainer_bench --gb 4 --step-ms 20 --first-step-samples 100000

Per trainer (the ones installed), on EAGLE-3-like data in its native format (H=4096 bf16,
S=512..2048 tokens; `--hidden`, `--min-len`, `--max-len`) packed with `libshard pack`:

- SpecForge: its own FeatureDataLoader (thread pool, `--workers`), sharding, normalizer and
  collate over LocalFeatureStore + OfflineManifestReader refs, and over libshard.specforge;
- ModelOpt: a torch DataLoader (`--workers` processes) with EagleOfflineDataCollator over
  OfflineSupervisedDataset, and over libshard.modelopt.OfflineDataset.
(speculators is not measured here yet.)

Each "step" takes the next batch (the wait is timed) and then holds the CPU free for `--step-ms`
(a GPU step: the draft's compute is the accelerator's, not the host's). Reported: data wait as a
share of the step time, and the hidden-state bytes served per second of wall time. Page cache
dropped before each run (root; else the figures are warm and say so).

Time to first batch (`--first-step-samples`, SpecForge): the startup a SpecForge run does before
step 1 without `model.vocab_mapping_path` (list the files, count the vocabulary from every
file, then the first batch), vs libshard's (refs from the index, the count from input_ids and
loss_mask, the first batch).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402


def _cli() -> str:
    env = os.environ.get("LIBSHARD_CLI")
    if env:
        return env
    found = shutil.which("libshard")
    if found:
        return found
    repo = Path(__file__).resolve().parents[1]
    cands = sorted(repo.glob("build*/converters/libshard"), key=os.path.getmtime)
    if not cands:
        raise SystemExit("no libshard command: build it or set LIBSHARD_CLI")
    return str(cands[-1])


def pack(src: Path, out: Path) -> float:
    if (out / "manifest.json").exists():
        return 0.0
    t0 = time.perf_counter()
    subprocess.run([_cli(), "pack", str(src), "-o", str(out), "-q"], check=True)
    return time.perf_counter() - t0


def lengths_for(total_bytes: float, hidden: int, lo: int, hi: int, per_token: float):
    g = torch.Generator().manual_seed(0)
    out, acc = [], 0.0
    while acc < total_bytes:
        s = int(torch.randint(lo, hi + 1, (1,), generator=g))
        out.append(s)
        acc += s * per_token
    return out


def timed_steps(batches, step_s: float, bytes_of) -> dict:
    wait = total = 0.0
    served = 0
    steps = 0
    t_start = time.perf_counter()
    it = iter(batches)
    while True:
        t0 = time.perf_counter()
        try:
            b = next(it)
        except StopIteration:
            break
        t1 = time.perf_counter()
        served += bytes_of(b)
        time.sleep(step_s)
        wait += t1 - t0
        total += time.perf_counter() - t0
        steps += 1
    wall = time.perf_counter() - t_start
    return {"steps": steps, "data_wait_share": wait / total if total else 0.0,
            "wait_per_step_ms": 1000 * wait / max(1, steps), "GB_per_s": served / wall / 1e9,
            "wall_s": wall}


def _tensor_bytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size() if obj.is_floating_point() else 0
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


# -- SpecForge ------------------------------------------------------------------------------
def specforge_data(root: Path, lengths, hidden: int) -> Path:
    src = root / "specforge"
    if (src / "done").exists():
        return src
    g = torch.Generator().manual_seed(1)
    for idx, s in enumerate(lengths):
        grp = (idx // 2000) * 2000
        d = src / f"rows_{grp}-{grp + 2000}"
        d.mkdir(parents=True, exist_ok=True)
        torch.save({"input_ids": torch.randint(0, 32000, (s,), generator=g),
                    "loss_mask": torch.ones(s, dtype=torch.long),
                    "aux_hidden_state": torch.randn(1, s, 3 * hidden, generator=g).bfloat16(),
                    "hidden_state": torch.randn(1, s, hidden, generator=g).bfloat16()},
                   d / f"data_{idx}.ckpt")
    (src / "done").touch()
    return src


def bench_specforge(src: Path, packed: Path, args) -> dict:
    import libshard.specforge as ls
    from specforge import launch as sf_launch
    from specforge.algorithms.builtin import builtin_algorithm_registry
    from specforge.runtime.data_plane import FeatureDataLoader, LocalFeatureStore
    from specforge.runtime.data_plane.offline_reader import OfflineManifestReader

    algorithm = builtin_algorithm_registry().resolve("eagle3")
    collate, normalize = sf_launch._offline_io(algorithm, "text", args.max_len, ttt_length=7,
                                               use_usp_preprocess=False)
    out = {}
    for name in ("native", "libshard"):
        if name == "native":
            store, refs = LocalFeatureStore("b"), OfflineManifestReader(str(src)).read()
        else:
            store, refs = ls.FeatureStore(packed), ls.refs(packed)
        refs = sf_launch._shard_offline_refs(refs, use_usp_preprocess=False, seed=0, epoch=0,
                                             dp_rank=0, dp_size=1)
        loader = FeatureDataLoader(store, refs=refs, batch_size=args.batch_size,
                                   collate_fn=collate, per_sample_transform=normalize,
                                   strategy="eagle3", ack=False, num_workers=args.workers)
        cold = benchlib.drop_caches()
        r = timed_steps(loader, args.step_ms / 1000, lambda b: _tensor_bytes(b.tensors))
        r["cold_cache"] = cold
        out[name] = r
    return out


def first_step_specforge(root: Path, n: int, args) -> dict:
    """Startup to the first batch on n small samples (S=64, H=--first-step-hidden)."""
    import libshard.specforge as ls
    from specforge import launch as sf_launch
    from specforge.algorithms.builtin import builtin_algorithm_registry
    from specforge.runtime.data_plane import FeatureDataLoader, LocalFeatureStore
    from specforge.runtime.data_plane.offline_reader import OfflineManifestReader
    from specforge.training import vocab_mapping

    src = specforge_data(root / f"first_{n}", [64] * n, args.first_step_hidden)
    packed = root / f"first_{n}.libshard"
    pack(src, packed)
    algorithm = builtin_algorithm_registry().resolve("eagle3")
    collate, normalize = sf_launch._offline_io(algorithm, "text", 2048, ttt_length=7,
                                               use_usp_preprocess=False)
    out = {}
    for name in ("native", "libshard"):
        cold = benchlib.drop_caches()
        t0 = time.perf_counter()
        if name == "native":
            refs = OfflineManifestReader(str(src)).read()
            vocab_mapping.count_effective_feature_tokens(str(src), max_length=2048)
            store = LocalFeatureStore("f")
        else:
            refs = ls.refs(packed)
            ls.count_effective_feature_tokens(packed, max_length=2048)
            store = ls.FeatureStore(packed)
        refs = sf_launch._shard_offline_refs(refs, use_usp_preprocess=False, seed=0, epoch=0,
                                             dp_rank=0, dp_size=1)
        loader = FeatureDataLoader(store, refs=refs, batch_size=args.batch_size,
                                   collate_fn=collate, per_sample_transform=normalize,
                                   strategy="eagle3", ack=False, num_workers=args.workers)
        next(iter(loader))
        out[name] = {"first_batch_s": time.perf_counter() - t0, "cold_cache": cold}
    out["speedup"] = out["native"]["first_batch_s"] / out["libshard"]["first_batch_s"]
    return out


# -- ModelOpt -------------------------------------------------------------------------------
def modelopt_data(root: Path, lengths, hidden: int) -> Path:
    src = root / "modelopt"
    if (src / "done").exists():
        return src
    g = torch.Generator().manual_seed(2)
    src.mkdir(parents=True, exist_ok=True)
    for i, s in enumerate(lengths):
        torch.save({"input_ids": torch.randint(0, 32000, (s,), generator=g),
                    "hidden_states": torch.randn(s, hidden, generator=g).bfloat16(),
                    "aux_hidden_states": torch.randn(s, 3 * hidden, generator=g).bfloat16(),
                    "conversation_id": i}, src / f"{i}.pt")
    (src / "done").touch()
    return src


def bench_modelopt(src: Path, packed: Path, args) -> dict:
    import libshard.modelopt as lm
    from modelopt.torch.speculative.eagle.utils import (EagleOfflineDataCollator,
                                                        OfflineSupervisedDataset)

    mine = lm.OfflineDataset(packed)
    native = OfflineSupervisedDataset([str(src / f) for f in mine.dumped_files])
    out = {}
    for name, ds in (("native", native), ("libshard", mine)):
        loader = torch.utils.data.DataLoader(
            ds, batch_size=args.batch_size, shuffle=True,
            generator=torch.Generator().manual_seed(0),
            collate_fn=EagleOfflineDataCollator(train_len=args.max_len),
            num_workers=args.workers, prefetch_factor=2 if args.workers else None)
        cold = benchlib.drop_caches()
        r = timed_steps(loader, args.step_ms / 1000, _tensor_bytes)
        r["cold_cache"] = cold
        out[name] = r
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default="/var/tmp/trainer_bench")
    p.add_argument("--gb", type=float, default=4.0, help="hidden-state bytes per trainer")
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--min-len", type=int, default=512)
    p.add_argument("--max-len", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--step-ms", type=float, default=20.0)
    p.add_argument("--first-step-samples", type=int, default=100000)
    p.add_argument("--first-step-hidden", type=int, default=64)
    p.add_argument("--trainers", default="specforge,modelopt")
    p.add_argument("--keep", action="store_true", help="keep the generated data")
    args = p.parse_args()
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    per_token = 2 * 4 * args.hidden  # bf16 hidden + 3 aux
    lengths = lengths_for(args.gb * 1e9, args.hidden, args.min_len, args.max_len, per_token)
    report = {"samples": len(lengths), "GB": args.gb, "hidden": args.hidden,
              "step_ms": args.step_ms, "workers": args.workers, "batch_size": args.batch_size}
    trainers = args.trainers.split(",")
    if "specforge" in trainers:
        src = specforge_data(root, lengths, args.hidden)
        report["specforge_pack_s"] = pack(src, root / "specforge.libshard")
        report["specforge"] = bench_specforge(src, root / "specforge.libshard", args)
        print(json.dumps({"specforge": report["specforge"]}), flush=True)
        if args.first_step_samples:
            report["specforge_first_step"] = first_step_specforge(root, args.first_step_samples,
                                                                  args)
            print(json.dumps({"first_step": report["specforge_first_step"]}), flush=True)
        if not args.keep:
            shutil.rmtree(src)
    if "modelopt" in trainers:
        src = modelopt_data(root, lengths, args.hidden)
        report["modelopt_pack_s"] = pack(src, root / "modelopt.libshard")
        report["modelopt"] = bench_modelopt(src, root / "modelopt.libshard", args)
        print(json.dumps({"modelopt": report["modelopt"]}), flush=True)
        if not args.keep:
            shutil.rmtree(src)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
