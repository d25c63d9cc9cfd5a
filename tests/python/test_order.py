"""The order as one value (libshard.Order, docs/ORDER.md) and the state the library encodes
(docs/ORDER.md §8): every grouped order serves exactly the batches of its flat keywords; spellings
that have no order are refused naming the keyword; state_dict() is the library's encoding, which
survives torch.save; the state dicts saved by the current release still resume exactly."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest
import torch
from torch.utils.data import BatchSampler, Sampler

import libshard
from libshard import Order, _core
from conftest import N_EAGLE

SMALL = dict(memory_budget="8MiB", return_index=True)
GOLDEN_STATES = Path(__file__).resolve().parents[1] / "data" / "loader_state"


class Seeded(Sampler):
    def __init__(self, n: int) -> None:
        self.n, self.epoch = n, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        return iter(torch.randperm(self.n, generator=torch.Generator().manual_seed(self.epoch))
                    .tolist())

    def __len__(self) -> int:
        return self.n


def _indices(step: Any) -> List[int]:
    if isinstance(step, list):
        return [s["__index__"] for s in step]
    index = step["__index__"]
    return index.tolist() if isinstance(index, torch.Tensor) else [index]


def _epochs(loader: libshard.Loader, epochs: int = 2) -> List[List[List[int]]]:
    return [[_indices(s) for s in loader] for _ in range(epochs)]


@pytest.mark.parametrize("grouped,flat", [
    (Order.shuffled(), {}),
    (Order.shuffled(seed=7), {"seed": 7}),
    (Order.shuffled(seed=7, version=1), {"seed": 7, "order": 1}),
    (Order.unshuffled(), {"shuffle": False}),
    (Order.node_local(nodes=2, seed=3), {"locality": "node", "nodes": 2, "seed": 3}),
    (Order.node_local(nodes=1, shuffle=False), {"locality": "node", "nodes": 1, "shuffle": False}),
])
def test_a_grouped_order_serves_the_batches_of_its_flat_keywords(eagle_dataset, grouped, flat):
    for rank in range(2):
        a = libshard.Loader(eagle_dataset, order=grouped, batch_size=2, rank=rank, world_size=2,
                            **SMALL)
        b = libshard.Loader(eagle_dataset, batch_size=2, rank=rank, world_size=2, **flat, **SMALL)
        assert _epochs(a) == _epochs(b)
        assert a.state_dict() == b.state_dict()


def test_a_sampler_given_as_an_order(eagle_dataset):
    grouped = libshard.Loader(eagle_dataset, order=Order.sampler(Seeded(N_EAGLE)), batch_size=3,
                              **SMALL)
    flat = libshard.Loader(eagle_dataset, sampler=Seeded(N_EAGLE), batch_size=3, **SMALL)
    assert _epochs(grouped) == _epochs(flat)
    batches = BatchSampler(Seeded(N_EAGLE), 4, drop_last=False)
    grouped = libshard.Loader(eagle_dataset, order=Order.batch_sampler(batches), **SMALL)
    flat = libshard.Loader(eagle_dataset, batch_sampler=batches, **SMALL)
    assert _epochs(grouped) == _epochs(flat)
    assert grouped.state_dict()["order"] == 0


def test_spellings_without_an_order_are_refused_naming_the_keyword(eagle_dataset):
    for kwargs, words in [
            (dict(order=Order.node_local(), follow=True), "two kinds of order"),
            (dict(order=Order.shuffled(seed=1), seed=2), "'seed' is given twice"),
            (dict(order=Order.shuffled(), shuffle=False), "contradicts order=Order.shuffled()"),
            (dict(order=Order.node_local(), locality="global"), "contradict"),
            (dict(order=Order.shuffled(version=3)), "'order.version' = 3"),
            (dict(order=Order("shuffled", {"nodes": 2})), "'order.nodes' does not apply"),
            (dict(order=Order("rack")), "'order.kind' = 'rack'"),
            (dict(order=Order.node_local(), sampler=[0, 1]), "two kinds of order"),
            (dict(order=Order.sampler([0, 1]), sampler=[1, 0]), "give one"),
            (dict(order=Order("caller")), "needs its sampler"),
            (dict(locality="node", order=1), "cannot be node-local")]:
        with pytest.raises(libshard.InvalidArgumentError, match=words):
            libshard.Loader(eagle_dataset, **kwargs, **SMALL)


def test_the_order_options_are_the_librarys(eagle_dataset):
    rows = {row["name"]: row for row in _core.order_option_table()}
    assert set(rows) == {"kind", "shuffle", "seed", "version", "nodes", "node_rank",
                         "shuffle_window"}
    assert set(rows["kind"]["choices"]) == {"shuffled", "unshuffled", "node_local", "caller",
                                            "follow"}
    # Every factory's keyword is a setting of the group, left to the library when None.
    import inspect
    for factory in (Order.shuffled, Order.node_local, Order.follow):
        for name, p in inspect.signature(factory).parameters.items():
            assert name in rows and p.default is None, (factory, name)
    assert repr(Order.node_local(nodes=4)) == "Order.node_local(nodes=4)"
    assert Order.shuffled(seed=1) == Order.shuffled(seed=1) != Order.shuffled(seed=2)
    loader_rows = {row["name"]: row for row in _core.loader_option_table()}
    assert {name for name, row in loader_rows.items() if row["group"] == "order"} == {
        "order", "shuffle", "seed", "locality", "nodes", "node_rank", "caller_order", "follow",
        "shuffle_window"}


def test_state_dict_is_the_librarys_encoding_and_survives_torch_save(eagle_dataset, tmp_path):
    full = _epochs(libshard.Loader(eagle_dataset, seed=4, batch_size=2, **SMALL), 1)[0]
    loader = libshard.Loader(eagle_dataset, seed=4, batch_size=2, **SMALL)
    it = iter(loader)
    head = [_indices(next(it)) for _ in range(3)]
    state = loader.state_dict()
    identity = libshard.open(eagle_dataset).identity
    assert state == {"state_version": 2, "order": 2, "epoch": 0, "position": 6, "skipped": [],
                     "seed": 4, "bucketing": None,
                     "identity": identity.digest if identity.recorded else None,
                     "samples": N_EAGLE, "shuffle": True}
    assert json.loads(_core.Loader(libshard.Dataset(eagle_dataset)._core, {"seed": 4})
                      .state()) == {**state, "position": 0}
    torch.save({"loader": state}, tmp_path / "ckpt.pt")
    saved = torch.load(tmp_path / "ckpt.pt")["loader"]
    resumed = libshard.Loader(eagle_dataset, batch_size=2, **SMALL)
    resumed.load_state_dict(saved)
    assert head + [_indices(s) for s in resumed] == full
    # Integers of another type (numpy, a 0-dim tensor) are integers; anything else is refused.
    again = libshard.Loader(eagle_dataset, batch_size=2, **SMALL)
    again.load_state_dict(dict(saved, position=np.int64(6), epoch=torch.tensor(0)))
    assert head + [_indices(s) for s in again] == full
    with pytest.raises(libshard.InvalidArgumentError, match="state_dict"):
        again.load_state_dict(dict(saved, position=object()))
    with pytest.raises(libshard.InvalidArgumentError, match="resume.position"):
        again.load_state_dict(dict(saved, position=6.0))
    with pytest.raises(libshard.InvalidArgumentError, match="newer libshard"):
        again.load_state_dict(dict(saved, state_version=3))
    with pytest.raises(libshard.InvalidArgumentError, match="not a key of a state"):
        again.load_state_dict(dict(saved, locality=None))


def _release_state(state: Dict[str, Any]) -> Dict[str, Any]:
    """The dict the release before the encoding gave for `state` (ints, a list, None or small
    dicts), as checkpoints hold it: seed, epoch, position, skipped, order, bucketing, locality,
    and a caller's steps_digest or the follow epoch's follow_window."""
    out = {"seed": state.get("seed", 0), "epoch": state["epoch"], "position": state["position"],
           "skipped": list(state["skipped"]), "order": state["order"],
           "bucketing": state.get("bucketing"), "locality": state.get("locality")}
    if "steps_digest" in state:
        out["steps_digest"] = state["steps_digest"]
    return out


@pytest.mark.parametrize("kwargs", [
    dict(seed=8, batch_size=2),
    dict(seed=8, batch_size=2, order=1),
    dict(seed=5, max_tokens=60, collate="pad"),                     # bucketed
    dict(seed=3, locality="node", nodes=2, rank=1, world_size=2),   # order version 3
    dict(sampler=Seeded(N_EAGLE), batch_size=3),                    # a caller's order
])
def test_a_state_dict_saved_by_the_current_release_still_resumes_exactly(eagle_dataset, tmp_path,
                                                                         kwargs):
    """The release before this one saved state_dict() as a plain dict of five (and more) fields;
    such a checkpoint, torch.save'd, resumes at the same next step in this one."""
    full = [_indices(s) for s in libshard.Loader(eagle_dataset, **kwargs, **SMALL)]
    loader = libshard.Loader(eagle_dataset, **kwargs, **SMALL)
    it = iter(loader)
    head = [_indices(next(it)) for _ in range(2)]
    old = _release_state(loader.state_dict())
    assert "state_version" not in old
    torch.save(old, tmp_path / "old.pt")
    resumed = libshard.Loader(eagle_dataset, **kwargs, **SMALL)
    resumed.load_state_dict(torch.load(tmp_path / "old.pt"))
    assert head + [_indices(s) for s in resumed] == full
    # What it saves now is the library's encoding of the same state.
    assert resumed.state_dict()["state_version"] == 2


def test_the_golden_release_state_dicts_decode_to_the_golden_states():
    for legacy in sorted(GOLDEN_STATES.glob("legacy_*.json")):
        current = GOLDEN_STATES / legacy.name[len("legacy_"):]
        old = json.loads(legacy.read_text())
        options = {"resume": json.dumps(old), "pin_memory": "off"}
        if old.get("order") == 0:
            options["caller_order"] = True
        elif old.get("follow_window"):
            options["follow"] = True
        assert _core.resolve_loader_order(options)  # decoded and checked by the library
        assert json.loads(current.read_text())["state_version"] == 1


def test_a_node_local_epoch_finished_by_a_global_loader_leaves_a_global_state(eagle_dataset):
    """A node-local state resumed without locality finishes its epoch in version 3; the next
    epoch is the global order's, and so is its state, which resumes (it kept saying version 3
    without its nodes, which the next resume refused)."""
    node = libshard.Loader(eagle_dataset, locality="node", nodes=2, rank=0, world_size=2, seed=3,
                           **SMALL)
    it = iter(node)
    next(it)
    state = node.state_dict()
    assert state["order"] == 3 and state["locality"]["nodes"] == 2
    plain = libshard.Loader(eagle_dataset, seed=3, **SMALL)
    plain.load_state_dict(state)
    rest = [_indices(s) for s in plain]
    assert rest and plain.state_dict()["order"] == 3  # the end of the node-local epoch
    it = iter(plain)
    first = _indices(next(it))
    after = plain.state_dict()
    assert after["order"] == 2 and after["epoch"] == 1 and "locality" not in after
    again = libshard.Loader(eagle_dataset, seed=3, **SMALL)
    again.load_state_dict(after)
    whole = libshard.Loader(eagle_dataset, seed=3, **SMALL)
    whole.set_epoch(1)
    expected = [_indices(s) for s in whole]
    assert [first] + [_indices(s) for s in again] == expected


def test_the_follow_order_as_one_value(tmp_path):
    out = tmp_path / "ds"
    with libshard.Writer(out, fsync=False) as w:
        for i in range(12):
            w.write({"input_ids": torch.arange(i + 1)}, key=f"s{i}")
    grouped = libshard.Loader(out, order=Order.follow(shuffle_window=4, seed=2),
                              memory_budget="8MiB", return_index=True)
    flat = libshard.Loader(out, follow=True, shuffle_window=4, seed=2, memory_budget="8MiB",
                           return_index=True)
    a = [_indices(s) for s in grouped]
    assert a == [_indices(s) for s in flat]
    assert Counter(i for s in a for i in s) == Counter(range(12))
