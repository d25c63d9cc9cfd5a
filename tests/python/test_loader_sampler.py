"""libshard.Loader(sampler=..., batch_sampler=...): the order of a torch Sampler or batch
sampler (docs/ORDER.md §6): order equality with the sampler's own sequence (plain, batched, a
batch sampler, DistributedSampler over several ranks, several epochs with set_epoch), exact
bytes, collation, resume equality mid-epoch, refusals."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import BatchSampler, DistributedSampler, Sampler, SequentialSampler

import libshard
from conftest import N_EAGLE, assert_sample_equal

SMALL = dict(memory_budget="8MiB")


class SeededSampler(Sampler):
    """A permutation of range(n) per (seed, epoch), like DistributedSampler with one replica."""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())

    def __len__(self) -> int:
        return self.n


class UnseededSampler(SeededSampler):
    """A different order on every pass, whatever the epoch (cannot resume)."""

    def __iter__(self):
        return iter(torch.randperm(self.n).tolist())


def steps_of(loader) -> list:
    """One epoch: per step, the dataset indices (single samples give lists of one)."""
    out = []
    for step in loader:
        if isinstance(step, dict) and libshard.INDEX_KEY in step and isinstance(
                step[libshard.INDEX_KEY], torch.Tensor):
            out.append(step[libshard.INDEX_KEY].tolist())  # collate="pad"/"pack"
        elif isinstance(step, dict):
            out.append([step[libshard.INDEX_KEY]])
        else:
            out.append([s[libshard.INDEX_KEY] for s in step])
    return out


def expected(sampler, epoch: int, batch_size=None, drop_last=False) -> list:
    for obj in (sampler, getattr(sampler, "sampler", None)):
        if hasattr(obj, "set_epoch"):
            obj.set_epoch(epoch)
            break
    seq = list(sampler)
    if seq and isinstance(seq[0], list):
        return seq
    if batch_size is None:
        return [[i] for i in seq]
    return list(BatchSampler(seq, batch_size, drop_last))


def test_sampler_order_and_bytes_over_epochs(eagle_dataset):
    ds = libshard.open(eagle_dataset)
    sampler = SeededSampler(N_EAGLE, seed=5)
    loader = libshard.Loader(ds, sampler=sampler, return_index=True, **SMALL)
    ref = SeededSampler(N_EAGLE, seed=5)
    for epoch in range(3):
        got = []
        for sample in loader:  # each iter() runs the next epoch; set_epoch called on the sampler
            i = sample.pop(libshard.INDEX_KEY)
            assert_sample_equal(sample, ds[i], f"sample {i}")
            got.append([i])
        assert got == expected(ref, epoch), f"epoch {epoch}"
        assert sampler.epoch == epoch
        assert len(loader) == N_EAGLE


@pytest.mark.parametrize("batch_size,drop_last", [(5, False), (5, True), (1, False)])
def test_sampler_with_batch_size(eagle_dataset, batch_size, drop_last):
    sampler = SeededSampler(N_EAGLE, seed=1)
    loader = libshard.Loader(eagle_dataset, sampler=sampler, batch_size=batch_size,
                             drop_last=drop_last, return_index=True, **SMALL)
    want = expected(SeededSampler(N_EAGLE, seed=1), 0, batch_size, drop_last)
    assert len(loader) == len(want)
    assert steps_of(loader) == want


def test_batch_sampler_set_epoch_and_collate(eagle_dataset):
    inner = SeededSampler(N_EAGLE, seed=9)
    batches = BatchSampler(inner, 3, drop_last=False)  # set_epoch goes to the inner sampler
    loader = libshard.Loader(eagle_dataset, batch_sampler=batches, collate="pad",
                             return_index=True, **SMALL)
    ref = BatchSampler(SeededSampler(N_EAGLE, seed=9), 3, drop_last=False)
    for epoch in (0, 1):
        assert steps_of(loader) == expected(ref, epoch)
    loader.set_epoch(7)
    assert inner.epoch == 7
    assert steps_of(loader) == expected(ref, 7)


def test_distributed_sampler_ranks_epochs(eagle_dataset):
    """Each rank streams its DistributedSampler's order as it is (no second split); together the
    ranks cover the epoch, with DistributedSampler's own padding."""
    world = 3
    ds = libshard.open(eagle_dataset)
    for epoch in (0, 2):
        seen = []
        for rank in range(world):
            sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=4)
            loader = libshard.Loader(ds, sampler=sampler, batch_size=2, rank=rank,
                                     world_size=world, return_index=True, **SMALL)
            loader.set_epoch(epoch)
            ref = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=4)
            got = steps_of(loader)
            assert got == expected(ref, epoch, 2), f"rank {rank} epoch {epoch}"
            seen += [i for step in got for i in step]
        assert sorted(set(seen)) == list(range(N_EAGLE))
        assert len(seen) == N_EAGLE  # 24 splits evenly over 3 ranks: no padding


def test_resume_mid_epoch_continues_exactly(eagle_dataset):
    def make(sampler=None):
        return libshard.Loader(eagle_dataset, sampler=sampler or SeededSampler(N_EAGLE, seed=3),
                               batch_size=4, return_index=True, **SMALL)

    full = make()
    full.set_epoch(2)
    want = steps_of(full)
    loader = make()
    loader.set_epoch(2)
    it = iter(loader)
    first = [[s[libshard.INDEX_KEY] for s in next(it)] for _ in range(2)]
    state = loader.state_dict()
    assert state["epoch"] == 2 and state["position"] == 2 and state["order"] == 0
    assert state["steps_digest"] != 0
    resumed = make()
    resumed.load_state_dict(state)
    rest = steps_of(resumed)
    assert first + rest == want
    # After the epoch the state points at the next epoch's start.
    after = resumed.state_dict()
    assert (after["epoch"], after["position"]) == (3, 0)


def test_resume_with_an_order_that_changed_is_refused(eagle_dataset):
    loader = libshard.Loader(eagle_dataset, sampler=UnseededSampler(N_EAGLE), **SMALL)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    other = libshard.Loader(eagle_dataset, sampler=UnseededSampler(N_EAGLE), **SMALL)
    with pytest.raises(libshard.InvalidArgumentError, match="another order"):
        other.load_state_dict(state)
    plain = libshard.Loader(eagle_dataset, **SMALL)
    with pytest.raises(libshard.InvalidArgumentError, match="sampler"):
        plain.load_state_dict(state)


def test_bad_samplers_are_refused(eagle_dataset):
    with pytest.raises(libshard.InvalidArgumentError, match=r"step 1 asks for sample 24.*24 samples"):
        libshard.Loader(eagle_dataset, batch_sampler=[[0, 1], [2, 24]], **SMALL)
    with pytest.raises(libshard.InvalidArgumentError, match="negative"):
        libshard.Loader(eagle_dataset, sampler=[3, -1], **SMALL)
    with pytest.raises(libshard.InvalidArgumentError, match="step 1 is empty"):
        libshard.Loader(eagle_dataset, batch_sampler=[[0], [], [1]], **SMALL)
    with pytest.raises(libshard.InvalidArgumentError, match="not a sequence"):
        libshard.Loader(eagle_dataset, batch_sampler=[0, 1], **SMALL)
    with pytest.raises(libshard.InvalidArgumentError, match="exclusive"):
        libshard.Loader(eagle_dataset, sampler=[0], batch_sampler=[[0]])
    with pytest.raises(libshard.InvalidArgumentError, match="exclusive"):
        libshard.Loader(eagle_dataset, batch_sampler=[[0]], batch_size=2)
    with pytest.raises(libshard.InvalidArgumentError, match="max_tokens"):
        libshard.Loader(eagle_dataset, sampler=[0, 1], max_tokens=100)


def test_plain_sampler_over_ranks_warns(eagle_dataset):
    with pytest.warns(UserWarning, match="does not split"):
        libshard.Loader(eagle_dataset, sampler=SeededSampler(N_EAGLE), rank=0, world_size=2,
                        **SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = libshard.open(eagle_dataset)
        libshard.Loader(ds, sampler=DistributedSampler(ds, num_replicas=2, rank=1), rank=1,
                        world_size=2, **SMALL)


def test_repeats_and_sequential(eagle_dataset):
    order = [3, 3, 0, 23, 3]
    loader = libshard.Loader(eagle_dataset, sampler=order, return_index=True, **SMALL)
    assert [s[0] for s in steps_of(loader)] == order
    seq = libshard.Loader(eagle_dataset, sampler=SequentialSampler(range(N_EAGLE)),
                          batch_size=6, collate="pack", return_index=True, **SMALL)
    assert steps_of(seq) == [list(range(k, k + 6)) for k in range(0, N_EAGLE, 6)]


def _recipe_batches(ds, order, max_len):
    """What collate='specforge-eagle3' builds for those batches, from a fresh loader each."""
    want = []
    with libshard.Loader(ds, batch_sampler=order, collate="specforge-eagle3", recipe_len=max_len,
                         return_index=True, memory_budget="64MiB") as loader:
        for batch in loader:
            want.append({k: v.clone() for k, v in batch.items()})
    return want


def _assert_batches(got, want, where):
    assert len(got) == len(want), where
    for b, (g, w) in enumerate(zip(got, want)):
        assert g.keys() == w.keys(), f"{where} batch {b}"
        for k in w:
            assert g[k].dtype == w[k].dtype and torch.equal(g[k], w[k]), f"{where} batch {b} {k}"


def test_ordered_loaders_keep_one_loader_across_iterations(eagle_dataset):
    """The drop-ins' OrderedLoaders: each open streams its order as the next epoch of the same
    C++ loader (one arena for every epoch): the batches are those of a fresh loader for that
    order, after a complete epoch, an epoch broken off, and with two iterations open at once
    (the second gets its own loader); a larger "auto" need makes a new one; close frees it."""
    from libshard._trainer_common import OrderedLoaders

    ds = libshard.Dataset(eagle_dataset)
    orders = [[[int(i) for i in torch.randperm(N_EAGLE, generator=torch.Generator()
                                               .manual_seed(seed))[k:k + 3]]
               for k in range(0, N_EAGLE - 2, 3)] for seed in range(4)]
    loaders = OrderedLoaders(ds, collate="specforge-eagle3", recipe_len=32,
                             memory_budget="64MiB")

    def run(order, stop=None):
        got = []
        with loaders.open(order) as it:
            for batch in it:
                got.append({k: v.clone() for k, v in batch.items()})
                if stop is not None and len(got) == stop:
                    break
        return got

    _assert_batches(run(orders[0]), _recipe_batches(ds, orders[0], 32), "epoch 0")
    first = loaders._idle[0]
    # A batch the trainer still holds when the next epoch starts keeps its bytes.
    with loaders.open(orders[3]) as it:
        held = [batch for batch in it]
    copies = [{k: v.clone() for k, v in b.items()} for b in held]
    run(orders[0])
    _assert_batches(held, copies, "held across the next epoch")
    del held, copies
    assert len(run(orders[1], stop=2)) == 2  # broken off: the next open starts afresh
    _assert_batches(run(orders[2]), _recipe_batches(ds, orders[2], 32), "after a break")
    assert loaders._idle[0] is first and loaders._idle[3] == 4

    # Two iterations open at once: the later one has a loader of its own; both are exact.
    a = loaders.open(orders[3])
    b = loaders.open(orders[0])
    with a as it_a, b as it_b:
        got_a = [{k: v.clone() for k, v in x.items()} for x in it_a]
        got_b = [{k: v.clone() for k, v in x.items()} for x in it_b]
    _assert_batches(got_a, _recipe_batches(ds, orders[3], 32), "first of two open")
    _assert_batches(got_b, _recipe_batches(ds, orders[0], 32), "second of two open")
    # b's iteration ended first (a with statement exits in reverse): its loader is kept, a's
    # (the first loader) closed, as one idle loader is kept at most.
    second = loaders._idle[0]
    assert second is not first and first._core is None and second._core is not None
    loaders.close()
    assert loaders._idle is None and second._core is None
    _assert_batches(run(orders[1]), _recipe_batches(ds, orders[1], 32), "after close")

    # "auto": the budget an order needs; a loader that holds it is kept, a larger need replaces it.
    auto = OrderedLoaders(ds, collate="specforge-eagle3", recipe_len=32)
    with auto.open(orders[0]) as it:
        list(it)
    kept = auto._idle[0]
    with auto.open(orders[1][:2]) as it:
        list(it)
    assert auto._idle[0] is kept
    auto._idle = (kept, auto._idle[1], 1, auto._idle[3])  # as if it had been made smaller
    with auto.open(orders[1]) as it:
        _assert_batches([{k: v.clone() for k, v in x.items()} for x in it],
                        _recipe_batches(ds, orders[1], 32), "a new loader")
    assert auto._idle[0] is not kept and kept._core is None
    auto.close()
