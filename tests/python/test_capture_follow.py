"""Training while a generator runs under libshard.capture: Loader(DATASET, follow=True) takes real
optimizer steps on captured samples before the generator has finished, serves each sample once
in the first epoch, and the epoch ends when capture commits the dataset."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List

import torch

import libshard
from capture_util import clean_env
from conftest import REPO

GEN = str(REPO / "tests" / "python" / "generators" / "toy_generator.py")


def test_a_trainer_follows_a_capture_and_takes_optimizer_steps_while_it_writes(tmp_path):
    ds, n = tmp_path / "ds", 16
    cmd = [sys.executable, "-m", "libshard.capture", "--out", str(ds), "--commit-interval", "0.05",
           "--", GEN, "--output-dir", str(tmp_path / "gen"), "--n", str(n), "--hidden", "32",
           "--sleep", "0.15"]
    capture = subprocess.Popen(cmd, env=clean_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    seen: List[str] = []
    losses: List[float] = []
    running_at_steps: List[bool] = []
    try:
        loader = libshard.Loader(ds, follow=True, batch_size=2, shuffle_window=4,
                                 slow_wait_warning_seconds=120)
        for batch in loader:
            running_at_steps.append(capture.poll() is None)
            x = torch.stack([s["hidden_state"][0].float().mean(0) for s in batch])
            y = torch.stack([s["loss_mask"].float().mean() for s in batch]).unsqueeze(1)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            seen += [s["conversation_id"] for s in batch]
        out, err = capture.communicate(timeout=120)
    finally:
        capture.kill()
    assert capture.returncode == 0, err[-3000:]
    assert sorted(seen) == sorted(f"conv-{i}" for i in range(n))  # each sample once
    assert len(losses) == n // 2 and all(torch.isfinite(torch.tensor(losses)))
    assert running_at_steps[0], "the first step should come while the generator still writes"
    assert sum(running_at_steps) >= 2
    # The dataset the trainer followed is the committed capture.
    assert len(libshard.open(ds)) == n and (ds / "manifest.json").exists()
