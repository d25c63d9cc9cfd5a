"""The GPU half of the loader (issue 13): pinned arena, device="cuda" delivery, lifetimes.

Marked ``cuda``: every test here skips on a machine without a usable CUDA device (``pytest -m cuda``
selects them; ``scripts/gpu_check.sh`` runs them on a GPU machine). They compare what reaches the
GPU bit for bit with ``torch.load`` of the source files.
"""
# suite: check (make check runs this file: scripts/check.sh)
from __future__ import annotations

import gc
from typing import Dict, List

import pytest
import torch

import libshard
from conftest import assert_sample_equal, make_eagle_sample, pack_dir

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _reference(sources, index: int) -> Dict[str, object]:
    return torch.load(sources[index], weights_only=True)


def _tensors_only(d: Dict[str, object]) -> Dict[str, torch.Tensor]:
    return {k: v for k, v in d.items() if isinstance(v, torch.Tensor)}


def _to_cpu(d: Dict[str, object]) -> Dict[str, object]:
    return {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in d.items()}


def test_the_arena_is_pinned(eagle_dataset):
    torch.cuda.init()
    loader = libshard.Loader(eagle_dataset, pin_memory=True, shuffle=False)
    next(iter(loader))
    stats = loader.stats()
    assert stats["pinned"], stats["pin_status"]
    assert stats["pin_status"].startswith("pinned"), stats["pin_status"]
    loader.close()


def test_device_cuda_equals_the_cpu_path(eagle_dataset, eagle_sources):
    dev = torch.device("cuda", 0)
    gpu = libshard.Loader(eagle_dataset, shuffle=True, seed=7, device=dev, return_index=True,
                          metadata=False)
    cpu = libshard.Loader(eagle_dataset, shuffle=True, seed=7, return_index=True, metadata=False)
    n = 0
    for g, c in zip(gpu, cpu):
        assert g["__index__"] == c["__index__"]
        for key, t in _tensors_only(g).items():
            assert t.device == dev, key
        assert_sample_equal(_to_cpu(g), c, where=f"sample {c['__index__']}")
        want = _tensors_only(_reference(eagle_sources, c["__index__"]))
        got = {k: v for k, v in _to_cpu(g).items() if k != "__index__"}
        assert_sample_equal(got, want, where=f"sample {c['__index__']} vs torch.load")
        n += 1
    assert n == len(eagle_sources)
    gpu.close()
    cpu.close()


def test_batched_device_delivery_with_collate(eagle_dataset, eagle_sources):
    dev = torch.device("cuda", 0)
    loader = libshard.Loader(eagle_dataset, batch_size=4, collate="pad", shuffle=False,
                             device=dev, metadata=False)
    seen = 0
    for batch in loader:
        for key, t in batch.items():
            if isinstance(t, torch.Tensor):
                assert t.device == dev, key
        seen += int(batch["input_ids"].shape[0])
    assert seen == len(eagle_sources)
    loader.close()


def test_tensors_outlive_the_loader(eagle_dataset, eagle_sources):
    dev = torch.device("cuda", 0)
    kept_gpu: List[Dict[str, object]] = []
    kept_cpu: List[Dict[str, object]] = []
    loader = libshard.Loader(eagle_dataset, shuffle=False, device=dev, return_index=True,
                             metadata=False)
    for i, s in enumerate(loader):
        kept_gpu.append(s)
        if i == 3:
            break
    cpu_loader = libshard.Loader(eagle_dataset, shuffle=False, return_index=True, metadata=False,
                                 pin_memory=True)
    for i, s in enumerate(cpu_loader):
        kept_cpu.append(s)
        if i == 3:
            break
    loader.close()
    cpu_loader.close()
    del loader, cpu_loader
    gc.collect()
    torch.cuda.synchronize()
    for s in kept_gpu + kept_cpu:
        index = s["__index__"]
        want = _tensors_only(_reference(eagle_sources, index))
        got = {k: v for k, v in _to_cpu(s).items() if k != "__index__"}
        assert_sample_equal(got, want, where=f"sample {index}")


@pytest.fixture(scope="module")
def large_samples(tmp_path_factory):
    """12 samples of about 1 MB, so that a small arena must reuse its memory within an epoch."""
    root = tmp_path_factory.mktemp("cuda_large_src")
    gen = torch.Generator().manual_seed(5)
    sources = []
    for i in range(12):
        path = root / f"data_{i}.ckpt"
        torch.save(make_eagle_sample(gen, 200 + 20 * i, hidden=512), path)
        sources.append(path)
    out = tmp_path_factory.mktemp("cuda_large_packed") / "ds"
    return pack_dir(root, out), sources


def test_callers_non_blocking_copy_then_drop_is_safe(large_samples):
    """A trainer's `t.to("cuda", non_blocking=True)` on a delivered (pinned) CPU tensor, the CPU
    tensor dropped right after: the arena memory must not be reused before the copy has read it.

    The GPU is kept busy before each copy (torch.cuda._sleep), so the copies run tens of
    milliseconds late while the loader, with an arena of about four samples, keeps reading new
    samples into the memory the dropped tensors used."""
    dataset, sources = large_samples
    dev = torch.device("cuda", 0)
    budget = 4 * max(p.stat().st_size for p in sources)
    loader = libshard.Loader(dataset, shuffle=True, seed=3, memory_budget=budget,
                             return_index=True, metadata=False, pin_memory=True)
    moved = []
    for epoch in range(3):
        loader.set_epoch(epoch)
        for s in loader:
            torch.cuda._sleep(5_000_000)  # a few ms of GPU time queued before the copy
            g = {k: v.to(dev, non_blocking=True) for k, v in _tensors_only(s).items()}
            moved.append((s["__index__"], g))
            del s, g
    torch.cuda.synchronize()
    stats = loader.stats()
    loader.close()
    assert stats["pinned"], f"the copies were not asynchronous: {stats['pin_status']}"
    bad = []
    for index, g in moved:
        want = _tensors_only(_reference(sources, index))
        got = {k: v.cpu() for k, v in g.items()}
        try:
            assert_sample_equal(got, want)
        except AssertionError as e:
            bad.append(f"sample {index}: {e}")
    assert not bad, f"{len(bad)} of {len(moved)} copies read reused arena memory: {bad[:3]}"
