"""Multi-process behaviour: 4 ranks under torch.distributed (gloo on loopback, spawned with
torch.multiprocessing) cover each epoch exactly once; a state_dict taken mid-epoch continues in a
new process, with the same and with another world size."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import torch.multiprocessing as mp

import libshard
from conftest import N_EAGLE

WORLD = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, dataset: str, port: int, out: str) -> None:
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        # rank and world_size come from torch.distributed.
        loader = libshard.Loader(dataset, seed=7, return_index=True, memory_budget="4MiB")
        assert (loader.rank, loader.world_size) == (rank, world)
        epoch0 = [s["__index__"] for s in loader]
        epoch1 = [s["__index__"] for s in loader]
        again = [s["__index__"] for s in libshard.Loader(dataset, seed=7, return_index=True,
                                                         memory_budget="4MiB")]
        other_seed = [s["__index__"] for s in libshard.Loader(dataset, seed=8, return_index=True,
                                                              memory_budget="4MiB")]
        # Mid-epoch states agree across ranks after the same number of steps.
        mid = libshard.Loader(dataset, seed=7, batch_size=2, memory_budget="4MiB")
        it = iter(mid)
        next(it)
        next(it)
        state = mid.state_dict()
        mine = {"rank": rank, "len": len(loader), "epoch0": epoch0, "epoch1": epoch1,
                "again": again, "other_seed": other_seed, "state": state}
        gathered = [None] * world
        dist.all_gather_object(gathered, mine)
        if rank == 0:
            Path(out).write_text(json.dumps(gathered))
    finally:
        dist.destroy_process_group()


def test_four_ranks_cover_each_epoch_exactly_once(eagle_dataset, tmp_path):
    out = tmp_path / "ranks.json"
    mp.spawn(_rank_main, args=(WORLD, str(eagle_dataset), _free_port(), str(out)),
             nprocs=WORLD, join=True)
    ranks = json.loads(out.read_text())
    assert [r["rank"] for r in ranks] == list(range(WORLD))
    for key in ("epoch0", "epoch1", "again", "other_seed"):
        counts = Counter(i for r in ranks for i in r[key])
        assert counts == Counter(range(N_EAGLE)), f"{key}: not exactly once: {counts}"
        assert all(len(r[key]) == N_EAGLE // WORLD == r["len"] for r in ranks)
    assert [r["epoch0"] for r in ranks] != [r["epoch1"] for r in ranks]  # epochs differ
    assert [r["epoch0"] for r in ranks] == [r["again"] for r in ranks]   # same seed, same order
    assert [r["epoch0"] for r in ranks] != [r["other_seed"] for r in ranks]
    states = [r["state"] for r in ranks]
    assert all(s == states[0] for s in states)
    assert states[0]["position"] == 2 * 2 * WORLD  # global units: steps * batch * world


# Run in fresh interpreters: the first consumes part of epoch 0 on 2 ranks and saves the state;
# the second resumes it on several world sizes.
_FIRST = r"""
import json, sys
import libshard
ds, steps = sys.argv[1], int(sys.argv[2])
loaders = [libshard.Loader(ds, seed=3, batch_size=2, rank=r, world_size=2, return_index=True,
                           memory_budget="4MiB") for r in range(2)]
consumed, states = [], []
for loader in loaders:
    it = iter(loader)
    for _ in range(steps):
        consumed += [s["__index__"] for s in next(it)]
    states.append(loader.state_dict())
assert states[0] == states[1], states
full = libshard.Loader(ds, seed=3, batch_size=2, rank=0, world_size=1, return_index=True,
                       memory_budget="4MiB")
sequence = [s["__index__"] for b in full for s in b]
print(json.dumps({"state": states[0], "consumed": consumed, "sequence": sequence}))
"""

_SECOND = r"""
import json, sys
import libshard
ds, state, worlds = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
out = {}
for world in worlds:
    got = []
    for rank in range(world):
        loader = libshard.Loader(ds, batch_size=2, rank=rank, world_size=world, return_index=True,
                                 memory_budget="4MiB")
        loader.load_state_dict(state)
        got += [s["__index__"] for b in loader for s in b]
    out[str(world)] = got
print(json.dumps(out))
"""


def _run(script: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_state_dict_resumes_in_new_process_on_any_world_size(eagle_dataset):
    steps = 3  # 2 ranks x 3 steps x batch 2 = 12 of 24 samples consumed
    first = _run(_FIRST, str(eagle_dataset), str(steps))
    state, consumed, sequence = first["state"], first["consumed"], first["sequence"]
    assert state["position"] == 12 and state["epoch"] == 0
    assert json.loads(json.dumps(state)) == state  # plain data
    assert sorted(consumed) == sorted(sequence[:12])
    # 12 remaining samples: 2 ranks x 3 batches, 3 ranks x 2 batches, 1 rank x 6 batches.
    second = _run(_SECOND, str(eagle_dataset), json.dumps(state), json.dumps([2, 3, 1]))
    for world, remaining in second.items():
        assert Counter(remaining) == Counter(sequence[12:]), f"world size {world}"
        assert Counter(remaining + consumed) == Counter(range(N_EAGLE)), f"world size {world}"
    assert second["1"] == sequence[12:]  # one rank: exactly the rest of the global sequence
