"""libshard.Loader in one process: order, epochs, batching, collate, resume, lifetime, memory,
the GIL, stats."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import gc
import threading
import time
from collections import Counter

import pytest
import torch

import libshard
from conftest import N_EAGLE, assert_sample_equal, tensor_bytes

SMALL = dict(memory_budget="8MiB")


def indices(loader) -> list:
    """Dataset indices of one epoch of a single-sample loader with return_index=True."""
    return [s["__index__"] for s in loader]


def expect_epoch_equals_dataset(loader, ds) -> list:
    """One epoch of a single-sample loader with return_index=True: every sample of ``ds`` once,
    each equal to ``ds[i]``. Returns the indices in delivery order."""
    seen = []
    for sample in loader:
        i = sample.pop("__index__")
        seen.append(i)
        assert_sample_equal(sample, ds[i], f"sample {i}")
    assert sorted(seen) == list(range(len(ds)))
    return seen


def test_single_samples_equal_dataset(eagle_dataset):
    ds = libshard.open(eagle_dataset)
    loader = libshard.Loader(ds, shuffle=True, seed=3, return_index=True, **SMALL)
    assert len(loader) == N_EAGLE
    seen = expect_epoch_equals_dataset(loader, ds)
    assert seen != list(range(N_EAGLE))  # shuffled


def test_no_shuffle_is_dataset_order(eagle_dataset):
    loader = libshard.Loader(eagle_dataset, shuffle=False, return_index=True, **SMALL)
    assert indices(loader) == list(range(N_EAGLE))


def test_epochs_differ_same_seed_same_order(eagle_dataset):
    a = libshard.Loader(eagle_dataset, seed=11, return_index=True, **SMALL)
    b = libshard.Loader(eagle_dataset, seed=11, return_index=True, **SMALL)
    c = libshard.Loader(eagle_dataset, seed=12, return_index=True, **SMALL)
    a0, a1 = indices(a), indices(a)  # the second iter() runs the next epoch
    assert sorted(a0) == sorted(a1) == list(range(N_EAGLE))
    assert a0 != a1
    assert indices(b) == a0 and indices(b) == a1
    assert indices(c) != a0


def test_set_epoch_selects_epoch(eagle_dataset):
    a = libshard.Loader(eagle_dataset, seed=5, return_index=True, **SMALL)
    e0, e1, e2 = indices(a), indices(a), indices(a)
    a.set_epoch(1)
    assert indices(a) == e1
    a.set_epoch(1)
    assert indices(a) == e1  # set_epoch again: the same epoch, not the next
    assert indices(a) == e2
    assert a.epoch == 3


def test_break_then_iter_continues_the_epoch(eagle_dataset):
    full = indices(libshard.Loader(eagle_dataset, seed=2, return_index=True, **SMALL))
    loader = libshard.Loader(eagle_dataset, seed=2, return_index=True, **SMALL)
    first = []
    for s in loader:
        first.append(s["__index__"])
        if len(first) == 5:
            break
    rest = indices(loader)
    assert first + rest == full


def test_ranks_cover_epoch_exactly_once(eagle_dataset):
    for world in (1, 2, 3, 4, 5, 7):
        seen = Counter()
        lens = set()
        for rank in range(world):
            loader = libshard.Loader(eagle_dataset, seed=1, rank=rank, world_size=world,
                                     return_index=True, **SMALL)
            got = indices(loader)
            lens.add(len(got))
            assert len(got) == len(loader)
            seen.update(got)
        assert len(lens) == 1, f"W={world}: ranks got different counts {lens}"
        assert set(seen) == set(range(N_EAGLE))
        padded = -N_EAGLE % world
        assert sum(seen.values()) == N_EAGLE + padded


def test_rank_from_environment(eagle_dataset, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    loader = libshard.Loader(eagle_dataset, **SMALL)
    assert (loader.rank, loader.world_size) == (1, 4)
    assert len(loader) == N_EAGLE // 4


def test_batches_and_collate(eagle_dataset):
    ds = libshard.open(eagle_dataset)
    loader = libshard.Loader(ds, batch_size=5, seed=4, return_index=True, **SMALL)
    batches = list(loader)
    assert len(batches) == len(loader) == -(-N_EAGLE // 5)
    assert all(isinstance(b, list) for b in batches)
    assert sorted(s["__index__"] for b in batches for s in b)[:N_EAGLE] == list(range(N_EAGLE))

    pad = libshard.Loader(ds, batch_size=4, seed=4, collate="pad", return_index=True, **SMALL)
    for batch in pad:
        idx = batch["__index__"].tolist()
        assert batch["input_ids"].shape == (4, int(batch["lengths"].max()))
        assert batch["hidden_state"].shape == (4, int(batch["lengths"].max()), 16)
        assert batch["aux_hidden_state"].dtype == torch.bfloat16
        for row, i in enumerate(idx):
            want = ds[i]
            n = int(batch["lengths"][row])
            assert n == want["input_ids"].shape[0]
            assert torch.equal(batch["input_ids"][row, :n], want["input_ids"])
            assert not batch["input_ids"][row, n:].any()
            assert tensor_bytes(batch["hidden_state"][row, :n]) == tensor_bytes(want["hidden_state"][0])

    pack = libshard.Loader(ds, batch_size=3, seed=4, collate="pack", return_index=True, **SMALL)
    for batch in pack:
        idx = batch["__index__"].tolist()
        cu = batch["cu_seqlens"]
        assert cu.dtype == torch.int32 and cu[0] == 0 and cu.shape == (len(idx) + 1,)
        assert batch["input_ids"].shape == (int(cu[-1]),)
        assert batch["hidden_state"].shape == (1, int(cu[-1]), 16)
        for row, i in enumerate(idx):
            want = ds[i]
            a, b = int(cu[row]), int(cu[row + 1])
            assert torch.equal(batch["input_ids"][a:b], want["input_ids"])
            assert tensor_bytes(batch["aux_hidden_state"][:, a:b]) == tensor_bytes(want["aux_hidden_state"])


def test_max_tokens_batches(eagle_dataset):
    ds = libshard.open(eagle_dataset)
    lengths = ds.lengths
    budget = int(lengths.max()) * 2
    loader = libshard.Loader(ds, max_tokens=budget, seed=9, return_index=True, **SMALL)
    seen = []
    for batch in loader:
        idx = [s["__index__"] for s in batch]
        seen += idx
        assert sum(int(lengths[i]) for i in idx) <= budget or len(idx) == 1
    assert sorted(seen) == list(range(N_EAGLE))


def test_fields_and_max_len(eagle_dataset):
    ds = libshard.open(eagle_dataset)
    loader = libshard.Loader(ds, fields=["input_ids", "hidden_state"], max_len=6, shuffle=False,
                             return_index=True, **SMALL)
    for sample in loader:
        i = sample.pop("__index__")
        assert list(sample) == ["input_ids", "hidden_state"]
        want = ds[i]
        n = min(6, want["input_ids"].shape[0])
        assert torch.equal(sample["input_ids"], want["input_ids"][:n])
        assert tensor_bytes(sample["hidden_state"]) == tensor_bytes(want["hidden_state"][:, :n])


def test_state_dict_resume_in_process(eagle_dataset):
    full = libshard.Loader(eagle_dataset, seed=8, batch_size=2, return_index=True, **SMALL)
    e0 = [[s["__index__"] for s in b] for b in full]
    e1 = [[s["__index__"] for s in b] for b in full]

    part = libshard.Loader(eagle_dataset, seed=8, batch_size=2, return_index=True, **SMALL)
    it = iter(part)
    head = [[s["__index__"] for s in next(it)] for _ in range(4)]
    state = part.state_dict()
    # The library's encoding (docs/ORDER.md §8): the global order's fields, no other.
    assert set(state) == {"state_version", "seed", "epoch", "position", "skipped", "order",
                          "bucketing", "identity", "samples", "shuffle"}
    assert state["state_version"] == 2 and state["samples"] == N_EAGLE and state["shuffle"]
    assert state["order"] == 2  # new loaders use order version 2
    assert all(isinstance(v, int) for k, v in state.items()
               if k not in ("skipped", "bucketing", "locality", "identity"))
    assert state["bucketing"] is None  # no length-aware batching without collate="pad"
    assert state["epoch"] == 0
    del it, part

    # A seed given that is not the state's is refused (it would be overridden); none given: the
    # state's seed.
    with pytest.raises(libshard.InvalidArgumentError, match="'seed' is 999.*seed 8"):
        libshard.Loader(eagle_dataset, seed=999, batch_size=2, return_index=True,
                        **SMALL).load_state_dict(state)
    resumed = libshard.Loader(eagle_dataset, batch_size=2, return_index=True, **SMALL)
    resumed.load_state_dict(state)  # the state's seed
    tail = [[s["__index__"] for s in b] for b in resumed]
    assert head + tail == e0
    # A state taken at the end of an epoch points at the next epoch.
    end_state = resumed.state_dict()
    assert (end_state["epoch"], end_state["position"]) == (1, 0)
    again = libshard.Loader(eagle_dataset, batch_size=2, return_index=True, **SMALL)
    again.load_state_dict(end_state)
    assert [[s["__index__"] for s in b] for b in again] == e1


def batches_of(loader, steps=None):
    out = []
    for b in loader:
        out.append([s["__index__"] for s in b])
        if steps is not None and len(out) == steps:
            break
    return out


def test_state_without_order_resumes_order_1_exactly(eagle_dataset):
    # A state dict saved by a libshard before order versions has no "order" key: it must resume
    # onto the order it was saved with (version 1), whatever the new loader's default.
    v1 = batches_of(libshard.Loader(eagle_dataset, seed=8, batch_size=2, order=1,
                                    return_index=True, **SMALL))
    v2 = batches_of(libshard.Loader(eagle_dataset, seed=8, batch_size=2, return_index=True,
                                    **SMALL))
    assert sorted(sum(v1, [])) == sorted(sum(v2, [])) == list(range(N_EAGLE))
    assert v1 != v2  # the versions are different orders, so the checks below can fail

    old = libshard.Loader(eagle_dataset, seed=8, batch_size=2, order=1, return_index=True,
                          **SMALL)
    head = batches_of(old, 3)
    state = old.state_dict()
    assert state["order"] == 1
    legacy = {k: state[k] for k in ("seed", "epoch", "position", "skipped")}
    resumed = libshard.Loader(eagle_dataset, batch_size=2, return_index=True, **SMALL)
    resumed.load_state_dict(legacy)
    assert head + batches_of(resumed) == v1
    assert resumed.state_dict()["order"] == 1  # and the next epoch stays on order 1
    v1_loader = libshard.Loader(eagle_dataset, seed=8, batch_size=2, order=1, return_index=True,
                                **SMALL)
    batches_of(v1_loader)
    assert batches_of(resumed) == batches_of(v1_loader)  # epoch 1 of order 1

    # A version 2 state resumes version 2; a loader built with order=1 refuses it (the state
    # would override the version given).
    new = libshard.Loader(eagle_dataset, seed=8, batch_size=2, return_index=True, **SMALL)
    head = batches_of(new, 3)
    state = new.state_dict()
    assert state["order"] == 2
    with pytest.raises(libshard.InvalidArgumentError, match="'order' is 1.*order version 2"):
        libshard.Loader(eagle_dataset, batch_size=2, order=1, return_index=True,
                        **SMALL).load_state_dict(state)
    other = libshard.Loader(eagle_dataset, batch_size=2, return_index=True, **SMALL)
    other.load_state_dict(state)
    assert head + batches_of(other) == v2

    with pytest.raises(libshard.InvalidArgumentError, match="order"):
        libshard.Loader(eagle_dataset, order=3)
    bad = dict(state, order=7)
    with pytest.raises(libshard.InvalidArgumentError, match="order"):
        libshard.Loader(eagle_dataset, **SMALL).load_state_dict(bad)


def test_tensors_valid_after_loader_deleted(eagle_dataset):
    ds = libshard.open(eagle_dataset)
    loader = libshard.Loader(eagle_dataset, shuffle=False, **SMALL)
    kept = [s for _, s in zip(range(3), loader)]
    loader.close()
    del loader
    gc.collect()
    # A second loader reusing arena-sized memory must not disturb the kept tensors.
    other = libshard.Loader(eagle_dataset, shuffle=False, **SMALL)
    for _ in other:
        pass
    del other
    gc.collect()
    for i, s in enumerate(kept):
        assert_sample_equal(s, ds[i], f"sample {i}")


def test_memory_within_budget_over_epochs(eagle_dataset):
    budget = 64 << 10  # 64 KiB: a fraction of the dataset (~200 KiB), several samples
    loader = libshard.Loader(eagle_dataset, memory_budget=budget, seed=1)
    total = 0
    for _ in range(4):
        for sample in loader:
            total += sum(t.numel() for t in sample.values() if isinstance(t, torch.Tensor))
        stats = loader.stats()
        assert stats["arena_budget"] == budget
        assert 0 < stats["arena_peak"] <= budget
    stats = loader.stats()
    assert stats["samples_delivered"] == 4 * N_EAGLE
    assert stats["bytes_read"] > budget  # the arena was reused
    for key in ("throughput_gbps", "wait_seconds", "wait_share", "engine", "engine_status",
                "direct_io", "io_status", "pinned",
                "arena_in_use", "checksum_failures", "samples_skipped", "inflight"):
        assert key in stats


_GIL_SCRIPT = r"""
import gc, json, sys, threading, time
import libshard
ds = libshard.open(sys.argv[1])
size = max(ds.location(i)["stored_size"] for i in range(len(ds)))
budget = (size + 4095) // 4096 * 4096 + 4096  # room for one sample, not two (all are equal)
loader = libshard.Loader(ds, shuffle=False, memory_budget=budget, queue_depth=1,
                         slow_wait_warning_seconds=60)
it = iter(loader)
held = [next(it)]           # the consumer holds the whole arena: the next read cannot start
ticks = []

def release():
    # Pure Python: runs only if next() below released the GIL while it waits for memory.
    t_end = time.perf_counter() + 0.3
    while time.perf_counter() < t_end:
        ticks.append(time.perf_counter())
        time.sleep(0.001)
    held.clear()
    gc.collect()

t = threading.Thread(target=release)
t.start()
t0 = time.perf_counter()
second = next(it)           # blocks until release() frees the first sample
waited = time.perf_counter() - t0
t.join()
print(json.dumps({"ticks": len(ticks), "waited": waited, "index_ok": int(second["input_ids"].numel() > 0)}))
"""


def test_other_thread_runs_while_loader_waits(tmp_path):
    """next() releases the GIL while it waits: another Python thread runs meanwhile.

    The consumer holds the only arena slot, so next() must wait until a Python thread frees it.
    Were the GIL held during the wait, that thread could never run and the process would hang
    (caught by the subprocess timeout).
    """
    import json
    import subprocess
    import sys
    from conftest import pack_dir, write_eagle_dir
    write_eagle_dir(tmp_path / "src", 4, seed=3, min_len=64, max_len=64)  # equal sizes
    dataset = pack_dir(tmp_path / "src", tmp_path / "ds")
    proc = subprocess.run([sys.executable, "-c", _GIL_SCRIPT, str(dataset)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ticks"] > 10, result
    assert result["waited"] >= 0.25, result  # next() really waited for the other thread
    assert result["index_ok"] == 1


def test_device_without_cuda_is_value_error(eagle_dataset):
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(ValueError, match="CUDA"):
        libshard.Loader(eagle_dataset, device="cuda:0", **SMALL)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_device_cuda(eagle_dataset):
    ds = libshard.open(eagle_dataset)
    loader = libshard.Loader(ds, batch_size=4, collate="pad", device="cuda:0", return_index=True,
                             **SMALL)
    n = 0
    for batch in loader:
        assert batch["hidden_state"].device.type == "cuda"
        i = int(batch["__index__"][0])
        length = int(batch["lengths"][0])
        assert torch.equal(batch["input_ids"][0, :length].cpu(), ds[i]["input_ids"])
        n += 1
    assert n == len(loader)
    cpu = libshard.Loader(ds, **SMALL)
    sample = next(iter(cpu))
    if cpu.stats()["pinned"]:
        assert sample["hidden_state"].is_pinned()


# ---- A file system that refuses O_DIRECT -------------------------------------------------------
# tmpfs accepts O_DIRECT since Linux 6.6; ramfs refuses it. These tests mount a ramfs (as root)
# unless /dev/shm still refuses O_DIRECT, and skip with the reason when neither is possible.

# Runs beside pytest in its own session: when pytest dies without cleaning up (SIGKILL,
# crash), its stdin hits EOF without the "done" line, and it detaches the mount and removes the
# directory, so no ramfs outlives the test run.
_RAMFS_REAPER = r"""
import ctypes, os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if sys.stdin.readline().strip() != "done":
    ctypes.CDLL(None, use_errno=True).umount2(os.fsencode(sys.argv[1]), 2)  # MNT_DETACH
    try:
        os.rmdir(sys.argv[1])
    except OSError:
        pass
"""


def _refuses_direct(directory) -> bool:
    """Whether a file in `directory` really cannot be opened with O_DIRECT (EINVAL/EOPNOTSUPP)."""
    import errno
    import os
    probe = os.path.join(directory, ".libshard_odirect_probe")
    with open(probe, "wb") as f:
        f.write(b"x" * 4096)
    try:
        fd = os.open(probe, os.O_RDONLY | os.O_DIRECT)
    except OSError as e:
        return e.errno in (errno.EINVAL, errno.EOPNOTSUPP)
    else:
        os.close(fd)
        return False
    finally:
        os.unlink(probe)


@pytest.fixture
def no_direct_dir(tmp_path):
    """A writable directory whose file system refuses O_DIRECT; removed (and unmounted) after."""
    import ctypes
    import os
    import pathlib
    import shutil
    import subprocess
    import sys
    import tempfile
    if os.path.isdir("/dev/shm"):
        shm = tempfile.mkdtemp(prefix="libshard_test_", dir="/dev/shm")
        try:
            if _refuses_direct(shm):
                yield pathlib.Path(shm)
                return
        finally:
            shutil.rmtree(shm, ignore_errors=True)
    if os.geteuid() != 0:
        pytest.skip("/dev/shm accepts O_DIRECT and only root can mount a ramfs")
    mount_point = tmp_path / "ramfs"
    mount_point.mkdir()
    reaper = subprocess.Popen([sys.executable, "-c", _RAMFS_REAPER, str(mount_point)],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True, text=True)
    libc = ctypes.CDLL(None, use_errno=True)
    mounted = False
    try:
        if libc.mount(b"ramfs", os.fsencode(mount_point), b"ramfs", 0, None) != 0:
            pytest.skip(f"mount -t ramfs on {mount_point} failed: "
                        f"{os.strerror(ctypes.get_errno())} (not permitted in this container?)")
        mounted = True
        if not _refuses_direct(mount_point):
            pytest.skip("this kernel's ramfs accepts O_DIRECT")
        yield mount_point
    finally:
        unmounted = True
        if mounted:
            for entry in mount_point.iterdir():
                if entry.is_dir():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
            unmounted = libc.umount2(os.fsencode(mount_point), 2) == 0  # MNT_DETACH
        if unmounted:
            reaper.stdin.write("done\n")  # else EOF alone: the reaper retries the unmount
        reaper.stdin.close()
        reaper.wait(timeout=30)


@pytest.mark.parametrize("engine", ["uring", "pread"])
def test_auto_io_mode_falls_back_to_buffered_where_direct_is_refused(eagle_src, no_direct_dir,
                                                                    engine):
    from conftest import pack_dir
    dataset = pack_dir(eagle_src, no_direct_dir / "ds", shard_size="64KiB")
    ds = libshard.open(dataset)
    try:
        loader = libshard.Loader(ds, io_mode="auto", engine=engine, shuffle=True, seed=3,
                                 return_index=True, **SMALL)
    except ValueError as e:
        if engine == "uring" and "io_uring" in str(e):
            pytest.skip(f"io_uring refused here: {e}")
        raise
    with loader:
        expect_epoch_equals_dataset(loader, ds)
        stats = loader.stats()
    assert stats["direct_io"] is False
    assert "refuses O_DIRECT" in stats["io_status"] and ds.shards[0]["path"] in stats["io_status"]
    assert stats["engine"] == ("io_uring" if engine == "uring" else "pread")


def test_direct_io_mode_where_direct_is_refused_is_value_error(eagle_src, no_direct_dir):
    from conftest import pack_dir
    dataset = pack_dir(eagle_src, no_direct_dir / "ds", shard_size="64KiB")
    with pytest.raises(ValueError, match="O_DIRECT") as e:
        libshard.Loader(dataset, io_mode="direct", engine="pread", **SMALL)
    assert str(no_direct_dir / "ds") in str(e.value)
    assert "io_mode auto or buffered" in str(e.value)


def test_default_loader_verifies_checksums(eagle_dataset, copy_dataset):
    """Damaged bytes are never served as tensors by a loader made with the defaults; only an
    explicit verify=False hands out the stored bytes unchecked."""
    dataset = copy_dataset(eagle_dataset)
    ds = libshard.open(dataset)
    loc = ds.location(3)
    shard = ds.shards[loc["shard"]]["path"]
    with open(shard, "r+b") as f:
        f.seek(loc["offset"] + loc["stored_size"] // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x5A]))
    with pytest.raises(libshard.CorruptionError, match="sample 3"):
        for _ in libshard.Loader(dataset, shuffle=False, **SMALL):
            pass
    unchecked = libshard.Loader(dataset, shuffle=False, verify=False, return_index=True, **SMALL)
    assert sorted(indices(unchecked)) == list(range(N_EAGLE))


def test_verify_none_true_false_with_partial_reads(eagle_dataset, copy_dataset):
    """verify=None (default) and verify=True check every byte served (FORMAT.md §3.9): a
    fields= selection checks the fields it serves, so damage in another field is neither read
    nor reported and damage in a served one is; verify=False checks nothing."""
    dataset = copy_dataset(eagle_dataset)
    ds = libshard.open(dataset)
    assert ds.has_field_checksums
    last = ds.schema.fields[-1].name
    loc = ds.location(2)
    shard = ds.shards[loc["shard"]]["path"]
    # Damage the last stored byte of the sample: inside the last field, never input_ids (first).
    with open(shard, "r+b") as f:
        f.seek(loc["offset"] + loc["stored_size"] - 1)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x5A]))
    for verify in (None, True):
        partial = libshard.Loader(dataset, shuffle=False, fields=["input_ids"], verify=verify,
                                  return_index=True, **SMALL)
        assert sorted(indices(partial)) == list(range(N_EAGLE))
        with pytest.raises(libshard.CorruptionError, match=f"sample 2.*field '{last}'"):
            for _ in libshard.Loader(dataset, shuffle=False, fields=[last], verify=verify,
                                     **SMALL):
                pass
        with pytest.raises(libshard.CorruptionError, match="sample 2"):
            for _ in libshard.Loader(dataset, shuffle=False, max_len=2, verify=verify, **SMALL):
                pass
    with pytest.raises(libshard.CorruptionError, match="sample 2"):
        for _ in libshard.Loader(dataset, shuffle=False, **SMALL):
            pass
    unchecked = libshard.Loader(dataset, shuffle=False, verify=False, return_index=True, **SMALL)
    assert sorted(indices(unchecked)) == list(range(N_EAGLE))
