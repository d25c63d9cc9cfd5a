"""The map-style read-ahead: Dataset.prefetch + ds[i] served from memory already read (proved by
the read-ahead's counters, not by timing), the rule for unannounced and passed-over reads,
corruption detected through it, memory bounded; and libshard.ReadAheadSampler inside a torch
DataLoader with workers (fork and spawn, persistent workers, several epochs): every worker's
samples served from its read-ahead, in the batch sampler's order."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

import libshard
from conftest import N_EAGLE, assert_sample_equal

SMALL = {"memory_budget": "4MiB"}


def test_prefetch_in_order_is_served_from_the_read_ahead(eagle_dataset):
    ds = libshard.open(eagle_dataset, read_ahead=SMALL)
    plain = libshard.open(eagle_dataset)
    assert ds.read_ahead_stats() is None
    order = [(i * 5) % N_EAGLE for i in range(N_EAGLE)]
    ds.prefetch(order)
    for i in order:
        assert_sample_equal(ds[i], plain[i], f"sample {i}")
    s = ds.read_ahead_stats()
    assert s["announced"] == N_EAGLE
    assert s["hits"] + s["waits"] == N_EAGLE
    assert s["misses"] == 0
    assert s["bytes_served"] > 0
    assert 0 < s["arena_peak"] <= s["arena_budget"] <= 4 << 20


def test_unannounced_negative_and_repeated(eagle_dataset):
    ds = libshard.open(eagle_dataset, read_ahead=SMALL)
    plain = libshard.open(eagle_dataset)
    ds.prefetch(torch.tensor([2, 2, 7]))
    assert_sample_equal(ds[-1], plain[N_EAGLE - 1])  # not announced: read synchronously
    assert_sample_equal(ds[2], plain[2])
    assert_sample_equal(ds[2], plain[2])
    assert_sample_equal(ds[7], plain[7])
    s = ds.read_ahead_stats()
    assert (s["hits"] + s["waits"], s["misses"]) == (3, 1)
    with pytest.raises(IndexError):
        ds[N_EAGLE]


def test_bad_announcements_and_options(eagle_dataset):
    ds = libshard.open(eagle_dataset, read_ahead=SMALL)
    with pytest.raises(libshard.InvalidArgumentError, match=r"index 24 .*24 samples"):
        ds.prefetch([0, N_EAGLE])
    assert ds.read_ahead_stats()["announced"] == 0
    with pytest.raises(libshard.InvalidArgumentError, match="negative"):
        ds.prefetch([-1])
    bad = libshard.open(eagle_dataset, read_ahead={"batch_size": 4})
    with pytest.raises(libshard.InvalidArgumentError, match="batch_size"):
        bad.prefetch([0])
    with pytest.raises(libshard.InvalidArgumentError, match="verify"):
        libshard.open(eagle_dataset, read_ahead={"verify": False}).prefetch([0])
    with pytest.raises(libshard.InvalidArgumentError, match="memory_budget"):
        libshard.open(eagle_dataset, read_ahead={"memory_budget": 1}).prefetch([0])


def test_corruption_detected_through_prefetch(eagle_dataset, copy_dataset):
    path = copy_dataset(eagle_dataset)
    probe = libshard.open(path)
    loc = probe.location(9)
    shard = probe.shards[loc["shard"]]["path"]
    with open(shard, "r+b") as f:
        f.seek(loc["offset"] + loc["stored_size"] // 2)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x10]))
    ds = libshard.open(path, read_ahead=SMALL)
    ds.prefetch([8, 9, 10])
    ds[8]
    with pytest.raises(libshard.CorruptionError, match="sample 9"):
        ds[9]
    ds[10]
    s = ds.read_ahead_stats()
    assert s["checksum_failures"] == 1 and s["misses"] == 0


def test_passed_over_and_never_asked(eagle_dataset):
    ds = libshard.open(eagle_dataset, read_ahead={"memory_budget": "64KiB"})
    plain = libshard.open(eagle_dataset)
    for _ in range(3):  # announced rounds of which only every fourth entry is asked for
        order = list(range(N_EAGLE))
        ds.prefetch(order)
        kept = [ds[i] for i in order[::4]]  # and kept: nothing wedges
        for i, got in zip(order[::4], kept):
            assert_sample_equal(got, plain[i])
    s = ds.read_ahead_stats()
    assert s["hits"] + s["waits"] + s["misses"] == 3 * len(range(0, N_EAGLE, 4))
    assert s["skipped"] + s["evicted"] > 0
    assert s["arena_peak"] <= s["arena_budget"]


# -- inside a torch DataLoader -------------------------------------------------------------

def collate_with_stats(samples):
    """A trainer-style Python collate run in the worker: the indices, each sample's bytes, and
    this worker's read-ahead counters."""
    info = torch.utils.data.get_worker_info()
    ds = info.dataset if info is not None else None
    return {
        "indices": [int(s["input_ids"].numel()) for s in samples],
        "samples": [{k: v.clone() for k, v in s.items()} for s in samples],
        "worker": info.id if info is not None else -1,
        "pid": os.getpid(),
        "stats": ds.read_ahead_stats() if ds is not None else None,
    }


class OrderedSampler(torch.utils.data.Sampler):
    """A permutation per (seed, epoch), with set_epoch."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed + 100 * self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())

    def __len__(self) -> int:
        return self.n


def run_epochs(ds, plain, *, context, workers, persistent, prefetch_factor, epochs=2,
               batch_size=3):
    sampler = OrderedSampler(N_EAGLE, seed=2)
    batches = libshard.ReadAheadSampler(sampler, ds, batch_size=batch_size, num_workers=workers,
                                        depth=4)
    kwargs = {}
    if workers:
        kwargs = dict(multiprocessing_context=context, persistent_workers=persistent,
                      prefetch_factor=prefetch_factor)
    loader = DataLoader(ds, batch_sampler=batches, num_workers=workers,
                        collate_fn=collate_with_stats, **kwargs)
    ref = OrderedSampler(N_EAGLE, seed=2)
    last = {}
    for epoch in range(epochs):
        batches.set_epoch(epoch)
        ref.set_epoch(epoch)
        want = list(BatchSampler(list(ref), batch_size, False))
        got = list(loader)
        assert len(got) == len(want)
        for k, (batch, idx) in enumerate(zip(got, want)):
            assert len(batch["samples"]) == len(idx)
            for sample, i in zip(batch["samples"], idx):
                assert_sample_equal(sample, plain[i], f"epoch {epoch} batch {k} sample {i}")
            if workers:
                assert batch["worker"] == k % workers  # DataLoader's round robin
            last[(batch["pid"], batch["worker"])] = batch["stats"]
    return last


@pytest.mark.parametrize("context,persistent,prefetch_factor",
                         [("fork", False, 2), ("fork", True, 1), ("spawn", True, 3)])
def test_dataloader_workers_are_served_from_their_read_ahead(eagle_dataset, context, persistent,
                                                             prefetch_factor):
    ds = libshard.open(eagle_dataset, read_ahead={"memory_budget": "2MiB"})
    plain = libshard.open(eagle_dataset)
    workers = 2
    last = run_epochs(ds, plain, context=context, workers=workers, persistent=persistent,
                      prefetch_factor=prefetch_factor)
    # Every sample a worker served came from its read-ahead (hits or waits), none was read
    # synchronously; the main process never read ahead.
    served = 0
    for (pid, worker), stats in last.items():
        assert pid != os.getpid()
        assert stats is not None, f"worker {worker} never prefetched"
        assert stats["misses"] == 0, stats
        assert stats["hits"] + stats["waits"] == stats["announced"] - stats["held"], stats
        assert stats["arena_peak"] <= stats["arena_budget"] <= 2 << 20
        served += stats["hits"] + stats["waits"]
    # Without persistent workers each epoch has new processes, each with its own read-ahead.
    assert len(last) == (workers if persistent else 2 * workers)
    assert served == 2 * N_EAGLE
    assert ds.read_ahead_stats() is None


def test_dataloader_in_the_main_process(eagle_dataset):
    ds = libshard.open(eagle_dataset, read_ahead=SMALL)
    plain = libshard.open(eagle_dataset)
    run_epochs(ds, plain, context=None, workers=0, persistent=False, prefetch_factor=None)
    s = ds.read_ahead_stats()
    assert s["misses"] == 0 and s["hits"] + s["waits"] == 2 * N_EAGLE


def test_fork_after_prefetch_in_the_parent(eagle_dataset):
    """A parent that read ahead itself forks workers: each makes its own engine."""
    ds = libshard.open(eagle_dataset, read_ahead=SMALL)
    plain = libshard.open(eagle_dataset)
    ds.prefetch([0, 1])
    ds[0]
    last = run_epochs(ds, plain, context="fork", workers=2, persistent=False, prefetch_factor=2,
                      epochs=1)
    assert all(s["misses"] == 0 for s in last.values())
    ds[1]
    assert ds.read_ahead_stats()["hits"] + ds.read_ahead_stats()["waits"] == 2


def test_distributed_sampler_batches(eagle_dataset):
    ds = libshard.open(eagle_dataset, read_ahead=SMALL)
    sampler = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=3)
    batches = libshard.ReadAheadSampler(BatchSampler(sampler, 4, False), ds, num_workers=0)
    batches.set_epoch(5)
    assert sampler.epoch == 5
    loader = DataLoader(ds, batch_sampler=batches, collate_fn=lambda s: s)
    got = [[int(x["input_ids"].numel()) for x in b] for b in loader]
    plain = libshard.open(eagle_dataset)
    want = [[int(plain[i]["input_ids"].numel()) for i in b]
            for b in BatchSampler(list(sampler), 4, False)]
    assert got == want
    assert ds.read_ahead_stats()["misses"] == 0


def test_read_ahead_sampler_refusals(eagle_dataset):
    ds = libshard.open(eagle_dataset)
    with pytest.raises(libshard.InvalidArgumentError, match="num_workers"):
        libshard.ReadAheadSampler(range(4), ds, num_workers=-1, batch_size=2)
    with pytest.raises(libshard.InvalidArgumentError, match="batch_size"):
        list(libshard.ReadAheadSampler(range(4), ds, num_workers=0))
