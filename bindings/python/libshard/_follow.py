"""``libshard.open(path, follow=True)``: a dataset read at random while it is being written."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Dict, Optional, Tuple, Union

from . import _core
from ._dataset import Dataset, PathLike


def dataset_settings(cache: Optional[PathLike],
                     cache_size: Union[int, str, None]) -> Tuple[str, int]:
    """(cache directory, cache size in bytes) as ``libshard.open`` reads ``cache=`` and
    ``cache_size=`` (the library's DatasetOptionTable: None or 0 is no bound, sizes as ints or
    "500GiB", the same errors), for the follower of a dataset being written."""
    settings = {"cache": None if cache is None else os.fspath(cache), "cache_size": cache_size}
    cache_dir, size = _core.dataset_settings(settings)
    return str(cache_dir), int(size)


class FollowedDataset(Dataset):
    """A dataset that a ``libshard.Writer`` (or ``libshard pack``, or the ranks of a multi-rank
    write) is still writing, as a map-style dataset that grows (docs/FORMAT.md §6.1).

    ``ds[i]`` is the i-th sample committed (for one writer, the dataset's own sample i; for W
    writer ranks, the round-robin arrival order of their parts), checked as :class:`Dataset`
    checks. ``len(ds)`` looks for new samples first, so a ``DataLoader`` epoch covers what was
    committed when it started. :attr:`complete` says when the writer closed the dataset;
    :meth:`wait` blocks for more. The writer makes samples visible every ``commit_interval``
    seconds (``libshard.Writer``). For training while a dataset is written, prefer
    ``libshard.Loader(path, follow=True)``: exact-once across ranks, resumable.
    """

    def __init__(self, path: PathLike, *, verify: bool = True, metadata: bool = True,
                 cache: Optional[PathLike] = None,
                 cache_size: Union[int, str, None] = None) -> None:
        self._path = os.fspath(path)
        self._verify = bool(verify)
        self._metadata = bool(metadata)
        self._cache, self._cache_size = dataset_settings(cache, cache_size)
        self._follower = _core.Follower(self._path, self._verify, self._cache, self._cache_size)
        self._core = None
        self._snapshot_size = -1
        self._schema = None
        self._lengths = None
        self._key_index = None
        # No read-ahead over a dataset that grows (prefetch refuses); Dataset's reads look here.
        self._read_ahead_options: Dict[str, Any] = {}
        self._ra = None
        self._ra_pid = os.getpid()
        self._ra_lock = threading.Lock()
        self.refresh()

    def prefetch(self, indices: Any) -> None:
        """Not for a dataset being written: read it with ``libshard.Loader(path, follow=True)``,
        which reads ahead as samples arrive, or open it with ``read_ahead`` once complete."""
        raise _core.InvalidArgumentError(
            f"{self._path}: prefetch does not apply to a dataset being written "
            "(libshard.open(..., follow=True)); read it with libshard.Loader(path, follow=True), "
            "or open it with libshard.open(path, read_ahead=...) once it is complete")

    def __getstate__(self) -> Dict[str, Any]:
        state = super().__getstate__()
        state["follow"] = True
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state["path"], verify=state["verify"], metadata=state["metadata"],
                      cache=state.get("cache") or None, cache_size=state.get("cache_size") or None)

    def refresh(self) -> int:
        """Looks for samples committed since the last look; returns how many there are now."""
        self._follower.poll()
        progress = self._follower.progress()
        if progress["samples"] != self._snapshot_size and progress["writers"] > 0:
            try:
                self._core = self._follower.snapshot()
            except _core.NotFoundError:  # no schema written yet
                return 0
            self._snapshot_size = progress["samples"]
            self._lengths = None
            self._key_index = None
        return 0 if self._core is None else len(self._core)

    @property
    def progress(self) -> Dict[str, Any]:
        """``{"samples", "complete", "writers", "waiting_for"}``: where the write stands."""
        return self._follower.progress()

    @property
    def complete(self) -> bool:
        """True once the writer(s) closed the dataset: every sample is here."""
        self.refresh()
        return bool(self._follower.progress()["complete"])

    def wait(self, samples: Optional[int] = None, timeout: Optional[float] = None,
             interval: float = 0.1) -> bool:
        """Blocks until at least ``samples`` samples are here (None: until the dataset is
        complete), or ``timeout`` seconds passed; returns whether that happened."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            n = self.refresh()
            done = self._follower.progress()["complete"]
            if done or (samples is not None and n >= samples):
                return samples is None or n >= samples
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(interval)

    def __len__(self) -> int:
        return self.refresh()

    def __getitem__(self, index: int) -> Dict[str, Any]:
        if self._core is None or (isinstance(index, int) and index >= len(self._core)):
            self.refresh()
        if self._core is None:
            raise IndexError(f"sample index {index} is out of range: {self._path} has no sample "
                             f"yet ({self._follower.progress()['waiting_for']})")
        return super().__getitem__(index)

    @property
    def schema(self):  # type: ignore[override]
        if self._core is None:
            self.refresh()
        if self._core is None:
            raise _core.NotFoundError(f"{self._path}: no schema yet "
                                      f"({self._follower.progress()['waiting_for']})")
        return super().schema

    def check(self, expect: Optional[Dict[str, Union[str, int]]]) -> None:
        """Attributes are recorded in the manifest, which exists once the writer closed the
        dataset: checked then, refused before."""
        if not expect:
            return
        if not self.complete:
            waiting = self._follower.progress()["waiting_for"]
            raise _core.InvalidArgumentError(
                f"expect={expect!r}: {self._path} is still being written (or not started: "
                f"waiting for {waiting}), and its attributes are recorded when its writer "
                "closes it; check Dataset(path).attributes once it is complete, or drop expect")
        # Opened as libshard.open opens it (the same cache settings), so a complete dataset is
        # checked exactly as Dataset.check checks one.
        settings = {"cache": self._cache or None, "cache_size": self._cache_size or None}
        _core.check_attributes(_core.Dataset.open(self._path, False, settings), dict(expect))

    def __repr__(self) -> str:
        p = self._follower.progress()
        return (f"libshard.FollowedDataset({self._path!r}, samples={p['samples']}, "
                f"complete={p['complete']})")
