"""Samplers under hostile input (libshard/_sampler_order.py): a value that is not a dataset index
(a float, a 0-dim float tensor, a numpy float, a string, bytes, a bool, None, a negative or
too large int) is refused, naming the value, its type and its position in the sampler, never
truncated or parsed into an index and served; an endless sampler or batch sampler streams with
bounded memory (its epoch is read a chunk at a time), resumes exactly, and only len() of it is
unknown. The same rule holds for ``Dataset.prefetch`` and ``ReadAheadSampler``."""

from __future__ import annotations

import fractions
import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator, List

import numpy as np
import pytest
import torch

import libshard
from libshard import _sampler_order

N = 16


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sampler") / "ds"
    with libshard.Writer(out, fsync=False) as w:
        for i in range(N):
            w.write({"input_ids": torch.arange(3) + i, "ident": torch.tensor([i])}, key=f"k{i}")
    return out


def idents(step: Any) -> List[int]:
    return [int(s["ident"][0]) for s in (step if isinstance(step, list) else [step])]


class Seq:
    """A sampler yielding exactly these values (a torch Sampler needs only __iter__)."""

    def __init__(self, values: List[Any]) -> None:
        self.values = values

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


NOT_INDICES = {
    "float": 1.0,
    "float with a fraction": 2.7,
    "0-dim float tensor": torch.tensor(3.0),
    "0-dim bf16 tensor": torch.tensor(3.0, dtype=torch.bfloat16),
    "0-dim bool tensor": torch.tensor(True),
    "1-dim int tensor": torch.tensor([3]),
    "numpy float64": np.float64(3.0),
    "numpy float32": np.float32(1.0),
    "numpy bool": np.bool_(True),
    "0-dim float array": np.array(3.0),
    "string": "3",
    "bytes": b"3",
    "bool": True,
    "None": None,
    "fraction": fractions.Fraction(3, 1),
    "negative int": -1,
    "int past int64": 2 ** 64 + 3,
    "list": [3],
}


@pytest.mark.parametrize("case", sorted(NOT_INDICES))
def test_a_sampler_value_that_is_not_an_index_is_refused(ds, case):
    value = NOT_INDICES[case]
    with pytest.raises(libshard.InvalidArgumentError) as e:
        loader = libshard.Loader(ds, sampler=Seq([0, 5, 2, value, 1]))
        list(loader)
    text = str(e.value)
    assert "position 3" in text and "epoch 0" in text, text
    assert type(value).__name__ in text, text
    assert "not a dataset index" in text, text


@pytest.mark.parametrize("case", sorted(NOT_INDICES))
def test_a_batch_sampler_value_that_is_not_an_index_is_refused(ds, case):
    value = NOT_INDICES[case]
    batches = [[0, 1], [2, 3], [4, value, 6]]
    with pytest.raises(libshard.InvalidArgumentError) as e:
        list(libshard.Loader(ds, batch_sampler=batches))
    text = str(e.value)
    assert "element 1 of batch 2" in text and type(value).__name__ in text, text


@pytest.mark.parametrize("batch", ["abc", b"\x00\x01", {0: 1}, 3, torch.tensor(2),
                                   torch.tensor([1.0, 2.0]), np.array([0.5, 1.5]),
                                   np.array([True, False])])
def test_a_batch_that_is_not_a_sequence_of_indices_is_refused(ds, batch):
    with pytest.raises(libshard.InvalidArgumentError) as e:
        list(libshard.Loader(ds, batch_sampler=[[0], batch]))
    assert "batch 1" in str(e.value), str(e.value)


def test_every_kind_of_integer_is_an_index(ds):
    class Idx:
        def __index__(self) -> int:
            return 7

    values = [3, np.int64(4), np.uint8(5), np.int32(6), torch.tensor(2), np.array(9), Idx(),
              torch.tensor(1, dtype=torch.uint8)]
    got = [i for step in libshard.Loader(ds, sampler=Seq(values), shuffle=False)
           for i in idents(step)]
    assert got == [3, 4, 5, 6, 2, 9, 7, 1]
    batches = [torch.tensor([1, 2]), np.array([3, 4], dtype=np.int16), (5, np.int64(6))]
    got = [idents(step) for step in libshard.Loader(ds, batch_sampler=batches)]
    assert got == [[1, 2], [3, 4], [5, 6]]


# -- endless samplers -------------------------------------------------------------------------
class Endless:
    """An endless, seeded sampler with set_epoch (as a sampler with replacement may be), that
    counts what was drawn from it."""

    def __init__(self, n: int, batch: int = 0) -> None:
        self.n, self.batch, self.epoch, self.drawn = n, batch, 0, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        g = torch.Generator().manual_seed(1000 + self.epoch)
        while True:
            if self.batch:
                self.drawn += self.batch
                yield torch.randint(0, self.n, (self.batch,), generator=g).tolist()
            else:
                self.drawn += 1
                yield int(torch.randint(0, self.n, (1,), generator=g))

    def expected(self, epoch: int, count: int) -> List[int]:
        self.set_epoch(epoch)
        drawn = self.drawn
        out = list(itertools.islice(iter(self), count))
        self.drawn = drawn
        return out


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(_sampler_order, "CHUNK_STEPS", 7)
    monkeypatch.setattr(_sampler_order, "CHUNK_SAMPLES", 11)


@pytest.mark.parametrize("batched", [False, True])
def test_an_endless_sampler_streams_with_bounded_reading_ahead(ds, small_chunks, batched):
    sampler = Endless(N, batch=3 if batched else 0)
    kw = {"batch_sampler": sampler} if batched else {"sampler": sampler, "batch_size": 2}
    loader = libshard.Loader(ds, **kw)
    taken: List[int] = []
    for k, step in enumerate(loader):
        taken += idents(step)
        # Never more than one chunk (and one step) ahead of what was served.
        assert sampler.drawn - len(taken) <= 11 + 3, (sampler.drawn, len(taken))
        if k == 60:
            break
    flat = (list(itertools.chain.from_iterable(sampler.expected(0, 61))) if batched
            else sampler.expected(0, 122))
    assert taken == flat
    with pytest.raises(TypeError, match="without len"):
        len(loader)
    loader.close()


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("stop", [3, 7, 14, 23])  # inside chunks and at their edges
def test_an_endless_sampler_resumes_exactly(ds, small_chunks, batched, stop):
    def make() -> libshard.Loader:
        s = Endless(N, batch=3 if batched else 0)
        kw = {"batch_sampler": s} if batched else {"sampler": s, "batch_size": 2}
        return libshard.Loader(ds, **kw)

    first = make()
    it = iter(first)
    for _ in range(stop):
        next(it)
    state = first.state_dict()
    assert state["position"] == stop
    want = [idents(next(it)) for _ in range(20)]
    first.close()
    second = make()
    second.load_state_dict(state)
    got = list(itertools.islice((idents(s) for s in second), 20))
    assert got == want
    assert second.state_dict()["position"] == stop + 20


def test_a_long_finite_epoch_in_chunks_equals_the_whole(ds, small_chunks):
    order = [(7 * i) % N for i in range(100)]
    got = [i for step in libshard.Loader(ds, sampler=Seq(order), batch_size=3) for i in
           idents(step)]
    assert got == order
    loader = libshard.Loader(ds, sampler=Seq(order), batch_size=3, drop_last=True)
    assert len(loader) == 33
    assert sum(len(idents(s)) for s in loader) == 99
    assert len(loader) == 33 and loader.state_dict()["epoch"] == 1
    again = [i for step in loader for i in idents(step)]  # epoch 1 of the same sampler
    assert again == order[:99]


def test_endless_sampler_under_a_memory_limit(ds, tmp_path):
    """The sampler never ends; the loader serves 10000 steps (about 15 chunks) under an
    address-space limit a collected epoch would pass within seconds."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(f"""
        import itertools, resource, sys
        import libshard
        from libshard import _sampler_order
        _sampler_order.CHUNK_STEPS = int(sys.argv[1])
        _sampler_order.CHUNK_SAMPLES = int(sys.argv[1])

        class Endless:
            def __iter__(self):
                return (i % {N} for i in itertools.count())

        with open("/proc/self/status") as f:
            vm = next(int(l.split()[1]) for l in f if l.startswith("VmSize:")) * 1024
        limit = vm + (160 << 20)  # the loader's 64 MiB arena, its threads, room to spare
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        loader = libshard.Loader({str(ds)!r}, sampler=Endless(), memory_budget="64MiB",
                                 pin_memory=False, metadata=False)
        it = iter(loader)
        next(it)
        for k, step in enumerate(it):
            assert int(step["ident"][0]) == (k + 1) % {N}
            if k == 10000:
                break
        print("served", k + 1)
    """))
    env = dict(os.environ, MALLOC_ARENA_MAX="2")
    r = subprocess.run([sys.executable, str(script), "700"], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "served 10001" in r.stdout
    # The limit binds: an epoch collected whole (a chunk that never ends) runs out of memory.
    r = subprocess.run([sys.executable, str(script), str(1 << 40)], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode != 0 and "MemoryError" in r.stderr, r.stdout + r.stderr[-3000:]


# -- Dataset.prefetch and ReadAheadSampler ----------------------------------------------------
@pytest.mark.parametrize("bad", [np.array([0.0, 1.5]), torch.tensor([1.0, 2.0]),
                                 np.array(["1", "2"]), np.array([True, False]),
                                 torch.tensor([True]), [0, 1, 2.5], ["3"], [b"3"], [None],
                                 [True], "123", [-1]])
def test_prefetch_refuses_what_is_not_an_index(ds, bad):
    d = libshard.open(ds, read_ahead={"memory_budget": "16MiB", "pin_memory": False})
    with pytest.raises(libshard.InvalidArgumentError) as e:
        d.prefetch(bad)
    assert "prefetch" in str(e.value) and str(ds) in str(e.value), str(e.value)
    d.prefetch(np.array([3, 1], dtype=np.uint8))
    assert int(d[3]["ident"][0]) == 3


def test_prefetch_of_an_endless_iterable_is_refused_not_collected(ds, monkeypatch):
    monkeypatch.setattr(_sampler_order, "MAX_ANNOUNCE", 1000)
    d = libshard.open(ds, read_ahead={"memory_budget": "16MiB", "pin_memory": False})
    with pytest.raises(libshard.InvalidArgumentError, match="more than 1000 indices"):
        d.prefetch(i % N for i in itertools.count())
    d.prefetch(i % N for i in range(1000))
    assert d.read_ahead_stats()["announced"] == 1000


@pytest.mark.parametrize("bad", [1.5, "2", b"2", True, torch.tensor(1.0), np.float64(2)])
def test_read_ahead_sampler_refuses_what_is_not_an_index(ds, bad):
    sampler = libshard.ReadAheadSampler([[0, 1], [2, bad]], libshard.open(ds), num_workers=0)
    with pytest.raises(libshard.InvalidArgumentError) as e:
        list(sampler)
    assert "element 1 of ReadAheadSampler: batch 1" in str(e.value), str(e.value)


def test_read_ahead_sampler_refuses_an_endless_batch(ds, monkeypatch):
    monkeypatch.setattr(_sampler_order, "MAX_BATCH", 100)
    sampler = libshard.ReadAheadSampler([itertools.count()], libshard.open(ds), num_workers=0)
    with pytest.raises(libshard.InvalidArgumentError, match="more than"):
        list(sampler)


def test_read_ahead_sampler_streams_an_endless_batch_sampler(ds):
    class EndlessBatches:
        drawn = 0

        def __iter__(self):
            for k in itertools.count():
                EndlessBatches.drawn += 1
                yield [k % N, (k + 1) % N]

    src = EndlessBatches()
    sampler = libshard.ReadAheadSampler(src, libshard.open(ds), num_workers=2, depth=4)
    for k, batch in enumerate(sampler):
        assert list(batch) == [k % N, (k + 1) % N]
        assert EndlessBatches.drawn <= k + 1 + 4 * 2 + 1
        if k == 200:
            break


def test_a_resume_at_or_past_the_end_of_a_chunked_epoch(ds, small_chunks):
    order = [(3 * i) % N for i in range(28)]  # 28 steps: 4 chunks of 7
    loader = libshard.Loader(ds, sampler=Seq(order))
    it = iter(loader)
    for _ in range(28):
        next(it)
    state = loader.state_dict()
    assert state["position"] == 28 and state["epoch"] == 0
    again = libshard.Loader(ds, sampler=Seq(order))
    again.load_state_dict(state)
    assert list(again) == []  # nothing left of epoch 0
    assert again.state_dict()["epoch"] == 1
    bogus = dict(state, position=40)
    with pytest.raises(libshard.InvalidArgumentError, match="past"):
        libshard.Loader(ds, sampler=Seq(order)).load_state_dict(bogus)
