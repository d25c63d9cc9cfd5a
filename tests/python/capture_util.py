"""Helpers of the capture tests (test_capture.py, test_trainer_capture_generators.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List

import libshard
from conftest import assert_sample_equal


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM_") and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(extra)
    return env


def assert_same_dataset(got: Path, want: Path, *, same_order: bool = True) -> None:
    a, b = libshard.open(got), libshard.open(want)
    assert len(a) == len(b) > 0
    assert a.schema == b.schema
    if same_order:
        assert [a.key(i) for i in range(len(a))] == [b.key(i) for i in range(len(b))]
    assert sorted(a.key(i) for i in range(len(a))) == sorted(b.key(i) for i in range(len(b)))
    for i in range(len(b)):
        key = b.key(i)
        j = a.find(key)
        assert_sample_equal(a[j], b[i], key)
        assert a.metadata(j) == b.metadata(i), key


def sample_files(root: Path) -> List[str]:
    exts = (".pt", ".ckpt", ".ckpt.gz", ".safetensors")
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and p.name.endswith(exts) and "vocab_mapping" not in p.parts)


def journaled(ds: Path) -> int:
    """Samples a killed capture left in ``ds``'s journal (what a rerun keeps)."""
    w = libshard.Writer(ds)
    try:
        return len(w)
    finally:
        w.abort()
