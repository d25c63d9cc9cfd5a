#!/usr/bin/env python3
"""Benchmark ``python -m libshard.capture`` against today's path (issue 34, "Measured").

    PYTHONPATH=build/python LIBSHARD_CLI=build/converters/libshard \\
        python3 bench/capture_bench.py --samples 48 --rate 12

The generator is bench/capture_generator.py: N EAGLE-3-like samples (``--seq`` x ``--hidden``,
bf16), one ``torch.save`` file each, at ``--rate`` samples/s (``--busy-ms``: CPU work per sample
instead of a fixed rate). In one run, alternating, ``--rounds`` times:

  dump + pack   today: the generator writes its files; then ``libshard pack`` (the CLI) makes the
                dataset; then a Loader takes its first batch.
  capture       the same generator under ``python -m libshard.capture``; a Loader takes its first
                batch once the capture has committed.
  capture+follow the same capture, with ``Loader(DATASET, follow=True)`` (in this process)
                started with it: its first batch comes while the generator still writes, once
                the Writer has journaled the first sample (within its commit interval, 5 s by
                default; ``--capture-arg=--commit-interval --capture-arg=1`` for another).

Reported per path: the generator's own loop time and samples/s (capture / dump: target >= 0.95),
the time from the first sample saved to the first batch (target with follow: under one commit
interval + 1 s, against the whole dump), and the peak disk of the dump directory and the dataset
together, sampled every 20 ms (target: the dataset's size, against dump + dataset). The machines
are shared and noisy: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
GEN = str(HERE / "capture_generator.py")


def disk_bytes(*roots: Path) -> int:
    """Blocks in use by the files under ``roots`` (a hard-linked file counted once)."""
    seen = set()
    total = 0
    for root in roots:
        for dirpath, _, files in os.walk(root):
            for f in files:
                try:
                    st = os.lstat(os.path.join(dirpath, f))
                except FileNotFoundError:
                    continue
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


class PeakDisk:
    """Samples disk_bytes(roots) every 20 ms on a thread; ``peak`` is the largest seen."""

    def __init__(self, *roots: Path) -> None:
        self.roots, self.peak, self._stop = roots, 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, disk_bytes(*self.roots))
            self._stop.wait(0.02)

    def __enter__(self) -> "PeakDisk":
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, disk_bytes(*self.roots))


def first_batch(ds: Path, follow: bool = False) -> float:
    """time.time() when a Loader over ``ds`` handed out its first batch."""
    import libshard
    kwargs = {"follow": True} if follow else {}
    loader = libshard.Loader(str(ds), batch_size=1, **kwargs)
    try:
        for _ in loader:
            return time.time()
    finally:
        loader.close()
    raise RuntimeError(f"{ds}: no batch")


def gen_args(a: argparse.Namespace, out: Path) -> List[str]:
    return [GEN, "--output-dir", str(out), "--samples", str(a.samples), "--seq", str(a.seq),
            "--hidden", str(a.hidden), "--rate", str(a.rate), "--busy-ms", str(a.busy_ms)]


def report(stdout: str) -> Dict[str, float]:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"the generator printed no report: {stdout[-1000:]}")


def run_dump_pack(a: argparse.Namespace, work: Path, cli: str) -> Dict[str, float]:
    dump, ds = work / "dump", work / "dump.ds"
    with PeakDisk(dump, ds) as disk:
        r = subprocess.run([sys.executable, *gen_args(a, dump)], capture_output=True, text=True,
                           check=True)
        gen = report(r.stdout)
        pack = [cli, "pack", str(dump), "-o", str(ds), "-q"]
        if a.compress != "none":
            pack += ["--compress", a.compress]
        subprocess.run(pack, check=True, capture_output=True)
    step = first_batch(ds)
    return {"loop_s": gen["loop_s"], "first_step_s": step - gen["first_saved"],
            "peak_disk": disk.peak, "dataset": disk_bytes(ds)}


def run_capture(a: argparse.Namespace, work: Path, follow: bool) -> Dict[str, float]:
    out, ds = work / "out", work / "cap.ds"
    cmd = [sys.executable, "-m", "libshard.capture", "--out", str(ds), "-q",
           "--compress", a.compress, *a.capture_arg, "--", *gen_args(a, out)]
    with PeakDisk(out, ds) as disk:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        step: Optional[float] = None
        if follow:
            step = first_batch(ds, follow=True)
        stdout, stderr = p.communicate()
        if p.returncode:
            raise RuntimeError(stderr[-3000:])
        gen = report(stdout)
    if step is None:
        step = first_batch(ds)
    return {"loop_s": gen["loop_s"], "first_step_s": step - gen["first_saved"],
            "peak_disk": disk.peak, "dataset": disk_bytes(ds)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=48)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--rate", type=float, default=12.0)
    p.add_argument("--busy-ms", type=float, default=0.0)
    p.add_argument("--compress", default="none")
    p.add_argument("--capture-arg", action="append", default=[],
                   help="an extra argument for libshard.capture (repeatable)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--work", type=Path, default=Path("/var/tmp/libshard_capture_bench"))
    a = p.parse_args()
    cli = os.environ.get("LIBSHARD_CLI") or shutil.which("libshard")
    if not cli:
        sys.exit("set LIBSHARD_CLI to the libshard command (build/converters/libshard)")
    import libshard
    import inspect
    follow = "follow" in inspect.signature(libshard.Loader).parameters
    paths = ["dump + pack", "capture"] + (["capture+follow"] if follow else [])
    results: Dict[str, List[Dict[str, float]]] = {k: [] for k in paths}
    for r in range(a.rounds):
        for name in paths:
            work = a.work / f"{r}-{name.replace(' ', '').replace('+', '_')}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            if name == "dump + pack":
                got = run_dump_pack(a, work, cli)
            else:
                got = run_capture(a, work, follow=name.endswith("follow"))
            results[name].append(got)
            shutil.rmtree(work, ignore_errors=True)
    mb = a.samples * (a.seq * 4 * a.hidden * 2 + a.seq * 16) / 1e6
    print(f"# {a.samples} samples, ~{mb:.0f} MB raw, rate {a.rate or 'max'}/s, "
          f"busy {a.busy_ms} ms, compress {a.compress}, {a.rounds} rounds (median)")
    print(f"{'path':16} {'loop s':>7} {'samples/s':>9} {'vs dump':>7} {'first step s':>12} "
          f"{'peak disk MB':>12} {'dataset MB':>10} {'peak/dataset':>12}")
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    base = med([x["loop_s"] for x in results["dump + pack"]])
    for name in paths:
        xs = results[name]
        loop = med([x["loop_s"] for x in xs])
        peak = med([x["peak_disk"] for x in xs])
        dset = med([x["dataset"] for x in xs])
        print(f"{name:16} {loop:7.2f} {a.samples / loop:9.2f} {base / loop:7.3f} "
              f"{med([x['first_step_s'] for x in xs]):12.2f} {peak / 1e6:12.1f} "
              f"{dset / 1e6:10.1f} {peak / dset:12.2f}")


if __name__ == "__main__":
    main()
