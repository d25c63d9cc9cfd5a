"""examples/generate_hidden_states.py end to end (skipped without `transformers`): 2 processes
under torchrun write one dataset with libshard.Writer; the same run with --baseline writes
SpecForge's torch.save files, which `pack` turns into a dataset with the same samples, bit for
bit; examples/train_eagle3.py trains on the Writer's dataset."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import libshard
from conftest import REPO, assert_sample_equal, pack_dir

pytest.importorskip("transformers")

GEN = str(REPO / "examples" / "generate_hidden_states.py")
TRAIN = str(REPO / "examples" / "train_eagle3.py")
ARGS = ["--samples", "6", "--max-len", "48", "--hidden", "64", "--layers", "8"]


def _torchrun(out: Path, *extra: str) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM_") and k not in ("RANK", "WORLD_SIZE")}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "--master-port", str(29500 + random.randint(5001, 9000)), GEN,
                        "--out", str(out), *ARGS, *extra], env=env, capture_output=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr.decode()[-3000:]


def test_generate_with_writer_equals_baseline_then_train(tmp_path):
    _torchrun(tmp_path / "writer")
    _torchrun(tmp_path / "files", "--baseline")
    ds = libshard.open(tmp_path / "writer")
    assert len(ds) == 6 and "RANDOMLY INITIALISED" in ds.attributes["target_model"]
    packed = libshard.open(pack_dir(tmp_path / "files", tmp_path / "packed"))
    assert len(packed) == 6
    for i in range(6):  # keys doc_000000.. and data_0..5 both follow the text order
        assert ds.source(i) == f"doc_{i:06d}"
        assert_sample_equal(ds[i], packed[i], f"sample {i}")
    r = subprocess.run([sys.executable, TRAIN, "--data", str(tmp_path / "writer"), "--steps", "3",
                        "--vocab", "259", "--log-every", "1"], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    assert b"last loss" in r.stdout
