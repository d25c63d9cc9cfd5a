"""Follow mode with every dataset keyword, in each state of a write (docs/guide/loading.md,
"Training while the dataset is written"): not started yet, being written, closed (one writer
and the parts of a multi-rank write). Each entry point (``libshard.open(..., follow=True)`` then
``check(expect)``, ``libshard.Loader(..., follow=True, expect=...)``) gives the dataset's samples
or an error the docs name (``InvalidArgumentError`` naming the option and the dataset); no other
exception (the ``TypeError`` of ``FollowedDataset.check`` on a closed dataset was one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch

import libshard

ATTRS = {"target_model": "org/model", "hidden_size": 8}
N = 6


def _sample(i: int) -> Dict[str, torch.Tensor]:
    return {"input_ids": torch.arange(i, i + 4), "ident": torch.tensor([i])}


def _write(out: Path, n: int, *, close: bool, rank: int = 0, world: int = 1) -> libshard.Writer:
    w = libshard.Writer(out, attrs=ATTRS, commit_interval=0.01, rank=rank, world_size=world)
    for i in range(n):
        w.write(_sample(rank * 100 + i), key=f"r{rank}/s{i}")
    if close:
        w.close()
    else:
        w.flush()  # journaled: what a follower sees of a write in progress
    return w


@pytest.fixture(params=["not_started", "being_written", "closed", "closed_parts",
                        "parts_being_written"])
def state(request, tmp_path):
    out = tmp_path / "ds"
    writers: List[libshard.Writer] = []
    if request.param == "being_written":
        writers.append(_write(out, N, close=False))
    elif request.param == "closed":
        _write(out, N, close=True)
    elif request.param == "closed_parts":
        for r in range(2):
            _write(out, N // 2, close=True, rank=r, world=2)
    elif request.param == "parts_being_written":  # rank 0 closed its part, rank 1 writes
        _write(out, N // 2, close=True, rank=0, world=2)
        writers.append(_write(out, N // 2, close=False, rank=1, world=2))
    yield request.param, out
    for w in writers:
        w.abort()


# The dataset keywords of each entry point, with values valid for a local dataset.
OPEN_KEYWORDS: List[Dict[str, Any]] = [
    {}, {"verify": False}, {"metadata": False}, {"cache": None, "cache_size": None},
    {"cache_size": "1GiB"}, {"verify": True, "metadata": True, "cache_size": 0},
]
LOADER_KEYWORDS: List[Dict[str, Any]] = [
    {}, {"verify": False}, {"verify": True}, {"metadata": False}, {"cache_size": "1GiB"},
    {"cache": None, "cache_size": None}, {"batch_size": 2}, {"return_index": True},
]


def _complete(name: str) -> bool:
    return name.startswith("closed")


@pytest.mark.parametrize("kw", OPEN_KEYWORDS, ids=lambda k: ",".join(k) or "none")
def test_open_follow_with_each_keyword_then_check(state, kw):
    name, out = state
    ds = libshard.open(out, follow=True, **kw)
    assert len(ds) == (0 if name == "not_started" else N)
    ds.check(None)
    ds.check({})
    if _complete(name):
        ds.check(ATTRS)
        ds.check({"target_model": "org/model"})
        with pytest.raises(libshard.InvalidArgumentError, match=r"target_model.*'other'"):
            ds.check({"target_model": "other"})
        with pytest.raises(libshard.InvalidArgumentError, match="hidden_size"):
            ds.check({"hidden_size": 9})
        assert ds.complete
    else:
        with pytest.raises(libshard.InvalidArgumentError, match=str(out)) as e:
            ds.check(ATTRS)
        assert "expect=" in str(e.value) and "being written" in str(e.value)
    if len(ds):
        got = ds[0]
        assert ("ident" in got) and (kw.get("metadata", True) or set(got) == {"input_ids",
                                                                               "ident"})


def test_open_follow_refuses_read_ahead_naming_it(state):
    _, out = state
    with pytest.raises(libshard.InvalidArgumentError, match="read_ahead"):
        libshard.open(out, follow=True, read_ahead={"memory_budget": "64MiB"})


@pytest.mark.parametrize("kw", LOADER_KEYWORDS, ids=lambda k: ",".join(k) or "none")
def test_loader_follow_with_expect_and_each_keyword(state, kw):
    name, out = state
    if not _complete(name):
        with pytest.raises(libshard.InvalidArgumentError) as e:
            libshard.Loader(out, follow=True, expect=ATTRS, **kw)
        assert str(out) in str(e.value) and "expect=" in str(e.value)
        loader = libshard.Loader(out, follow=True, **kw)  # without expect it follows
        loader.close()
        return
    with pytest.raises(libshard.InvalidArgumentError, match="target_model"):
        libshard.Loader(out, follow=True, expect={"target_model": "other"}, **kw)
    loader = libshard.Loader(out, follow=True, expect=ATTRS, shuffle=False, **kw)
    seen = []
    for step in loader:
        for s in (step if isinstance(step, list) else [step]):
            seen.append(int(s["ident"][0]))
    loader.close()
    want = sorted(i for i in range(N)) if name == "closed" else \
        sorted([i for i in range(N // 2)] + [100 + i for i in range(N // 2)])
    assert sorted(seen) == want


def test_a_dataset_given_as_a_followed_dataset_keeps_its_checks(state):
    name, out = state
    ds = libshard.open(out, follow=True)
    if _complete(name):
        loader = libshard.Loader(ds, follow=True, expect=ATTRS)
        assert sum(1 for _ in loader) == N
        loader.close()
    else:
        with pytest.raises(libshard.InvalidArgumentError, match="expect="):
            libshard.Loader(ds, follow=True, expect=ATTRS)
