"""A loader's state knows its dataset (issue 45.2; docs/ORDER.md §8, docs/guide/loading.md): the
state_dict() of state version 2 carries the dataset's identity digest, its sample count and the
order's shuffle; load_state_dict on another dataset, with another shuffle, or with a seed / order
version given that is not the state's, raises naming what differs and both values. A resume on
another world size, and a state of version 1 (which records none of it), still resume.
"""
# suite: check

from __future__ import annotations

import json

import pytest
import torch

import libshard

SMALL = dict(memory_budget=8 << 20, return_index=True)


def write(path, attrs, n=12):
    with libshard.Writer(path, attrs=attrs, fsync=False) as w:
        for i in range(n):
            g = torch.Generator().manual_seed(i)
            w.write({"input_ids": torch.randint(0, 100, (3 + i % 4,), generator=g)},
                    key=f"k{i}")
    return path


def indices(batches):
    return [[s["__index__"] for s in b] for b in batches]


def head(loader, steps):
    it = iter(loader)
    return [[s["__index__"] for s in next(it)] for _ in range(steps)]


@pytest.fixture
def two(tmp_path):
    a = write(tmp_path / "a", {"target_model": "A", "seed": 1})
    b = write(tmp_path / "b", {"target_model": "B", "seed": 1})
    return a, b


def test_state_dict_carries_the_dataset_identity(two):
    a, _ = two
    loader = libshard.Loader(a, batch_size=2, seed=5, **SMALL)
    head(loader, 2)
    state = loader.state_dict()
    assert state["state_version"] == 2
    assert state["identity"] == libshard.open(a).identity.digest
    assert state["samples"] == 12 and state["shuffle"] is True
    json.dumps(state)  # plain data, as before


def test_resume_on_another_dataset_names_the_identity(two):
    a, b = two
    loader = libshard.Loader(a, batch_size=2, **SMALL)
    head(loader, 2)
    state = loader.state_dict()
    other = libshard.Loader(b, batch_size=2, **SMALL)
    with pytest.raises(ValueError, match="identity") as e:
        other.load_state_dict(state)
    assert isinstance(e.value, libshard.InvalidArgumentError)
    msg = str(e.value)
    assert libshard.open(a).identity.digest in msg and libshard.open(b).identity.digest in msg
    assert "the dataset the checkpoint was saved from" in msg
    # The loader keeps serving what it served before the refused state.
    assert len(indices(other)) == 6
    # A state of version 1 (saved before states knew their dataset) resumes as it did.
    v1 = {k: v for k, v in state.items() if k not in ("identity", "samples", "shuffle")}
    other.load_state_dict({**v1, "state_version": 1})
    assert len(indices(other)) == 4


def test_resume_with_another_seed_names_the_seed(two):
    a, _ = two
    full = indices(libshard.Loader(a, batch_size=2, seed=5, **SMALL))
    loader = libshard.Loader(a, batch_size=2, seed=5, **SMALL)
    first = head(loader, 2)
    state = loader.state_dict()
    with pytest.raises(libshard.InvalidArgumentError, match="'seed' is 6.*seed 5") as e:
        libshard.Loader(a, batch_size=2, seed=6, **SMALL).load_state_dict(state)
    assert "seed=5" in str(e.value) and "drop the state" in str(e.value)
    with pytest.raises(libshard.InvalidArgumentError, match="'order' is 1.*order version 2"):
        libshard.Loader(a, batch_size=2, order=1, **SMALL).load_state_dict(state)
    with pytest.raises(libshard.InvalidArgumentError, match="shuffle"):
        libshard.Loader(a, batch_size=2, shuffle=False, **SMALL).load_state_dict(state)
    # Without a seed the state's is taken; the same seed is the same order.
    for kw in ({}, {"seed": 5}):
        resumed = libshard.Loader(a, batch_size=2, **kw, **SMALL)
        resumed.load_state_dict(state)
        assert first + indices(resumed) == full


def test_resume_on_another_world_size_still_works(two):
    a, _ = two
    full = indices(libshard.Loader(a, batch_size=2, seed=5, **SMALL))
    loader = libshard.Loader(a, batch_size=2, seed=5, **SMALL)
    first = head(loader, 2)
    state = loader.state_dict()
    rest = []
    for rank in range(2):
        r = libshard.Loader(a, batch_size=2, rank=rank, world_size=2, **SMALL)
        r.load_state_dict(state)
        rest += sum(indices(r), [])
    assert sorted(sum(first, []) + rest) == sorted(sum(full, []))


def test_an_append_resumes_at_the_next_epoch_not_inside_one(tmp_path):
    attrs = {"target_model": "A"}
    path = write(tmp_path / "a", attrs, n=8)
    loader = libshard.Loader(path, batch_size=2, **SMALL)
    head(loader, 1)
    inside = loader.state_dict()
    indices(loader)
    between = loader.state_dict()
    assert (between["epoch"], between["position"]) == (1, 0)
    with libshard.Writer(path, attrs=attrs, fsync=False) as w:  # reopened: appends
        g = torch.Generator().manual_seed(99)
        w.write({"input_ids": torch.randint(0, 100, (4,), generator=g)}, key="k99")
    assert libshard.open(path).identity.digest == inside["identity"]
    again = libshard.Loader(path, batch_size=2, **SMALL)
    with pytest.raises(libshard.InvalidArgumentError, match="8 samples.*has 9 samples"):
        again.load_state_dict(inside)
    again.load_state_dict(between)
    assert sorted(sum(indices(again), [])) == list(range(9))
