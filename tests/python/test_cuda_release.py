"""The deferred release of pinned arena memory (libshard/_cuda_release.py), on the CPU.

The real case (a pinned arena, a trainer's non_blocking copy to the GPU) is test_cuda.py's; here
the hook is installed by hand with stand-in events, to check what needs no GPU: a dropped tensor's
memory is handed to the hook and not reused while the hook holds it, it is reused once the event
completed, and memory held behind slow events stays bounded by lag_steps.
"""
# suite: check (make check runs this file: scripts/check.sh)
from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import torch

import libshard
from libshard._cuda_release import DeferredRelease
from conftest import make_eagle_sample, pack_dir, tensor_bytes


class FakeEvent:
    created: List["FakeEvent"] = []
    born_done = False  # events created from now on have completed at once

    def __init__(self) -> None:
        self.done = FakeEvent.born_done
        self.recorded = False
        self.waited = False
        FakeEvent.created.append(self)

    def record(self) -> None:
        self.recorded = True

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.waited = True
        self.done = True


@pytest.fixture(scope="module")
def megabyte_samples(tmp_path_factory) -> Tuple[Path, List[Dict[str, torch.Tensor]], int]:
    root = tmp_path_factory.mktemp("release_src")
    gen = torch.Generator().manual_seed(11)
    samples = []
    for i in range(12):
        s = make_eagle_sample(gen, 200 + 10 * i, hidden=512)
        torch.save(s, root / f"data_{i:02d}.ckpt")
        samples.append(s)
    biggest = max(sum(t.numel() * t.element_size() for t in s.values()) for s in samples)
    return pack_dir(root, tmp_path_factory.mktemp("release_packed") / "ds"), samples, biggest


def _loader(ds: Path, budget: int, hook: DeferredRelease) -> libshard.Loader:
    loader = libshard.Loader(ds, shuffle=False, memory_budget=budget, metadata=False,
                             return_index=True, slow_wait_warning_seconds=0)
    loader._release = hook  # what Loader does itself when its arena is pinned
    loader._core.set_release_hook(hook)
    return loader


def test_no_hook_without_a_pinned_arena(megabyte_samples):
    ds, _, _ = megabyte_samples
    loader = libshard.Loader(ds, pin_memory=False)
    assert loader._release is None
    loader.close()


@pytest.mark.skipif(torch.version.cuda is not None and torch.cuda.is_available(),
                    reason="a torch with CUDA and a GPU pins the arena")
def test_no_cuda_call_where_torch_has_no_cuda(megabyte_samples):
    """Where torch cannot use pinned memory, pin_memory=True (the default) asks the C++ side for
    no pinning at all: no CUDA runtime is loaded to find out there is no driver, and no release
    hook is installed. (The arena is pinned chunk by chunk as first used where CUDA works.)"""
    ds, _, _ = megabyte_samples
    loader = libshard.Loader(ds, metadata=False)
    next(iter(loader))
    stats = loader.stats()
    assert loader._options["pin_memory"] == "off"
    assert stats["pin_status"] == "not requested (pin_memory=off)", stats["pin_status"]
    assert not stats["pinned"]
    assert loader._release is None
    with open("/proc/self/maps") as f:
        assert "libcudart" not in f.read(), "the CUDA runtime was loaded"
    loader.close()


def test_held_memory_is_not_reused_until_its_event_completed(megabyte_samples):
    ds, samples, biggest = megabyte_samples
    FakeEvent.created.clear()
    hook = DeferredRelease(lag_steps=1000, event_factory=FakeEvent, cuda_initialized=lambda: True)
    loader = _loader(ds, 7 * biggest, hook)
    it = iter(loader)
    held = []  # (address, bytes expected there) of tensors dropped while their event is pending
    for _ in range(4):
        s = next(it)
        want = samples[s["__index__"]]
        for key, t in s.items():
            if isinstance(t, torch.Tensor):
                assert tensor_bytes(t) == tensor_bytes(want[key])
                held.append((t.data_ptr(), tensor_bytes(want[key])))
        del s, t
    # One token per tensor; the fourth sample is still referenced by the suspended iterator.
    assert len(held) == 16 and hook.pending == 12
    assert all(e.recorded for e in FakeEvent.created)
    # The loader has read ahead into every byte it was free to use; the held bytes are intact.
    assert loader.stats()["arena_in_use"] >= 4 * 200 * 4 * 512 * 2
    for address, want in held:
        assert ctypes.string_at(address, len(want)) == want
    for e in FakeEvent.created:
        e.done = True
    FakeEvent.born_done = True
    rest = [s["__index__"] for s in it]  # step() releases them; the epoch completes
    assert rest == list(range(4, 12))
    assert not any(e.waited for e in FakeEvent.created)
    FakeEvent.born_done = False
    loader.close()


def test_memory_behind_slow_events_is_bounded_by_lag_steps(megabyte_samples):
    """Events that never complete by themselves: step() waits for those older than lag_steps, so
    an arena of four samples serves every epoch without stalling."""
    ds, samples, biggest = megabyte_samples
    FakeEvent.created.clear()
    hook = DeferredRelease(lag_steps=1, event_factory=FakeEvent, cuda_initialized=lambda: True)
    loader = _loader(ds, 4 * biggest, hook)
    seen = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        for s in loader:
            want = samples[s["__index__"]]
            for key, t in s.items():
                if isinstance(t, torch.Tensor):
                    assert tensor_bytes(t) == tensor_bytes(want[key]), (s["__index__"], key)
            seen.append(s["__index__"])
            del s
    assert sorted(seen) == sorted(list(range(12)) * 2)
    assert any(e.waited for e in FakeEvent.created)
    assert hook.pending <= 2 * 4  # at most lag_steps + 1 steps of tensors
    loader.close()
    assert hook.pending == 0  # close() waits for and releases the rest


def test_without_cuda_initialised_memory_is_released_at_once(megabyte_samples):
    ds, _, biggest = megabyte_samples
    hook = DeferredRelease(event_factory=FakeEvent, cuda_initialized=lambda: False)
    loader = _loader(ds, 4 * biggest, hook)
    for s in loader:
        del s
    assert hook.pending == 0
    loader.close()


def test_a_failing_hook_releases_the_memory_and_reports_it(megabyte_samples, monkeypatch):
    ds, _, biggest = megabyte_samples
    calls = []
    reported = []
    # Keep only the text: the exception's traceback would hold the token (and the memory).
    monkeypatch.setattr(sys, "unraisablehook",
                        lambda u: reported.append(f"{u.object}: {u.exc_value}"))

    def bad_hook(token):
        calls.append(1)
        raise RuntimeError("hook failed")

    loader = libshard.Loader(ds, shuffle=False, memory_budget=4 * biggest, metadata=False)
    loader._core.set_release_hook(bad_hook)
    n = 0
    for s in loader:  # would stall on a full arena if the failed hook kept the memory
        n += 1
        del s
    assert n == 12 and len(calls) == 48
    assert len(reported) == 48
    assert "release hook" in reported[0] and "hook failed" in reported[0]
    loader.close()
