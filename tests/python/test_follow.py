"""Follow mode: training while a libshard.Writer writes the dataset (docs/FORMAT.md §6.1,
docs/ORDER.md §5). The writer runs in a child process (follow_writer_child.py), so the follower
reads files another process is writing, as in real use; kills are real SIGKILLs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List, Optional

import pytest
import torch

import libshard

CHILD = Path(__file__).resolve().parent / "follow_writer_child.py"


def start_writer(out: Path, n: int, *, delay: float = 0.0, commit_interval: float = 0.05,
                 hang_after: int = -1, rank: Optional[int] = None,
                 world: Optional[int] = None) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    if world is not None:
        env["RANK"], env["WORLD_SIZE"] = str(rank), str(world)
    cmd = [sys.executable, str(CHILD), str(out), str(n), "--delay", str(delay),
           "--commit-interval", str(commit_interval), "--hang-after", str(hang_after)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finish(proc: subprocess.Popen, timeout: float = 120) -> None:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"writer failed ({proc.returncode}):\n{out}\n{err}"


def idents(step) -> List[int]:
    samples = step if isinstance(step, list) else [step]
    return [int(s["ident"][0]) for s in samples]


def test_one_rank_serves_every_sample_once_while_the_writer_writes(tmp_path):
    out = tmp_path / "ds"
    n = 40
    proc = start_writer(out, n, delay=0.03)
    try:
        loader = libshard.Loader(out, follow=True, batch_size=2, shuffle_window=8, seed=3,
                                 slow_wait_warning_seconds=60)
        seen: List[int] = []
        writer_running_at_first = None
        for step in loader:
            if writer_running_at_first is None:
                writer_running_at_first = proc.poll() is None
            for i, s in zip(idents(step), step):
                assert s["sid"] == i  # metadata and bytes of one sample
            seen += idents(step)
        finish(proc)
    finally:
        proc.kill()
    assert sorted(seen) == list(range(n))
    assert writer_running_at_first, "the first step should come while the writer still writes"
    # The follow epoch is over; the next is an ordinary epoch of the complete dataset.
    assert len(loader) == n // 2
    second = [i for step in loader for i in idents(step)]
    plain = libshard.Loader(out, batch_size=2, seed=3)
    plain.set_epoch(1)
    assert second == [i for step in plain for i in idents(step)]
    assert loader.state_dict()["epoch"] == 2


def follow_ranks(out: Path, world: int, **options) -> List[List[int]]:
    """Each of `world` follow loaders (threads of this process, as ranks on other nodes would
    be) runs the follow epoch; returns every rank's samples in order."""
    results: List[List[int]] = [[] for _ in range(world)]
    errors: List[BaseException] = []

    def run(rank: int) -> None:
        try:
            loader = libshard.Loader(out, follow=True, rank=rank, world_size=world,
                                     slow_wait_warning_seconds=60, **options)
            for step in loader:
                results[rank] += idents(step)
            loader.close()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    if errors:
        raise errors[0]
    return results


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_ranks_together_serve_every_sample_exactly_once_while_it_is_written(tmp_path, world):
    out = tmp_path / "ds"
    n = 30
    proc = start_writer(out, n, delay=0.02)
    try:
        results = follow_ranks(out, world, batch_size=2, shuffle_window=4, drop_last=True)
        finish(proc)
    finally:
        proc.kill()
    everything = [i for r in results for i in r]
    assert len(everything) == len(set(everything)), "a sample served twice"
    units = n // 2 // world * world
    assert sorted(everything) == sorted(set(everything)) and len(everything) == units * 2
    assert len({len(r) for r in results}) == 1, "ranks get equal step counts"
    # Without drop_last: every sample, plus padding from the start of the order.
    padded = follow_ranks(out, world, batch_size=2, shuffle_window=4)
    flat = [i for r in padded for i in r]
    assert set(flat) == set(range(n))
    assert len(flat) - n < 2 * world


def test_resume_inside_the_follow_epoch_equals_the_uninterrupted_run(tmp_path):
    out = tmp_path / "ds"
    n = 36
    proc = start_writer(out, n, delay=0.03)
    try:
        loader = libshard.Loader(out, follow=True, batch_size=3, shuffle_window=8, seed=5)
        it = iter(loader)
        first = [i for _ in range(4) for i in idents(next(it))]
        state = loader.state_dict()
        assert state["follow_window"] == 8 and state["position"] == 12
        loader.close()
        # Another world size continues it: two ranks take the rest, exactly once.
        rest = [[] for _ in range(2)]
        for rank in range(2):
            r = libshard.Loader(out, follow=True, batch_size=3, rank=rank, world_size=2,
                                drop_last=True)
            r.load_state_dict(state)
            for step in r:
                rest[rank] += idents(step)
        resumed = libshard.Loader(out, follow=True, batch_size=3, shuffle_window=8, seed=5)
        resumed.load_state_dict(state)
        after = [i for step in resumed for i in idents(step)]
        finish(proc)
    finally:
        proc.kill()
    whole = libshard.Loader(out, follow=True, batch_size=3, shuffle_window=8, seed=5)
    assert first + after == [i for step in whole for i in idents(step)]
    two = first + rest[0] + rest[1]
    assert len(two) == len(set(two)) == n


def test_a_killed_writer_warns_and_its_resume_continues_the_stream(tmp_path, capfd):
    out = tmp_path / "ds"
    n = 24
    proc = start_writer(out, n, hang_after=10)
    assert proc.stdout.readline().strip() == "hanging"
    loader = libshard.Loader(out, follow=True, batch_size=2, shuffle_window=4,
                             slow_wait_warning_seconds=0.5)
    seen: List[int] = []
    it = iter(loader)
    while len(seen) < 6:  # 10 arrivals decide windows 1, 2, 4 (7 samples): 3 steps of 2
        seen += idents(next(it))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed_writer: List[subprocess.Popen] = []

    def restart() -> None:
        time.sleep(1.5)  # the loader waits and warns meanwhile
        resumed_writer.append(start_writer(out, n, delay=0.01))

    t = threading.Thread(target=restart)
    t.start()
    for step in it:
        seen += idents(step)
    t.join()
    finish(resumed_writer[0])
    assert sorted(seen) == list(range(n)), "nothing served twice or lost"
    err = capfd.readouterr().err
    assert "libshard: follow mode: waiting for new samples of" in err
    assert str(out) in err and "nothing new committed for" in err
    assert "start it again on the same directory" in err


def test_len_is_unknown_until_the_dataset_is_complete(tmp_path):
    out = tmp_path / "ds"
    proc = start_writer(out, 12, hang_after=5)
    try:
        assert proc.stdout.readline().strip() == "hanging"
        loader = libshard.Loader(out, follow=True)
        with pytest.raises(TypeError, match="not known while the dataset is being written"):
            len(loader)
        assert "unknown" in repr(loader)
        ds = libshard.open(out, follow=True)
        assert len(ds) == 5 and not ds.complete
        assert int(ds[4]["ident"][0]) == 4
        with pytest.raises(libshard.InvalidArgumentError, match="still being written"):
            libshard.Loader(out, follow=True, expect={"target_model": "x"})
        with pytest.raises(libshard.InvalidArgumentError, match="max_tokens"):
            libshard.Loader(out, follow=True, max_tokens=100)
    finally:
        proc.kill()
        proc.wait()
    resumed = start_writer(out, 12)
    finish(resumed)
    assert ds.wait(timeout=30) and len(ds) == 12 and ds.complete
    assert [int(ds[i]["ident"][0]) for i in range(12)] == list(range(12))


def test_ranks_of_a_multi_rank_write_are_followed_in_round_robin(tmp_path):
    out = tmp_path / "ds"
    n = 24
    writers = [start_writer(out, n, delay=0.02, rank=r, world=3) for r in range(3)]
    try:
        results = follow_ranks(out, 2, batch_size=2, shuffle_window=4, shuffle=False)
        for w in writers:
            finish(w)
    finally:
        for w in writers:
            w.kill()
    # Unshuffled, the follow order is the arrival order: sample t of rank 0, 1, 2, then t + 1.
    steps0, steps1 = results
    order = []
    for k in range(max(len(steps0), len(steps1)) // 2):
        order += steps0[2 * k:2 * k + 2] + steps1[2 * k:2 * k + 2]
    assert order == list(range(n))  # rank R writes i = R, R + 3, ...: round robin is i order
    # The next epoch reads the joined dataset (ordered by key).
    loader = libshard.Loader(out, follow=True, batch_size=2, shuffle=False)
    assert [i for step in loader for i in idents(step)] == list(range(n))
    assert [i for step in loader for i in idents(step)] == list(range(n))


def test_training_steps_while_the_writer_writes(tmp_path):
    out = tmp_path / "ds"
    proc = start_writer(out, 32, delay=0.02)
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    try:
        loader = libshard.Loader(out, follow=True, batch_size=4, shuffle_window=8)
        for batch in loader:
            x = torch.stack([s["hidden_state"][0].float().mean(0) for s in batch])
            y = torch.stack([s["input_ids"].float().mean() / 1000 for s in batch]).unsqueeze(1)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        finish(proc)
    finally:
        proc.kill()
    assert len(losses) == 8 and all(torch.isfinite(torch.tensor(losses)))
