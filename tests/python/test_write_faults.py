"""Write-path fault injection: the N-th write, pwrite, fsync, rename or ftruncate of `libshard pack`
fails (ENOSPC, EIO, a short write) or kills the process, for a spread of N (every N with
LIBSHARD_FAULTS=full). After each run the output either does not open as a dataset or equals the
uninterrupted result sample for sample, and `pack --resume` then completes and equals it too.
Also: a disk that really is full (a small tmpfs).

The faults come from tests/faultinject/faultinject.c (LD_PRELOAD; CMake target
libshard_faultinject): $LIBSHARD_FAULTINJECT, else next to the CLI's build tree
(<build>/tests/libshard_faultinject.so), else the newest <repo>/build*/tests/. Only calls on files
under the output directory count, so the numbering is the writer's own.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import torch

import libshard

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_cli import CLI, eagle_sample  # noqa: E402

FULL = os.environ.get("LIBSHARD_FAULTS", "") == "full"
# What libshard.open raises for something that is not a complete dataset.
OPEN_ERRORS = tuple({getattr(libshard, "Error", OSError), libshard.CorruptionError,
                     FileNotFoundError, ValueError, OSError})
# Fault points per kind in the bounded run (`make test`); the full run takes every one.
BOUNDED_POINTS = 14


def _find_shim() -> str:
    env = os.environ.get("LIBSHARD_FAULTINJECT")
    if env:
        return env
    near_cli = Path(CLI).resolve().parents[1] / "tests" / "libshard_faultinject.so"
    if near_cli.exists():
        return str(near_cli)
    candidates = glob.glob(str(REPO / "build*" / "tests" / "libshard_faultinject.so"))
    if not candidates:
        pytest.skip("libshard_faultinject.so not built (set LIBSHARD_FAULTINJECT)",
                    allow_module_level=True)
    return max(candidates, key=os.path.getmtime)


SHIM = _find_shim()


def write_sources(root: Path, n: int, max_len: int = 60, seed: int = 0) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        gen = torch.Generator().manual_seed(seed * 7919 + i)
        torch.save(eagle_sample(gen, 1 + (i * 37 + seed) % max_len), root / f"s_{i}.pt")


def pack(src: Path, out: Path, *extra: str, env: Dict[str, str] | None = None,
         args: Tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "pack", str(src), "-o", str(out), "--progress", "none", "-q",
                           *args, *extra], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def fault_env(out: Path, **kw: str) -> Dict[str, str]:
    env = {"LD_PRELOAD": SHIM, "LIBSHARD_FAULT_DIR": str(out)}
    env.update({f"LIBSHARD_FAULT_{k.upper()}": str(v) for k, v in kw.items()})
    return env


Contents = List[Tuple[str, Dict[str, bytes]]]


def contents(path: Path) -> Contents:
    """Every sample as (source, {name: dtype, shape and bytes}), in order."""
    ds = libshard.open(path)
    out = []
    for i in range(len(ds)):
        sample = ds[i]
        out.append((ds.source(i), {k: (str(v.dtype), tuple(v.shape),
                                       v.contiguous().view(torch.uint8).numpy().tobytes())
                                   for k, v in sample.items() if isinstance(v, torch.Tensor)}))
    return out


def opens_wrong(path: Path, reference: Contents) -> str | None:
    """None when `path` does not open as a dataset or equals `reference`; else what is wrong."""
    try:
        got = contents(path)
    except OPEN_ERRORS:
        return None
    if len(got) != len(reference):
        return f"opens with {len(got)} samples, not {len(reference)}"
    for i, (g, w) in enumerate(zip(got, reference)):
        if g != w:
            return f"sample {i} ({g[0]}) differs from the uninterrupted result ({w[0]})"
    return None


# The two pack configurations: several shards (a tiny shard size), two worker threads, a journal
# checkpoint every few samples; one stored raw, one zstd-compressed.
CONFIGS = {
    "raw": ("--shard-size", "12K", "--threads", "2", "--journal-every", "8K"),
    "zstd": ("--shard-size", "12K", "--threads", "2", "--journal-every", "8K", "--compress",
             "zstd"),
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = Path(os.path.realpath(tmp_path_factory.mktemp("faults")))
    src = base / "src"
    write_sources(src, 10)
    runs = {}
    for name, args in CONFIGS.items():
        out = base / f"ref_{name}"
        log = base / f"ref_{name}.log"
        count = base / f"ref_{name}.count"
        p = pack(src, out, env=fault_env(out, log=log, count_file=count), args=args)
        assert p.returncode == 0, p.stderr
        calls = [line.split(" ", 2) for line in log.read_text().splitlines()]
        assert int(count.read_text()) == len(calls) > 0
        reference = contents(out)
        assert len(reference) == 10 and len(libshard.open(out).shards) >= 3
        runs[name] = (args, reference, calls)
    return base, src, runs


def points(total: int) -> List[int]:
    """Every call under LIBSHARD_FAULTS=full, else a spread: the first and last few, and
    evenly spaced ones between."""
    if FULL or total <= BOUNDED_POINTS:
        return list(range(1, total + 1))
    ends = [1, 2, 3, total - 2, total - 1, total]
    step = (total - 1) / (BOUNDED_POINTS - len(ends) + 1)
    middle = [round(1 + step * k) for k in range(1, BOUNDED_POINTS - len(ends) + 1)]
    return sorted(set(ends + middle))


def run_faults(setup, tmp_path, config: str, kind: str) -> Dict[str, int]:
    base, src, runs = setup
    args, reference, calls = runs[config]
    tally = {"tried": 0, "failed": 0, "tolerated": 0, "opened_complete": 0, "resumed": 0}
    for n in points(len(calls)):
        op, path = calls[n - 1][1], calls[n - 1][2]
        where = f"{config}, {kind} at call {n}/{len(calls)} ({op} {path})"
        out = tmp_path / f"{config}_{kind}_{n}"
        p = pack(src, out, env=fault_env(out, at=n, kind=kind), args=args)
        tally["tried"] += 1
        if kind == "kill":
            assert p.returncode == -9, f"{where}: exit {p.returncode}: {p.stderr}"
        elif p.returncode == 0:
            tally["tolerated"] += 1  # a fault on something optional (the lock file's note)
        else:
            assert p.returncode == 1, f"{where}: exit {p.returncode}: {p.stderr}"
            assert p.stderr.strip(), where
            tally["failed"] += 1
            if kind in ("enospc", "eio"):
                # The message names the file that failed and says why.
                assert str(out) in p.stderr, f"{where}: the error names no file: {p.stderr}"
                why = "No space left on device" if kind == "enospc" else "Input/output error"
                assert why in p.stderr, f"{where}: {p.stderr}"
        wrong = opens_wrong(out, reference)
        assert wrong is None, f"{where}: the output {wrong}"
        try:
            contents(out)
            tally["opened_complete"] += 1
        except OPEN_ERRORS:
            pass
        r = pack(src, out, "--resume", args=args)
        assert r.returncode == 0, f"{where}: --resume failed: {r.stderr}"
        assert contents(out) == reference, f"{where}: the resumed dataset differs"
        tally["resumed"] += 1
    print(f"\nfaults {config}/{kind}: {tally} of {len(calls)} call points")
    return tally


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("kind", ["enospc", "eio", "kill", "short"])
def test_fault_at_every_call_point(setup, tmp_path, config, kind):
    if kind == "short" and not FULL and config != "raw":
        pytest.skip("short writes: one configuration in the bounded run")
    tally = run_faults(setup, tmp_path, config, kind)
    assert tally["resumed"] == tally["tried"] > 0
    if kind == "short":
        # A short write is not an error: the writer continues and the result is the reference.
        assert tally["failed"] == 0


def test_sticky_disk_full_from_every_point(setup, tmp_path):
    """ENOSPC that stays (every call from N on fails), as on a disk that filled up."""
    base, src, runs = setup
    args, reference, calls = runs["raw"]
    for n in points(len(calls))[::2]:
        out = tmp_path / f"sticky_{n}"
        p = pack(src, out, env=fault_env(out, at=n, kind="enospc", sticky="1"), args=args)
        assert p.returncode in (0, 1), p.stderr
        if p.returncode:
            assert "No space left on device" in p.stderr and str(out) in p.stderr, p.stderr
        assert opens_wrong(out, reference) is None
        r = pack(src, out, "--resume", args=args)
        assert r.returncode == 0, r.stderr
        assert contents(out) == reference


@pytest.fixture
def small_tmpfs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2M", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_disk_full_on_a_small_tmpfs(small_tmpfs, tmp_path):
    src = tmp_path / "big"
    write_sources(src, 40, max_len=3000, seed=5)  # ~4.8 MB of samples: more than the 2 MiB
    ref = tmp_path / "ref"
    assert pack(src, ref).returncode == 0
    reference = contents(ref)
    out = small_tmpfs / "ds"
    p = pack(src, out, args=("--shard-size", "512K"))
    assert p.returncode == 1, p.stderr
    assert "No space left on device" in p.stderr and str(out) in p.stderr, p.stderr
    assert "--resume" in p.stderr, p.stderr  # says how to continue
    with pytest.raises(OPEN_ERRORS):
        libshard.open(out)
    # More space, then --resume finishes the job with the samples already written.
    subprocess.run(["mount", "-o", "remount,size=64M", str(small_tmpfs)], check=True)
    r = pack(src, out, "--resume", args=("--shard-size", "512K"))
    assert r.returncode == 0, r.stderr
    assert contents(out) == reference


@pytest.mark.parametrize("kind", ["enospc", "kill"])
def test_fault_during_append(setup, tmp_path, kind):
    """`pack --append` never breaks the dataset it adds to: after a fault at any of its calls OUT
    opens as it was before the append or as the complete result, and a new --append finishes."""
    import shutil
    base, src, runs = setup
    args, reference, _ = runs["raw"]
    first = tmp_path / "first"
    first.mkdir()
    for i in range(6):
        shutil.copy2(src / f"s_{i}.pt", first / f"s_{i}.pt")
    start = tmp_path / "start"
    assert pack(first, start, args=args).returncode == 0
    assert contents(start) == reference[:6]
    counted = tmp_path / "counted"
    shutil.copytree(start, counted)
    log = tmp_path / "append.log"
    p = pack(src, counted, "--append", env=fault_env(counted, log=log), args=args)
    assert p.returncode == 0, p.stderr
    calls = log.read_text().splitlines()
    assert contents(counted) == reference
    for n in points(len(calls)):
        where = f"append, {kind} at call {n}/{len(calls)} ({calls[n - 1]})"
        out = tmp_path / f"append_{n}"
        shutil.copytree(start, out)
        p = pack(src, out, "--append", env=fault_env(out, at=n, kind=kind), args=args)
        if kind == "kill":
            assert p.returncode == -9, f"{where}: exit {p.returncode}: {p.stderr}"
        elif p.returncode:
            assert str(out) in p.stderr and "No space left on device" in p.stderr, \
                f"{where}: {p.stderr}"
        got = contents(out)  # must open: the old dataset stays until the new one is committed
        assert got in (reference[:6], reference), f"{where}: opens with {len(got)} samples"
        r = pack(src, out, "--append", args=args)
        assert r.returncode == 0, f"{where}: the next --append failed: {r.stderr}"
        assert contents(out) == reference, f"{where}: the appended dataset differs"
