"""``libshard.ReadAheadSampler``: a torch ``DataLoader``'s batches, each DataLoader worker told
ahead which indices it will be asked for, so that a map-style dataset with a read-ahead
(:meth:`libshard.Dataset.prefetch`) serves them from memory already read.

How a DataLoader hands out work (torch 2.x, ``dataloader.py``): with ``num_workers = W`` and
``in_order=True`` (the default), batch ``k`` of an epoch goes to worker ``k % W``, every epoch
starting at worker 0, ``persistent_workers`` or not; each worker fetches its batches in that
order, one index after the other. So the batch sampler's order tells, in the main process,
which indices each worker will be asked for next. This sampler yields the batches of the one
it wraps, unchanged, and attaches to batch ``k`` the indices of worker ``k % W``'s batches up to
``depth`` of its batches ahead that it has not been told of yet. The attachment travels with
the batch through the worker's index queue (pickled, under fork, spawn and forkserver alike)
and is delivered when the worker unpickles the batch, just before it fetches it: there,
``announce(dataset, indices)`` is called with the worker's own copy of the DataLoader's dataset
(``torch.utils.data.get_worker_info().dataset``); by default that is
``dataset.prefetch(indices)``. The batch the fetcher sees is a plain list.

With ``num_workers=0`` the batches are fetched in the main process: the announcement is made
there, on the ``dataset`` given to this sampler, as each batch is yielded.
"""

from __future__ import annotations

import collections
import itertools
import warnings
from typing import Any, Callable, Deque, Iterator, List, Optional, Sequence

import torch.utils.data

from ._core import InvalidArgumentError
from ._sampler_order import batch_indices

Announce = Callable[[Any, List[int]], None]

_warned: set = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=2)


def announce_to_dataset(dataset: Any, indices: List[int]) -> None:
    """The default announcement: ``dataset.prefetch(indices)`` (a :class:`libshard.Dataset`, or
    any dataset that defines ``prefetch``); a dataset without one gets a warning, once."""
    prefetch = getattr(dataset, "prefetch", None)
    if prefetch is None:
        _warn_once("no-prefetch",
                   f"libshard.ReadAheadSampler: the DataLoader's dataset "
                   f"({type(dataset).__name__}) has no prefetch(indices) method, so nothing is "
                   "read ahead; give the sampler announce=fn(dataset, indices) that tells its "
                   "libshard.Dataset")
        return
    prefetch(indices)


def _deliver(batch: List[int], ahead: List[int], worker: int, workers: int,
             announce: Optional[Announce]) -> List[int]:
    """Unpickling a batch in a DataLoader worker: announce ``ahead`` there, return the batch."""
    if ahead:
        info = torch.utils.data.get_worker_info()
        if info is None:
            return batch  # not in a DataLoader worker: nobody to tell
        if info.num_workers != workers or info.id != worker:
            _warn_once("worker-mismatch",
                       f"libshard.ReadAheadSampler: a batch planned for worker {worker} of "
                       f"{workers} reached worker {info.id} of {info.num_workers}: give the "
                       "sampler the DataLoader's num_workers, and keep in_order=True (batches "
                       "then go to the workers in turn); meanwhile its samples are read "
                       "synchronously")
            return batch
        try:
            (announce or announce_to_dataset)(info.dataset, ahead)
        except Exception as e:  # noqa: BLE001 - reading ahead is never worth a failed batch
            _warn_once("announce-failed",
                       f"libshard.ReadAheadSampler: announcing the next indices failed in "
                       f"worker {info.id} ({type(e).__name__}: {e}); its samples are read "
                       "synchronously")
    return batch


class _AnnouncedBatch(list):
    """A batch that, unpickled in a DataLoader worker, announces ``ahead`` and becomes a list."""

    __slots__ = ("ahead", "worker", "workers", "announce")

    def __reduce__(self) -> Any:
        return (_deliver, (list(self), self.ahead, self.worker, self.workers, self.announce))


class ReadAheadSampler(torch.utils.data.Sampler[List[int]]):
    """A batch sampler for ``torch.utils.data.DataLoader(dataset, batch_sampler=...)`` that
    tells each DataLoader worker, ahead, which indices it will be asked for.

    ::

        ds = libshard.open("packed/", read_ahead={"memory_budget": "1GiB"})
        sampler = DistributedSampler(ds, shuffle=True)          # or any sampler
        batches = libshard.ReadAheadSampler(sampler, ds, batch_size=4, num_workers=8)
        loader = DataLoader(ds, batch_sampler=batches, num_workers=8, collate_fn=my_collate)
        for epoch in range(epochs):
            batches.set_epoch(epoch)                             # forwards to the sampler
            for batch in loader:
                ...

    Args:
      sampler: a batch sampler (yields lists of indices), or with ``batch_size`` a sampler of
        single indices (batched as ``torch.utils.data.BatchSampler(sampler, batch_size,
        drop_last)``).
      dataset: the DataLoader's dataset. It is told the indices itself with ``num_workers=0``;
        with workers, each worker's own copy is (only its type matters here).
      num_workers: the DataLoader's ``num_workers`` (batch k goes to worker k % num_workers).
        The DataLoader must keep ``in_order=True``.
      depth: how many of a worker's batches after the one it fetches it is told of (8). The
        read-ahead reads as far into them as its memory budget allows.
      announce: ``announce(dataset, indices)``, called in the process that reads with its copy
        of the dataset; default ``dataset.prefetch(indices)``. It travels with every batch: give
        a module-level function (it pickles as its name).
    """

    def __init__(self, sampler: Any, dataset: Any, *, num_workers: int,
                 batch_size: Optional[int] = None, drop_last: bool = False, depth: int = 8,
                 announce: Optional[Announce] = None) -> None:
        for name, value, low in (("num_workers", num_workers, 0), ("depth", depth, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidArgumentError(f"ReadAheadSampler: {name} must be an integer >= "
                                           f"{low}, got {value!r}")
        if batch_size is not None:
            sampler = torch.utils.data.BatchSampler(sampler, batch_size, drop_last)
        elif drop_last:
            raise InvalidArgumentError("ReadAheadSampler: drop_last applies with batch_size only "
                                       "(a batch sampler drops its own last batch)")
        self.sampler = sampler
        self.dataset = dataset
        self.num_workers = num_workers
        self.depth = depth
        self.announce = announce

    def __len__(self) -> int:
        return len(self.sampler)

    def set_epoch(self, epoch: int) -> None:
        """``set_epoch(epoch)`` on the wrapped sampler, or on its inner ``sampler`` (a
        ``BatchSampler`` over a ``DistributedSampler``)."""
        for obj in (self.sampler, getattr(self.sampler, "sampler", None)):
            fn = getattr(obj, "set_epoch", None)
            if callable(fn):
                fn(epoch)
                return

    def __iter__(self) -> Iterator[List[int]]:
        workers = max(self.num_workers, 1)
        horizon = self.depth * workers  # batch k tells of its worker's batches up to k + horizon
        source = iter(self.sampler)
        window: Deque[List[int]] = collections.deque()  # batches k, k + 1, ...
        told = [-1] * workers  # per worker: the last batch it was told of (-1: none)
        exhausted = False
        for k in itertools.count():
            while not exhausted and len(window) <= horizon:
                try:
                    batch = next(source)
                except StopIteration:
                    exhausted = True
                    break
                window.append(self._checked(batch, k + len(window)))
            if not window:
                return
            w = k % workers
            ahead: List[int] = []
            j = k if told[w] < k else told[w] + workers  # its next batch not told of
            while j - k < len(window) and j <= k + horizon:
                ahead.extend(window[j - k])
                told[w] = j
                j += workers
            batch = window.popleft()
            if self.num_workers == 0:
                if ahead:
                    (self.announce or announce_to_dataset)(self.dataset, ahead)
                yield batch
                continue
            out = _AnnouncedBatch(batch)
            out.ahead, out.worker, out.workers, out.announce = ahead, w, workers, self.announce
            yield out

    @staticmethod
    def _checked(batch: Sequence[Any], k: int) -> List[int]:
        """Batch ``k`` as a list of indices, each checked (a float, string or bool is refused,
        named with its type and position, never truncated or parsed), at most MAX_BATCH of
        them (an endless iterable as a batch is refused, not collected)."""
        if isinstance(batch, (int, torch.Tensor)) and not isinstance(batch, bool) and (
                not isinstance(batch, torch.Tensor) or batch.dim() == 0):
            raise InvalidArgumentError(
                f"ReadAheadSampler: the sampler yielded a single index ({batch!r}) as batch {k}: "
                "give batch_size= to batch a sampler of single indices (the DataLoader must "
                "batch for the read-ahead)")
        return list(batch_indices(batch, f"ReadAheadSampler: batch {k} of the sampler"))
