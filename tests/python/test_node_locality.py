"""The node-local order through libshard.Loader (locality="node", order version 3,
docs/ORDER.md §5): every rank of every node over a real packed dataset, exact-once per epoch,
each node reading the same share every epoch, state_dict/load_state_dict on the same nodes and on
other node counts, nodes resolved from torchrun's and Slurm's variables, and `libshard info
--nodes`."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from typing import Dict, List, Optional

import pytest

import libshard
from conftest import N_EAGLE, _cli


def _rank_loader(ds: str, rank: int, world: int, nodes: Optional[int], **kw) -> libshard.Loader:
    return libshard.Loader(ds, rank=rank, world_size=world, locality="node", nodes=nodes,
                           return_index=True, memory_budget="8MiB", seed=3, **kw)


def _indices(step) -> List[int]:
    if isinstance(step, list):
        return [s["__index__"] for s in step]
    return [step["__index__"]]


def _epoch(loaders: List[libshard.Loader]) -> List[List[List[int]]]:
    return [[_indices(step) for step in loader] for loader in loaders]


@pytest.mark.parametrize("nodes,local", [(1, 3), (2, 2), (3, 1), (4, 2)])
def test_every_rank_of_every_node_covers_each_epoch_once(eagle_dataset, nodes, local):
    world = nodes * local
    loaders = [_rank_loader(str(eagle_dataset), r, world, nodes) for r in range(world)]
    shares = []
    for epoch in range(2):
        served = _epoch(loaders)
        steps = {len(rank) for rank in served}
        assert len(steps) == 1, f"every rank takes the same steps: {steps}"
        assert len(loaders[0]) == steps.pop()
        counts = Counter(i for rank in served for step in rank for i in step)
        assert set(counts) == set(range(N_EAGLE))
        # Repeats are padding: at most one step per rank, from the rank's own node.
        assert sum(counts.values()) - N_EAGLE <= world
        node_samples = [set(i for r in range(k * local, (k + 1) * local)
                            for step in served[r] for i in step) for k in range(nodes)]
        for a in range(nodes):
            for b in range(a + 1, nodes):
                assert not node_samples[a] & node_samples[b], "a sample read by two nodes"
        shares.append(node_samples)
        state = loaders[0].state_dict()
        assert state["order"] == 3
    assert shares[0] == shares[1], "each node reads the same share every epoch"


def test_same_nodes_resume_continues_every_rank_exactly(eagle_dataset):
    ds, nodes, world = str(eagle_dataset), 2, 4
    whole = _epoch([_rank_loader(ds, r, world, nodes, batch_size=2) for r in range(world)])
    resumed = []
    for r in range(world):
        loader = _rank_loader(ds, r, world, nodes, batch_size=2)
        it = iter(loader)
        first = [_indices(next(it)) for _ in range(2)]
        state = loader.state_dict()
        assert state["locality"] == {"nodes": 2, "local_world_size": 2, "steps": 2}
        again = _rank_loader(ds, r, world, nodes, batch_size=2)
        again.load_state_dict(state)
        resumed.append(first + [_indices(step) for step in again])
    assert resumed == whole


def test_elastic_resume_on_other_nodes_serves_the_rest_once(eagle_dataset):
    ds = str(eagle_dataset)
    before = [_rank_loader(ds, r, 4, 2) for r in range(4)]
    consumed: List[int] = []
    states: List[Dict] = []
    for loader in before:
        it = iter(loader)
        for _ in range(2):
            consumed += _indices(next(it))
        states.append(loader.state_dict())
    assert all(s == states[0] for s in states), "the state is the same on every rank"
    assert states[0]["position"] == len(consumed) == 8
    # On 3 nodes of 1 rank, then plain global loaders: the rest of epoch 0, then epoch 1.
    for world, nodes, locality in [(3, 3, "node"), (2, None, "global")]:
        rest: List[int] = []
        for r in range(world):
            loader = libshard.Loader(ds, rank=r, world_size=world, locality=locality, nodes=nodes,
                                     return_index=True, memory_budget="8MiB", seed=3)
            loader.load_state_dict(states[0])
            steps = [_indices(step) for step in loader]
            rest += [i for step in steps for i in step]
            if r == 0:
                assert loader.state_dict()["epoch"] == 1
        counts = Counter(rest)
        assert set(counts) | set(consumed) == set(range(N_EAGLE))
        assert not set(counts) & set(consumed), "a sample served twice in the epoch"
        assert sum(counts.values()) - len(counts) <= world


def test_nodes_come_from_the_launcher(eagle_dataset, monkeypatch):
    ds = str(eagle_dataset)
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    monkeypatch.setenv("GROUP_RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    loader = libshard.Loader(ds, rank=2, world_size=4, locality="node", return_index=True,
                             memory_budget="8MiB")
    next(iter(loader))
    assert loader.state_dict()["locality"]["nodes"] == 2
    with pytest.raises(libshard.InvalidArgumentError, match="GROUP_RANK is 1"):
        libshard.Loader(ds, rank=0, world_size=4, locality="node", memory_budget="8MiB")
    monkeypatch.delenv("GROUP_WORLD_SIZE")
    monkeypatch.delenv("GROUP_RANK")
    monkeypatch.delenv("LOCAL_RANK")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "3")
    with pytest.raises(libshard.InvalidArgumentError, match="does not divide world_size 4"):
        libshard.Loader(ds, rank=0, world_size=4, locality="node", memory_budget="8MiB")


def test_bad_locality_options_are_refused(eagle_dataset):
    ds = str(eagle_dataset)
    with pytest.raises(libshard.InvalidArgumentError, match="locality"):
        libshard.Loader(ds, locality="rack")
    with pytest.raises(libshard.InvalidArgumentError, match="order"):
        libshard.Loader(ds, locality="node", order=1)
    with pytest.raises(libshard.InvalidArgumentError, match="no sample for node"):
        libshard.Loader(ds, locality="node", nodes=N_EAGLE + 1, world_size=N_EAGLE + 1)


def test_info_nodes_reports_each_nodes_share(eagle_dataset):
    cli = _cli()
    if cli is None:
        pytest.skip("no libshard command line built")
    out = subprocess.run([cli, "info", str(eagle_dataset), "--nodes", "3", "--json"],
                         check=True, capture_output=True, text=True).stdout
    nodes = json.loads(out)["nodes"]
    assert nodes["nodes"] == 3 and len(nodes["shares"]) == 3
    assert sum(s["samples"] for s in nodes["shares"]) == N_EAGLE
    text = subprocess.run([cli, "info", str(eagle_dataset), "--nodes", "2"], check=True,
                          capture_output=True, text=True).stdout
    assert "locality='node'" in text
