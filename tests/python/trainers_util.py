"""Helpers of the trainer integration tests (tests/python/test_trainer_*.py).

The trainers (SpecForge, speculators, ModelOpt) live in their own virtual environment, built by
scripts/trainers_env.sh (`make deps` runs it) with the system's torch; scripts/test.sh runs these
test files with that environment's python. Under any other interpreter they skip and say so.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import pytest
import torch

import conftest

REPO = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("LIBSHARD_TRAINERS_VENV", REPO / ".venv-trainers"))


def require(module: str, what: str):
    """Imports `module`, or skips the calling test file naming what to run."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        pytest.skip(f"{what} is not importable here ({e}); build the trainers' environment with "
                    f"`bash scripts/trainers_env.sh` and run this file with {VENV}/bin/python "
                    "(scripts/test.sh does)", allow_module_level=True)


def cli_pack(src: Path, out: Path, *args: str) -> Path:
    """`libshard pack SRC -o OUT ARGS...` with the command-line tool (libshard.pack without it)."""
    cli = conftest._cli()
    if cli is None:
        conftest.pack_dir(src, out)
        return out
    subprocess.run([cli, "pack", str(src), "-o", str(out), "-q", *args], check=True,
                   capture_output=True)
    return out


def bits(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def assert_same(got: Any, want: Any, where: str = "") -> None:
    """Same structure, dtypes, shapes and bytes (nested dicts/lists/tuples of tensors)."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: {type(got)} is not a tensor"
        assert got.dtype == want.dtype, f"{where}: {got.dtype} != {want.dtype}"
        assert got.shape == want.shape, f"{where}: {tuple(got.shape)} != {tuple(want.shape)}"
        assert bits(got) == bits(want), f"{where}: bytes differ"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), \
            f"{where}: keys {list(got) if isinstance(got, dict) else got!r} != {list(want)}"
        for k in want:
            assert_same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


@functools.lru_cache(maxsize=None)
def _strace_has_seccomp(strace: str) -> bool:
    return subprocess.run([strace, "-f", "-qq", "--seccomp-bpf", "-e", "trace=openat", "-o",
                           os.devnull, "true"], capture_output=True).returncode == 0


def opened_files(code: str, env: Optional[Dict[str, str]] = None) -> List[str]:
    """Runs `code` in a child python (this interpreter) under strace and returns every path it
    opened (open/openat/openat2, successful or not)."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (scripts/deps.sh installs it)")
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"opens.{os.getpid()}.log"
    full_env = dict(os.environ)
    full_env.update(env or {})
    # --seccomp-bpf: the child stops only at the traced calls, not at every system call (a
    # trainer's imports run 5 times faster so); strace before 5.3 has no such option.
    seccomp = ["--seccomp-bpf"] if _strace_has_seccomp(strace) else []
    proc = subprocess.run([strace, "-f", "-qq", *seccomp, "-e", "trace=open,openat,openat2",
                           "-o", str(log), sys.executable, "-c", code], env=full_env,
                          capture_output=True, text=True)
    text = log.read_text() if log.exists() else ""
    log.unlink(missing_ok=True)
    if proc.returncode != 0:
        if "ptrace" in (proc.stderr or "") or "PTRACE" in text:
            pytest.skip(f"strace cannot trace here: {proc.stderr.strip()[:200]}")
        raise AssertionError(f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return re.findall(r'open(?:at2?)?\((?:[^,]*, )?"([^"]*)"', text)


def under(paths: Sequence[str], root: Path) -> List[str]:
    root_s = str(Path(root).resolve())
    return [p for p in paths if os.path.abspath(p).startswith(root_s + os.sep)
            or os.path.abspath(p) == root_s]


def assert_opens_dataset_files_only(opened: Sequence[str], dataset: Path) -> None:
    """Every path opened inside `dataset` is its manifest, index or a shard: none per sample."""
    allowed = {str(Path(dataset).resolve() / n) for n in ("manifest.json", "index.lsi")}
    allowed |= {str(p.resolve()) for p in Path(dataset).glob("*.lss")}
    stray = sorted(set(os.path.abspath(p) for p in under(opened, dataset)) - allowed)
    assert not stray, f"opened beyond the manifest, index and shards: {stray[:5]}"
    assert under(opened, dataset), "the child opened nothing in the dataset (strace saw no opens?)"
