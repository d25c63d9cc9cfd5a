"""Padded token budgets and length-aware batching through libshard.Loader (issue 16): the
budget never exceeded, padding cut, exact-once and equal steps across ranks, resume on another
world size, and the guards of a resume whose epoch was batched otherwise."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest
import torch

import libshard

N = 300
LO, HI = 8, 200
BUDGET = 1024
SMALL = {"memory_budget": "64MiB"}


@pytest.fixture(scope="module")
def varlen_dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bucketing") / "ds"
    rnd = random.Random(16)
    gen = torch.Generator().manual_seed(16)
    with libshard.Writer(out, fsync=False) as w:
        for i in range(N):
            length = rnd.randint(LO, HI)
            w.write({"input_ids": torch.randint(0, 1000, (length,), generator=gen),
                     "hidden_state": torch.randn(1, length, 16, generator=gen).to(torch.bfloat16)},
                    key=f"s{i}")
    return out


def _indices(step: Dict[str, object]) -> List[int]:
    return step["__index__"].tolist()


def _padding(loader: libshard.Loader) -> float:
    positions = tokens = 0
    for step in loader:
        lengths = step["lengths"]
        assert step["input_ids"].shape == (len(lengths), int(lengths.max()))
        assert step["hidden_state"].shape[:2] == (len(lengths), int(lengths.max()))
        positions += step["input_ids"].numel()
        tokens += int(lengths.sum())
        assert step["input_ids"].numel() <= BUDGET, "a padded batch outgrew max_tokens"
    stats = loader.stats()
    assert stats["batch_positions"] == positions
    assert stats["padding_positions"] == positions - tokens
    assert stats["padding_share"] == pytest.approx((positions - tokens) / positions)
    return (positions - tokens) / positions


def test_pad_budget_bounds_the_batch_and_bucketing_cuts_padding(varlen_dataset):
    plain = libshard.Loader(varlen_dataset, max_tokens=BUDGET, collate="pad", bucket_window=None,
                            seed=1, **SMALL)
    bucketed = libshard.Loader(varlen_dataset, max_tokens=BUDGET, collate="pad", seed=1, **SMALL)
    assert bucketed.state_dict()["bucketing"] == {"window": 4096, "batch_size": 0,
                                                  "max_tokens": BUDGET, "budget": "padded"}
    share_plain = _padding(plain)
    share_bucketed = _padding(bucketed)
    assert share_bucketed < 0.10 < share_plain


def test_summed_budget_with_pack(varlen_dataset):
    loader = libshard.Loader(varlen_dataset, max_tokens=BUDGET, collate="pack", seed=2, **SMALL)
    assert loader.state_dict()["bucketing"] is None  # "auto" turns bucketing on for "pad" only
    seen = []
    for step in loader:
        assert int(step["cu_seqlens"][-1]) <= BUDGET or len(step["lengths"]) == 1
        seen += step["lengths"].tolist()
    assert len(seen) == N


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_exactly_once_and_equal_steps_across_ranks(varlen_dataset, world):
    steps = []
    for rank in range(world):
        loader = libshard.Loader(varlen_dataset, max_tokens=BUDGET, collate="pad", seed=3,
                                 bucket_window=64, rank=rank, world_size=world,
                                 return_index=True, **SMALL)
        steps.append([_indices(s) for s in loader])
        assert len(steps[-1]) == len(loader)
    assert len({len(s) for s in steps}) == 1, "every rank takes the same number of steps"
    # Padding (the wrap-around repeats) comes last; the real units cover each sample once.
    flat = [i for k in range(len(steps[0])) for r in range(world) for i in steps[r][k]]
    assert sorted(set(flat)) == list(range(N))
    first = {}
    for pos, i in enumerate(flat):
        first.setdefault(i, pos)
    repeats = [pos for pos, i in enumerate(flat) if first[i] != pos]
    assert repeats == list(range(len(flat) - len(repeats), len(flat))), "repeats only at the end"


def test_fixed_batches_bucketed_and_drop_last(varlen_dataset):
    loader = libshard.Loader(varlen_dataset, batch_size=16, collate="pad", drop_last=True,
                             seed=4, return_index=True, **SMALL)
    batches = [_indices(s) for s in loader]
    assert all(len(b) == 16 for b in batches) and len(batches) == N // 16
    flat = [i for b in batches for i in b]
    assert len(set(flat)) == len(flat)
    assert loader.stats()["padding_share"] < 0.10


def test_resume_on_another_world_size_continues_exactly_once(varlen_dataset):
    opts = dict(max_tokens=BUDGET, collate="pad", seed=5, bucket_window=50, return_index=True,
                **SMALL)
    delivered: List[int] = []
    loaders = [libshard.Loader(varlen_dataset, rank=r, world_size=2, **opts) for r in range(2)]
    its = [iter(l) for l in loaders]
    for _ in range(3):
        for it in its:
            delivered += _indices(next(it))
    state = loaders[0].state_dict()
    assert state == loaders[1].state_dict()
    assert state["bucketing"]["window"] == 50
    rest: List[List[List[int]]] = []
    for r in range(3):
        l = libshard.Loader(varlen_dataset, rank=r, world_size=3, **opts)
        l.load_state_dict(state)
        rest.append([_indices(s) for s in l])
    real = len(set(range(N)) - set(delivered))
    flat = [i for k in range(len(rest[0])) for r in range(3) for i in rest[r][k]]
    assert sorted(delivered + flat[:real]) == list(range(N))


def test_resume_with_other_bucketing_is_refused_mid_epoch(varlen_dataset):
    loader = libshard.Loader(varlen_dataset, max_tokens=BUDGET, collate="pad", seed=6, **SMALL)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    other = libshard.Loader(varlen_dataset, max_tokens=BUDGET // 2, collate="pad", seed=6,
                            **SMALL)
    with pytest.raises(libshard.InvalidArgumentError, match="batched by length.*max_tokens 1024"):
        other.load_state_dict(state)
    # At an epoch boundary the new settings apply.
    for _ in it:
        pass
    other.load_state_dict(loader.state_dict())
    assert other.state_dict()["bucketing"]["max_tokens"] == BUDGET // 2


def test_state_without_bucketing_finishes_its_epoch_unbucketed(varlen_dataset):
    """A state saved before bucketing existed (or with it off) continues the epoch over the
    shuffled order itself, exactly once; bucketing starts with the next epoch."""
    opts = dict(max_tokens=BUDGET, collate="pad", seed=7, return_index=True, **SMALL)
    old = libshard.Loader(varlen_dataset, bucket_window=None, **opts)
    it = iter(old)
    head = [i for _ in range(4) for i in _indices(next(it))]
    state = old.state_dict()
    del state["bucketing"]  # as an earlier libshard saved it
    new = libshard.Loader(varlen_dataset, **opts)
    new.load_state_dict(state)
    assert new.state_dict()["bucketing"] is None
    tail = [i for s in new for i in _indices(s)]
    assert sorted(head + tail) == list(range(N))
    next(iter(new))  # the next epoch is bucketed
    assert new.state_dict()["bucketing"]["window"] == 4096


def test_oversized_samples(varlen_dataset):
    small = 100  # shorter than the longest samples
    with pytest.raises(libshard.InvalidArgumentError, match="tokens, more than max_tokens = 100"):
        libshard.Loader(varlen_dataset, max_tokens=small, oversized="error", **SMALL)
    loader = libshard.Loader(varlen_dataset, max_tokens=small, collate="pad", **SMALL)
    over = [s for s in loader if s["input_ids"].numel() > small]
    assert over and all(len(s["lengths"]) == 1 for s in over), "an oversized sample goes alone"
    clipped = libshard.Loader(varlen_dataset, max_tokens=small, max_len=small, collate="pad",
                              oversized="error", **SMALL)
    assert all(s["input_ids"].numel() <= small for s in clipped)


def test_bad_options(varlen_dataset):
    with pytest.raises(libshard.InvalidArgumentError, match="bucket_window"):
        libshard.Loader(varlen_dataset, bucket_window=64, **SMALL)
    with pytest.raises(libshard.InvalidArgumentError, match="token_budget"):
        libshard.Loader(varlen_dataset, max_tokens=10, token_budget="most", **SMALL)
    with pytest.raises(libshard.InvalidArgumentError, match="oversized"):
        libshard.Loader(varlen_dataset, max_tokens=10, oversized="drop", **SMALL)


def _info_batches(dataset: Path, spec: str) -> list:
    from conftest import _cli
    cli = _cli()
    if cli is None:
        pytest.skip("libshard binary not built")
    out = subprocess.run([cli, "info", str(dataset), "--json", "--batches", spec],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["batches"]


def test_info_batches_plans_what_the_loader_delivers(varlen_dataset):
    rows = _info_batches(varlen_dataset, f"max_tokens={BUDGET},seed=9")
    assert [r["budget"] for r in rows] == ["sum", "padded", "padded"]
    assert [r["bucket_window"] for r in rows] == [0, 0, 4096]
    for row, collate, window in zip(rows, ["pack", "pad", "pad"], [None, None, "auto"]):
        loader = libshard.Loader(varlen_dataset, max_tokens=BUDGET, collate=collate,
                                 bucket_window=window, seed=9, **SMALL)
        positions = largest = tokens = 0
        for step in loader:
            lengths = step["lengths"]
            size = len(lengths) * int(lengths.max())
            positions += size
            tokens += int(lengths.sum())
            largest = max(largest, size)
        assert row["batches"] == len(loader)
        assert row["samples"] == N
        assert (row["positions"], row["tokens"], row["largest_positions"]) == \
            (positions, tokens, largest)
        assert row["padding_share"] == pytest.approx(loader.stats()["padding_share"])
    assert rows[2]["padding_share"] < 0.10 < rows[1]["padding_share"]
    assert rows[1]["largest_positions"] <= BUDGET < rows[0]["largest_positions"]


def test_info_batches_bad_spec(varlen_dataset):
    from conftest import _cli
    cli = _cli()
    if cli is None:
        pytest.skip("libshard binary not built")
    for spec, message in [("foo=1", "unknown key 'foo'"), ("max_tokens=x", "not a number"),
                          ("bucket_window=8", "needs max_tokens=N or batch_size"),
                          ("max_tokens=10,budget=most", "not one of auto, sum, padded")]:
        p = subprocess.run([cli, "info", str(varlen_dataset), "--batches", spec],
                           capture_output=True, text=True)
        assert p.returncode != 0 and message in p.stderr, (spec, p.stderr)
