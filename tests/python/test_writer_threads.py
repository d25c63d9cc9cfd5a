"""One ``libshard.Writer`` shared by several threads (issue 45, "threads"): every entry point
(``write``, ``has``, ``in``, ``len``, ``flush``, ``close``, ``abort``, the ``with`` block's exit)
may be called from any thread at once. A key is committed exactly once whichever threads write
it (the others get the error of a key already written), a write after another thread closed the
Writer is refused, and the dataset never holds a key twice. Before, eight threads writing the
same 200 keys committed up to 206 samples."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Callable, Dict, List

import pytest
import torch

import libshard
from libshard import _core

THREADS = 8


def _sample(i: int) -> Dict[str, torch.Tensor]:
    return {"input_ids": torch.arange(3 + i % 5) + i}


def _on_threads(fn: Callable[[int], None], n: int = THREADS) -> List[BaseException]:
    """Runs fn(t) on n threads released together; returns what they raised (unexpectedly)."""
    barrier = threading.Barrier(n)
    raised: List[BaseException] = []

    def run(t: int) -> None:
        barrier.wait()
        try:
            fn(t)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            raised.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return raised


def _keys(path) -> List[str]:
    ds = libshard.open(path)
    return [ds.key(i) for i in range(len(ds))]


def _check(path, written: Dict[str, int]) -> None:
    """The dataset holds exactly the keys in `written`, each once, with its sample's values."""
    keys = _keys(path)
    assert len(keys) == len(set(keys)), Counter(keys).most_common(3)
    assert set(keys) == set(written)
    ds = libshard.open(path)
    for i, key in enumerate(keys):
        assert torch.equal(ds[i]["input_ids"], _sample(written[key])["input_ids"]), key


@pytest.mark.parametrize("threads", [1, 3])
def test_threads_writing_the_same_keys_commit_each_once(tmp_path, threads):
    w = libshard.Writer(tmp_path / "ds", fsync=False, threads=threads, in_flight_bytes="64KiB")
    written: Dict[str, int] = {}
    refused = Counter()
    lock = threading.Lock()

    def run(t: int) -> None:
        for i in range(100):
            key = f"k{i}"
            try:
                w.write(_sample(i), key=key)
            except libshard.InvalidArgumentError as e:
                assert "already in" in str(e), e
                with lock:
                    refused[key] += 1
                continue
            with lock:
                assert key not in written
                written[key] = i
            assert w.has(key) and key in w

    assert _on_threads(run) == []
    assert len(w) == 100
    w.close()
    assert all(refused[f"k{i}"] == THREADS - 1 for i in range(100))
    _check(tmp_path / "ds", written)


def test_the_first_write_opens_the_dataset_once(tmp_path):
    """The schema comes from the first sample: threads whose first writes race open it once (a
    second open was an AlreadyExistsError on the dataset's own lock)."""
    for round_ in range(5):
        w = libshard.Writer(tmp_path / f"ds{round_}", fsync=False)
        assert _on_threads(lambda t: w.write(_sample(t), key=f"t{t}")) == []
        w.close()
        _check(tmp_path / f"ds{round_}", {f"t{t}": t for t in range(THREADS)})


@pytest.mark.parametrize("how", ["close", "abort", "exit"])
def test_closing_while_others_write(tmp_path, how):
    """close / abort / the with block's exit from one thread while the others write: every write
    that returned is committed (close, exit) or none is (abort); later writes say the Writer is
    closed; nothing is written twice or torn."""
    out = tmp_path / "ds"
    w = libshard.Writer(out, fsync=False, threads=2, in_flight_bytes="64KiB")
    w.write(_sample(0), key="first")
    written: Dict[str, int] = {"first": 0}
    lock = threading.Lock()
    started = threading.Barrier(THREADS)

    def run(t: int) -> None:
        if t == 0:
            started.wait()
            if how == "close":
                w.close()
            elif how == "abort":
                w.abort()
            else:
                w.__exit__(None, None, None)
            return
        started.wait()
        for i in range(1, 300):
            key = f"t{t}-{i}"
            try:
                w.write(_sample(i), key=key)
            except libshard.InvalidArgumentError as e:
                assert "is closed" in str(e), e
                return
            with lock:
                written[key] = i

    assert _on_threads(run) == []
    if how == "abort":
        assert not (out / "manifest.json").exists()
        # A Writer reopened on it continues from what the journal kept: a subset of the writes
        # that returned, each once.
        reopened = libshard.Writer(out, fsync=False)
        kept = set(_keys_of(reopened))
        reopened.close()
        assert kept <= set(written)
        _check(out, {k: written[k] for k in kept})
    else:
        _check(out, written)
    with pytest.raises(libshard.InvalidArgumentError, match="is closed"):
        w.write(_sample(1), key="late")


def _keys_of(w: libshard.Writer) -> List[str]:
    return [k for k in w._keys]


def test_flush_has_and_len_from_other_threads(tmp_path):
    w = libshard.Writer(tmp_path / "ds", fsync=False, threads=2)
    stop = threading.Event()
    seen: List[int] = []

    def run(t: int) -> None:
        if t == 0:
            for i in range(200):
                w.write(_sample(i), key=f"k{i}")
            stop.set()
        elif t == 1:
            while not stop.is_set():
                w.flush()
        else:
            while not stop.is_set():
                n = len(w)
                seen.append(n)
                if n:
                    assert w.has(f"k{n - 1}")
                _ = w.blocked_seconds

    assert _on_threads(run, n=4) == []
    assert seen and max(seen) <= 200
    w.close()
    _check(tmp_path / "ds", {f"k{i}": i for i in range(200)})


def test_the_core_writer_survives_finish_and_abort_from_another_thread(tmp_path):
    """_core.Writer (the bindings' pipeline) called from several threads at once, below
    libshard.Writer's own turns: finish() or abort() while another thread submits never destroys
    the pipeline under it; the submit fails with a clear error instead."""
    schema = {"fields": [{"name": "input_ids", "dtype": "int64", "rank": 1, "seq_dim": 0}],
              "length_field": 0}
    for end in ("finish", "abort"):
        core = _core.Writer.open(str(tmp_path / end), schema, {"fsync": False, "threads": 2},
                                 False)
        tensors = [torch.arange(16) for _ in range(64)]
        outcome: List[str] = []

        def run(t: int) -> None:
            if t == 0:
                getattr(core, end)()
                return
            for i in range(200):
                x = tensors[i % 64]
                try:
                    core.submit(f"t{t}-{i}", [("input_ids", "int64", (16,), x.data_ptr(),
                                               x.numel() * 8)], {})
                except libshard.Error as e:
                    outcome.append(str(e))
                    return

        assert _on_threads(run, n=4) == []
        assert all("closed" in m or "stopped" in m for m in outcome), outcome
        if end == "finish":
            keys = _keys(tmp_path / end)
            assert len(keys) == len(set(keys))
