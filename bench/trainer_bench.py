"""Trainer data paths (issues 23 and 32): for SpecForge, ModelOpt and speculators, the trainer's
own loader over its native files, over libshard with the trainer's own collate, over libshard's
C++ batches, over the same samples already in memory (the trainer's ceiling), and
libshard.Loader alone on the same bytes. Cold cache; GB/s, CPU-s/GB and data-wait share, with no
step time and with one.

Run with the trainers' environment (scripts/trainers_env.sh) and a libshard build on PYTHONPATH,
as root (the page cache is dropped before each pass) (on a quiet machine: nothing else running):

    PYTHONPATH=build/python .venv-trainers/bin/python bench/trainer_bench.py \\
        --dir /var/tmp/trainer_bench --gb 1 --step-ms 20 --workers 2 --batch-size 4

Data: EAGLE-3-like samples in each trainer's native format (H=--hidden bf16, S=--min-len..
--max-len tokens, --gb of hidden states per trainer), packed with `libshard pack`. Every pass reads
every sample once (one epoch, seed 0, one rank) through:

  native          the trainer's loader and collate over its own files (SpecForge: its
                  FeatureDataLoader, --workers threads, over LocalFeatureStore; ModelOpt: a
                  DataLoader of --workers processes with EagleOfflineDataCollator over
                  OfflineSupervisedDataset; speculators: its _setup_dataloader, --workers spawned
                  processes, multipack sampler, CollateFn, over the file backend);
  trainer_collate the same loader and collate over libshard, as the integration serves it: each
                  batch the sampler draws announced ahead, items served from memory already
                  read (libshard.specforge.FeatureDataLoader(batches="trainer"),
                  libshard.modelopt.DataLoader(batches="trainer") over OfflineDataset,
                  libshard.speculators.read_ahead_loader over the libshard backend);
  cpp_batches     libshard's drop-in with the batches built in C++ (batches="cpp");
  in_memory       the same loader and collate over the samples already in memory (the ceiling
                  of the trainer's own collate);
  loader_alone    libshard.Loader(collate="pad", batch_size) (speculators: collate="pack" with
                  max_tokens = total_seq_len) on the same dataset.

Figures are steady state, from the first batch to the last: GB/s = the hidden-state bytes of
the samples served after the first batch / that time; CPU-s/GB = the CPU time of this process and
of its live loader processes (psutil) in that time / those bytes; data wait = the share of that
time spent waiting for the next batch (with --step-ms, each step then holds the CPU free for
that long: a GPU step). Ratios inside one run are what count (DESIGN.md).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

ROWS = ("native", "trainer_collate", "cpp_batches", "in_memory", "loader_alone")


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


def pack(src: Path, out: Path) -> None:
    if not (out / "manifest.json").exists():
        subprocess.run([_cli(), "pack", str(src), "-o", str(out), "-q"], check=True)


def lengths_for(total_bytes: float, lo: int, hi: int, per_token: float) -> List[int]:
    g = torch.Generator().manual_seed(0)
    out, acc = [], 0.0
    while acc < total_bytes:
        s = int(torch.randint(lo, hi + 1, (1,), generator=g))
        out.append(s)
        acc += s * per_token
    return out


class CpuClock:
    """CPU seconds of this process and of its loader processes (DataLoader workers): the
    children are sampled at every step (psutil), so a worker that exits at the end of the epoch
    still counts up to its last sample."""

    def __init__(self) -> None:
        self._self0 = self._self()
        self._first: Dict[int, float] = {}
        self._last: Dict[int, float] = {}
        self.sample()
        self._first = dict(self._last)

    @staticmethod
    def _self() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def sample(self) -> None:
        try:
            import psutil
        except ImportError:
            return
        for child in psutil.Process().children(recursive=True):
            try:
                t = child.cpu_times()
                self._last[child.pid] = t.user + t.system
            except psutil.Error:
                pass

    def seconds(self) -> float:
        kids = sum(v - self._first.get(pid, 0.0) for pid, v in self._last.items())
        return self._self() - self._self0 + kids


def measure(make: Callable[[], Any], step_s: float, epoch_bytes: int,
            warmup_epochs: int = 1, repeats: int = 1) -> Dict[str, Any]:
    """`repeats` cold passes over the batches of `make()`'s loader, the one of median GB/s
    reported (with every pass's GB/s); steady-state figures from the first batch on.

    `warmup_epochs` unmeasured passes over the same loader come first (no step time), as a
    trainer makes its loader once and iterates it every epoch (SpecForge's launch, the Hugging
    Face Trainer, speculators' Trainer): what a loader keeps across epochs (an arena, a
    read-ahead) is then measured as in training. They also keep the rows apart: a process's first
    touch of memory it never used costs several times more on a VM than later touches
    (docs/performance.md, "The first warm epoch after a cold one"), so without them each row's
    figure would depend on how much memory the rows before it had already touched."""
    loader = make()
    for _ in range(warmup_epochs):
        for batch in loader:
            del batch
    gc.collect()
    passes = [_cold_pass(loader, step_s, epoch_bytes) for _ in range(max(repeats, 1))]
    del loader
    gc.collect()
    ranked = sorted(passes, key=lambda r: r["GB_per_s"])
    median = dict(ranked[len(ranked) // 2])
    if len(passes) > 1:
        median["GB_per_s_passes"] = [round(r["GB_per_s"], 4) for r in passes]
    return median


def _cold_pass(loader: Any, step_s: float, epoch_bytes: int) -> Dict[str, Any]:
    """One pass over `loader` after dropping the page cache, with `step_s` of "GPU step"
    after each batch."""
    gc.collect()
    cold = benchlib.drop_caches()
    t_start = time.perf_counter()
    it = iter(loader)
    first = next(it)
    steps = 1
    del first
    t_first = time.perf_counter()
    clock = CpuClock()
    wait = 0.0
    while True:
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        wait += time.perf_counter() - t0
        del batch
        steps += 1
        clock.sample()
        if step_s:
            time.sleep(step_s)
    t_end = time.perf_counter()
    cpu = clock.seconds()
    del it
    wall = t_end - t_first
    served = epoch_bytes * (steps - 1) / steps
    return {"GB_per_s": served / wall / 1e9, "CPU_s_per_GB": cpu / (served / 1e9),
            "data_wait_share": wait / wall, "steps": steps, "steady_s": wall,
            "first_batch_s": t_first - t_start, "cold_cache": cold}


def run_rows(name: str, rows: Dict[str, Callable[[], Any]], epoch_bytes: int, args) -> dict:
    out: Dict[str, Any] = {}
    for step_ms in (0.0, args.step_ms):
        label = f"step_{step_ms:g}ms"
        out[label] = {}
        for row, make in rows.items():
            if args.rows and row not in args.rows.split(","):
                continue
            try:
                r = measure(make, step_ms / 1000, epoch_bytes, args.warmup_epochs,
                            args.repeats)
            except ValueError as e:  # e.g. batches="cpp" where this build cannot
                r = {"error": str(e)}
            out[label][row] = r
            print(json.dumps({"trainer": name, "pass": label, "row": row,
                              **{k: round(v, 4) if isinstance(v, float) else v
                                 for k, v in r.items()}}), flush=True)
        rs = out[label]
        gbps = {k: rs.get(k, {}).get("GB_per_s", float("nan")) for k in ROWS}
        out[label]["ratios"] = {
            "trainer_collate_vs_in_memory": gbps["trainer_collate"] / gbps["in_memory"],
            "cpp_vs_native": gbps["cpp_batches"] / gbps["native"],
            "cpp_vs_loader_alone": gbps["cpp_batches"] / gbps["loader_alone"],
            "cpp_CPU_s_per_GB": rs.get("cpp_batches", {}).get("CPU_s_per_GB", float("nan")),
        }
        print(json.dumps({"trainer": name, "pass": label, "ratios": out[label]["ratios"]}),
              flush=True)
    return out


def _hidden_bytes(lengths: List[int], hidden: int) -> int:
    return sum(lengths) * 4 * hidden * 2  # H + 3H (or 3 aux layers + the final one) bf16


# -- SpecForge ------------------------------------------------------------------------------
def specforge_data(root: Path, lengths: List[int], hidden: int) -> Path:
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


def specforge_rows(src: Path, packed: Path, args) -> Dict[str, Callable[[], Any]]:
    import libshard
    import libshard.specforge as ls
    from specforge import launch as sf_launch
    from specforge.algorithms.builtin import builtin_algorithm_registry
    from specforge.runtime.data_plane import FeatureDataLoader, LocalFeatureStore
    from specforge.runtime.data_plane import feature_store as sf_store
    from specforge.runtime.data_plane.offline_reader import OfflineManifestReader
    from specforge.runtime.contracts import FeatureHandle

    algorithm = builtin_algorithm_registry().resolve("eagle3")
    collate, normalize = sf_launch._offline_io(algorithm, "text", args.max_len, ttt_length=7,
                                               use_usp_preprocess=False)

    def shard(refs):
        return sf_launch._shard_offline_refs(refs, use_usp_preprocess=False, seed=0, epoch=0,
                                             dp_rank=0, dp_size=1)

    native_refs = shard(OfflineManifestReader(str(src), max_len=args.max_len).read())
    lib_refs = shard(ls.refs(packed, max_len=args.max_len))
    common = dict(batch_size=args.batch_size, collate_fn=collate, per_sample_transform=normalize,
                  strategy="eagle3", ack=False, num_workers=args.workers)

    class MemoryStore(sf_store.FeatureStore):
        """The samples already in memory: get() hands them over as a store would."""

        def __init__(self, data):
            self.data = data

        def put(self, *a, **k):
            raise NotImplementedError

        def get(self, ref, *, device="cpu", names=None):
            return self.data[ref.sample_id], FeatureHandle(ref.sample_id, 0, ref.sample_id)

        def release(self, handle, *, reason="consumed"):
            pass

        def abort(self, sample_id, *, reason="aborted"):
            pass

        def health(self):
            return {}

    local = LocalFeatureStore("preload")
    memory = {}
    for ref in native_refs:
        tensors, handle = local.get(ref)
        memory[ref.sample_id] = {k: v.clone() for k, v in tensors.items()}
        local.release(handle)
    mem_store = MemoryStore(memory)

    # One store per row for the whole run, as SpecForge's launch makes one for a training run and
    # re-iterates its loader every epoch (a store's read-ahead memory then serves every epoch).
    stores: Dict[str, Any] = {}

    def store(row: str, make: Callable[[], Any]) -> Any:
        if row not in stores:
            stores[row] = make()
        return stores[row]

    return {
        "native": lambda: FeatureDataLoader(store("native", lambda: LocalFeatureStore("b")),
                                            refs=native_refs, **common),
        "trainer_collate": lambda: ls.FeatureDataLoader(
            store("trainer_collate", lambda: ls.FeatureStore(packed)), refs=lib_refs,
            batches="trainer", **common),
        "cpp_batches": lambda: ls.FeatureDataLoader(
            store("cpp_batches", lambda: ls.FeatureStore(packed)), refs=lib_refs, batches="cpp",
            **common),
        "in_memory": lambda: FeatureDataLoader(mem_store, refs=native_refs, **common),
        "loader_alone": lambda: libshard.Loader(packed, batch_size=args.batch_size,
                                                collate="pad", seed=0, drop_last=True),
    }


def first_step_specforge(root: Path, n: int, args) -> dict:
    """Startup to SpecForge's first batch on n small samples (S=64, H=--first-step-hidden): list
    the files, count the vocabulary from every file (no model.vocab_mapping_path), the first
    batch; vs libshard's refs from the index, the count from input_ids/loss_mask, the first
    batch."""
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
            store, cls = LocalFeatureStore("f"), FeatureDataLoader
        else:
            refs = ls.refs(packed)
            ls.count_effective_feature_tokens(packed, max_length=2048)
            store, cls = ls.FeatureStore(packed), ls.FeatureDataLoader
        refs = sf_launch._shard_offline_refs(refs, use_usp_preprocess=False, seed=0, epoch=0,
                                             dp_rank=0, dp_size=1)
        loader = cls(store, refs=refs, batch_size=args.batch_size, collate_fn=collate,
                     per_sample_transform=normalize, strategy="eagle3", ack=False,
                     num_workers=args.workers)
        next(iter(loader))
        out[name] = {"first_batch_s": time.perf_counter() - t0, "cold_cache": cold}
    out["speedup"] = out["native"]["first_batch_s"] / out["libshard"]["first_batch_s"]
    return out


# -- ModelOpt -------------------------------------------------------------------------------
def modelopt_data(root: Path, lengths: List[int], hidden: int) -> Path:
    src = root / "modelopt"
    if (src / "done").exists():
        return src
    g = torch.Generator().manual_seed(2)
    src.mkdir(parents=True, exist_ok=True)
    for i, s in enumerate(lengths):
        torch.save({"input_ids": torch.randint(0, 32000, (s,), generator=g),
                    "hidden_states": torch.randn(s, hidden, generator=g).bfloat16(),
                    "aux_hidden_states": torch.randn(s, 3 * hidden, generator=g).bfloat16(),
                    "loss_mask": torch.ones(s, dtype=torch.long),
                    "conversation_id": i}, src / f"{i}.pt")
    (src / "done").touch()
    return src


def modelopt_rows(src: Path, packed: Path, args) -> Dict[str, Callable[[], Any]]:
    import libshard
    import libshard.modelopt as lm
    from modelopt.torch.speculative.eagle.utils import (EagleOfflineDataCollator,
                                                        OfflineSupervisedDataset)

    mine = lm.OfflineDataset(packed, answer_only_loss=True)
    native = OfflineSupervisedDataset([str(src / f) for f in mine.dumped_files],
                                      answer_only_loss=True)

    class InMemory(torch.utils.data.Dataset):
        def __init__(self, items):
            self.items = items

        def __len__(self):
            return len(self.items)

        def __getitem__(self, i):
            return self.items[i]

    items = []
    for i in range(len(native)):
        item = native[i]
        items.append({k: v.share_memory_() if isinstance(v, torch.Tensor) else v
                      for k, v in item.items()})
    in_memory = InMemory(items)

    def loader(ds, cls=torch.utils.data.DataLoader, **extra):
        return cls(ds, batch_size=args.batch_size,
                   sampler=torch.utils.data.RandomSampler(
                       ds, generator=torch.Generator().manual_seed(0)),
                   collate_fn=EagleOfflineDataCollator(train_len=args.max_len),
                   num_workers=args.workers, prefetch_factor=2 if args.workers else None,
                   **extra)

    return {
        "native": lambda: loader(native),
        # The integration's DataLoader with ModelOpt's collator: the sampler's batches announced to
        # each worker ahead (libshard.ReadAheadSampler), items served from memory already read.
        "trainer_collate": lambda: loader(mine, cls=lm.DataLoader, batches="trainer"),
        "cpp_batches": lambda: loader(mine, cls=lm.DataLoader, batches="cpp"),
        "in_memory": lambda: loader(in_memory),
        "loader_alone": lambda: libshard.Loader(packed, batch_size=args.batch_size,
                                                collate="pad", seed=0),
    }


# -- speculators ----------------------------------------------------------------------------
LAYERS = 3


def speculators_data(root: Path, lengths: List[int], hidden: int) -> Path:
    data = root / "speculators"
    if (data / "done").exists():
        return data
    import datasets
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(3)
    (data / "hidden_states").mkdir(parents=True, exist_ok=True)
    rows = {"input_ids": [], "loss_mask": [], "seq_len": []}
    for i, s in enumerate(lengths):
        ids = torch.randint(0, 32000, (s,), generator=g)
        rows["input_ids"].append(ids.tolist())
        rows["loss_mask"].append([1] * s)
        rows["seq_len"].append(s)
        save_file({"hidden_states": torch.randn(s, LAYERS + 1, hidden, generator=g).bfloat16(),
                   "token_ids": ids}, str(data / "hidden_states" / f"hs_{i}.safetensors"))
    ds = datasets.Dataset.from_dict(rows)
    ds.set_format("torch")
    ds.save_to_disk(str(data))
    (data / "done").touch()
    return data


try:  # speculators' transfer interface, when installed (spawned workers unpickle this class)
    from hs_connectors import HiddenStatesTransfer as _Transfer
except ImportError:  # pragma: no cover - the bench then skips speculators
    _Transfer = object


class MemoryTransfer(_Transfer):  # type: ignore[misc, valid-type]
    """The hidden states already in (shared) memory: spawned DataLoader workers receive the
    tensors' shared-memory handles, not their bytes."""

    def __init__(self, samples):
        self.samples = samples

    def get_cached(self, idx):
        return self.samples.get(idx)

    def get_generated(self, params):
        raise NotImplementedError

    def delete(self, handle):
        pass


def speculators_rows(data: Path, packed: Path, args) -> Dict[str, Callable[[], Any]]:
    import libshard
    import libshard.speculators as lsp
    from hs_connectors import FileTransfer
    from speculators.models.eagle3.data import shift_batch
    from speculators.train import dataloader as sp_loader
    from speculators.train.data import ArrowDataset

    total = args.total_seq_len

    files = FileTransfer(data / "hidden_states")
    n = len(ArrowDataset(total, str(data), transfer=files, on_missing="raise"))
    memory = {}
    for i in range(n):
        memory[i] = {k: v.share_memory_() for k, v in files.get_cached(i).items()}

    def dataset(transfer):
        return ArrowDataset(total, str(data), transfer=transfer, on_missing="raise")

    def loader(ds):
        return sp_loader._setup_dataloader(ds, total, args.hidden, num_workers=args.workers,
                                           num_target_layers=LAYERS,
                                           prefetch_factor=2 if args.workers else None,
                                           preprocess=shift_batch, seed=0)

    def cpp():
        ds = dataset(lsp.LibshardTransfer(packed))
        native = sp_loader._setup_dataloader(ds, total, args.hidden, num_workers=0,
                                             num_target_layers=LAYERS, prefetch_factor=None,
                                             preprocess=shift_batch, seed=0)
        return lsp.train_loader(ds, native.batch_sampler, native.collate_fn, batches="cpp")

    return {
        "native": lambda: loader(dataset(files)),
        # speculators' DataLoader and collate, its multipack batches announced to each worker
        # ahead (what `python -m libshard.speculators train` falls back to).
        "trainer_collate": lambda: lsp.read_ahead_loader(
            loader(dataset(lsp.LibshardTransfer(packed)))),
        "cpp_batches": cpp,
        "in_memory": lambda: loader(dataset(MemoryTransfer(memory))),
        "loader_alone": lambda: libshard.Loader(packed, max_tokens=total, collate="pack",
                                                seed=0),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default="/var/tmp/trainer_bench")
    p.add_argument("--gb", type=float, default=1.0, help="hidden-state bytes per trainer")
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--min-len", type=int, default=512)
    p.add_argument("--max-len", type=int, default=2048,
                   help="SpecForge max_len and ModelOpt train_len")
    p.add_argument("--total-seq-len", type=int, default=8192, help="speculators' packing budget")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--step-ms", type=float, default=20.0)
    p.add_argument("--trainers", default="specforge,modelopt,speculators")
    p.add_argument("--rows", default="", help="measure only these rows (comma-separated; "
                                               "default all: " + ",".join(ROWS) + ")")
    p.add_argument("--warmup-epochs", type=int, default=1,
                   help="unmeasured passes before each measured one (the first touch of fresh "
                        "memory, not the data path, would otherwise weigh on the first rows)")
    p.add_argument("--repeats", type=int, default=1,
                   help="cold passes measured per row; the pass of median GB/s is reported "
                        "(each row is 12-18 steps, so one pass is within ~20%%)")
    p.add_argument("--first-step-samples", type=int, default=0,
                   help="SpecForge's startup to the first batch on this many small samples")
    p.add_argument("--first-step-hidden", type=int, default=16)
    p.add_argument("--keep", action="store_true", help="keep the generated data")
    p.add_argument("--prepare-only", action="store_true",
                   help="write and pack the data, measure nothing (then the measuring runs "
                        "with --keep, on a quiet machine)")
    args = p.parse_args()
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    per_token = 2 * 4 * args.hidden
    lengths = lengths_for(args.gb * 1e9, args.min_len, args.max_len, per_token)
    epoch_bytes = _hidden_bytes(lengths, args.hidden)
    report: Dict[str, Any] = {"samples": len(lengths), "GB": epoch_bytes / 1e9,
                              "hidden": args.hidden, "step_ms": args.step_ms,
                              "workers": args.workers, "batch_size": args.batch_size,
                              "cores": os.cpu_count(), "warmup_epochs": args.warmup_epochs,
                              "repeats": args.repeats}
    makers = {"specforge": (specforge_data, specforge_rows),
              "modelopt": (modelopt_data, modelopt_rows),
              "speculators": (speculators_data, speculators_rows)}
    for name in args.trainers.split(","):
        make_data, make_rows = makers[name]
        src = make_data(root, lengths, args.hidden)
        packed = root / f"{name}.libshard"
        pack(src / "hidden_states" if name == "speculators" else src, packed)
        if args.prepare_only:
            continue
        rows = make_rows(src, packed, args)
        report[name] = run_rows(name, rows, epoch_bytes, args)
        del rows
        gc.collect()
        if not args.keep:
            shutil.rmtree(src)
            shutil.rmtree(packed)
    if args.first_step_samples:
        report["specforge_first_step"] = first_step_specforge(root, args.first_step_samples,
                                                              args)
        print(json.dumps({"first_step": report["specforge_first_step"]}), flush=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
