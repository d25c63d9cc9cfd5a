"""The epochs of a ``libshard.Loader(sampler=..., batch_sampler=...)``: a torch ``Sampler`` or
batch sampler's order handed to the C++ loader as each epoch's steps (``docs/ORDER.md`` §6).

The sampler runs in Python, once per epoch: ``set_epoch(epoch)`` first when it has one (or,
for a batch sampler without one, its inner ``sampler`` has one: ``BatchSampler(
DistributedSampler(...))``), then its indices are collected into two int64 arrays, every step's
indices one after the other and the steps' bounds, which the C++ loader checks and streams.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterable, Optional, Tuple

import numpy as np

from ._core import InvalidArgumentError


class SamplerOrder:
    """This rank's steps of each epoch, from ``sampler`` (single indices, grouped by
    ``batch_size`` when given, the last partial group dropped with ``drop_last``) or from
    ``batch_sampler`` (one step per batch it yields)."""

    def __init__(self, sampler: Any, batch_sampler: Any, batch_size: Optional[int],
                 drop_last: bool) -> None:
        if sampler is not None and batch_sampler is not None:
            raise InvalidArgumentError(
                "Loader: sampler and batch_sampler are exclusive; give a batch_sampler (it "
                "batches), or a sampler with batch_size")
        if batch_sampler is not None and (batch_size is not None or drop_last):
            raise InvalidArgumentError(
                "Loader: batch_sampler is exclusive with batch_size and drop_last (its batches "
                "are the steps), as in torch.utils.data.DataLoader")
        source = sampler if sampler is not None else batch_sampler
        if not hasattr(source, "__iter__"):
            raise InvalidArgumentError(
                f"Loader: the {'sampler' if sampler is not None else 'batch_sampler'} must be "
                f"iterable (a torch.utils.data.Sampler), got {type(source).__name__}")
        self.source = source
        self.batched = batch_sampler is not None
        self.batch_size = batch_size
        self.drop_last = bool(drop_last)

    def set_epoch(self, epoch: int) -> None:
        """``set_epoch(epoch)`` on the sampler, or on a batch sampler's inner sampler."""
        for obj in (self.source, getattr(self.source, "sampler", None)):
            fn = getattr(obj, "set_epoch", None)
            if callable(fn):
                fn(epoch)
                return

    def splits_by_rank(self) -> bool:
        """Whether the sampler splits the epoch across ranks itself (a DistributedSampler, or
        any sampler with ``num_replicas``)."""
        return any(hasattr(obj, "num_replicas")
                   for obj in (self.source, getattr(self.source, "sampler", None)))

    def steps(self) -> Tuple[np.ndarray, np.ndarray]:
        """(samples, bounds) of one pass over the sampler: step k is
        ``samples[bounds[k]:bounds[k + 1]]``."""
        if not self.batched:
            samples = _indices(iter(self.source), "sampler")
            n = len(samples)
            if self.batch_size is None:
                return samples, np.arange(n + 1, dtype=np.int64)
            b = self.batch_size
            if isinstance(b, bool) or not isinstance(b, int) or b < 1:
                raise InvalidArgumentError(f"Loader: batch_size must be a positive integer, "
                                           f"got {b!r}")
            full = n // b * b if self.drop_last else n
            bounds = np.append(np.arange(0, full, b, dtype=np.int64), full)
            return samples[:full], bounds
        flat: list = []
        bounds = [0]
        for k, batch in enumerate(self.source):
            try:
                flat.extend(batch)
            except TypeError:
                raise InvalidArgumentError(
                    f"Loader: batch_sampler yielded {type(batch).__name__} {batch!r} as batch "
                    f"{k}, not a sequence of indices; pass a sampler of single indices as "
                    "sampler= instead") from None
            bounds.append(len(flat))
        return _indices(flat, "batch_sampler"), np.asarray(bounds, dtype=np.int64)


def _indices(values: Iterable[Any], what: str) -> np.ndarray:
    try:
        return np.fromiter(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidArgumentError(f"Loader: the {what} yielded something that is not a dataset "
                                   f"index (an int): {e}") from None


def warn_unsplit(order: SamplerOrder, world_size: int) -> None:
    """One warning when several ranks share a sampler that does not split by rank: the loader
    does not split a sampler's order again (``docs/ORDER.md`` §6)."""
    if world_size > 1 and not order.splits_by_rank():
        warnings.warn(
            f"libshard.Loader: world_size is {world_size} but the sampler does not split the "
            "epoch across ranks (it has no num_replicas); the loader streams the sampler's order "
            "as it is, so every rank reads the same samples. Use a "
            "torch.utils.data.DistributedSampler (or drop sampler= to let the loader split)",
            stacklevel=3)
