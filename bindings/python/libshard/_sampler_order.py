"""The epochs of a ``libshard.Loader(sampler=..., batch_sampler=...)``: a torch ``Sampler`` or
batch sampler's order handed to the C++ loader as each epoch's steps (``docs/ORDER.md`` §6).

The sampler runs in Python, once per epoch: ``set_epoch(epoch)`` first when it has one (or,
for a batch sampler without one, its inner ``sampler`` has one: ``BatchSampler(
DistributedSampler(...))``), then its indices are read *as the loader streams them*, a chunk at
a time: a chunk is the next :data:`CHUNK_STEPS` steps, or fewer once they hold
:data:`CHUNK_SAMPLES` indices, collected into two int64 arrays (every step's indices one after
the other, and the steps' bounds) that the C++ loader checks and streams; when it has served a
chunk's last step, the next chunk is read. So memory stays bounded by a chunk whatever the
sampler yields, an endless sampler streams for as long as the caller iterates, and an epoch that
fits in one chunk (up to a million steps of a million indices) is given whole, as before.

Chunk boundaries depend on the sampler's stream alone (step counts and index counts), so a
resume replays the sampler to the chunk that holds the saved position: ``state_dict()`` gives the
epoch's position (steps consumed since the epoch began, across chunks) and the digest of that
chunk's steps (which, for an epoch of one chunk, is the digest of the whole epoch's steps).

Every value a sampler yields must be a dataset index: an ``int`` (or ``numpy`` integer, a 0-dim
integer tensor, anything with ``__index__``); a float, a float tensor, a string, bytes, a bool
or None is refused with an ``InvalidArgumentError`` naming the value, its type and its position
(the sample's position in the epoch, or the batch and the element), never truncated or parsed.
The same rule checks the indices given to ``Dataset.prefetch`` and ``ReadAheadSampler``
(:func:`index`, :func:`indices_array`).
"""

from __future__ import annotations

import array
import itertools
import operator
import warnings
from collections.abc import Mapping
from typing import Any, Iterator, List, Optional, Tuple

import numpy as np
import torch

from ._core import InvalidArgumentError

#: A chunk of a sampler's epoch ends after this many steps...
CHUNK_STEPS = 1 << 20
#: ... or at the first step boundary once it holds this many indices (8 MiB of int64).
CHUNK_SAMPLES = 1 << 20
#: The most indices one batch (of a batch sampler) may hold: a longer one is refused (an endless
#: iterable given as a batch would otherwise be collected until memory ran out).
MAX_BATCH = 1 << 20
#: The most indices one ``Dataset.prefetch`` call announces (announce in parts beyond it).
MAX_ANNOUNCE = 1 << 24

_INT64_MAX = (1 << 63) - 1


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    kind = type(value).__name__
    if isinstance(value, torch.Tensor):
        kind = f"{kind} of dtype {value.dtype} and shape {tuple(value.shape)}"
    elif isinstance(value, np.ndarray):
        kind = f"{kind} of dtype {value.dtype} and shape {value.shape}"
    return f"{text} ({kind})"


def _not_an_index(value: Any, where: str, why: str = "") -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{where} is {_describe(value)}, which is not a dataset index{why}: a sampler yields "
        "ints (a batch sampler sequences of ints); a value that is not one is refused rather "
        "than truncated or parsed. Convert it in the sampler (int(i)) if it is meant as an "
        "index")


def index(value: Any, where: str) -> int:
    """``value`` as a dataset index, or ``InvalidArgumentError`` naming it, its type and
    ``where`` (e.g. "position 3 of the sampler's epoch 0"). Accepted: ``int`` and anything with
    ``__index__`` (numpy integers, 0-dim integer arrays and tensors), from 0 to 2^63 - 1; refused:
    bools (a mask is not an index), floats, strings, bytes, None and the rest."""
    if type(value) is int:
        if 0 <= value <= _INT64_MAX:
            return value
        raise _not_an_index(value, where, " (negative, or past 2^63 - 1)")
    if isinstance(value, (bool, np.bool_)):
        raise _not_an_index(value, where, " (a bool: a mask is not an index)")
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 or value.dtype.is_floating_point or value.dtype.is_complex or \
                value.dtype == torch.bool:
            raise _not_an_index(value, where, " (only a 0-dim integer tensor is one)")
        value = value.item()
    elif isinstance(value, np.ndarray):
        if value.ndim != 0 or value.dtype.kind not in "iu":
            raise _not_an_index(value, where, " (only a 0-dim integer array is one)")
        value = value.item()
    try:
        i = operator.index(value)
    except TypeError:
        raise _not_an_index(value, where) from None
    if not 0 <= i <= _INT64_MAX:
        raise _not_an_index(value, where, " (negative, or past 2^63 - 1)")
    return i


def indices_array(values: Any, what: str, limit: Optional[int] = None) -> np.ndarray:
    """``values`` (an iterable of indices, a 1-dim integer array or tensor) as an int64 array,
    every value checked by :func:`index`; at most ``limit`` of them (an endless iterable is
    refused once it passed the limit, not collected until memory runs out; default
    :data:`MAX_ANNOUNCE`)."""
    if limit is None:
        limit = MAX_ANNOUNCE
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu()
        if values.dtype.is_floating_point or values.dtype.is_complex or values.dtype == torch.bool:
            raise InvalidArgumentError(
                f"{what}: a tensor of dtype {values.dtype} holds no dataset indices; give "
                "integers (a mask or float positions are not indices)")
        values = values.numpy()
    if isinstance(values, np.ndarray):
        if values.dtype.kind not in "iu":
            raise InvalidArgumentError(
                f"{what}: an array of dtype {values.dtype} holds no dataset indices; give "
                "integers (a mask, floats or strings are not indices)")
        flat = values.reshape(-1)
        if flat.size > limit:
            raise InvalidArgumentError(f"{what}: {flat.size} indices in one call, more than "
                                       f"{limit}; announce them in parts")
        if flat.size and (flat.min() < 0 or (flat.dtype.kind == "u" and
                                             flat.max() > _INT64_MAX)):
            k = int(np.argmax(flat < 0)) if flat.min() < 0 else int(np.argmax(flat > _INT64_MAX))
            raise _not_an_index(flat[k].item(), f"{what}: value {k}", " (negative)")
        return np.ascontiguousarray(flat, dtype=np.int64)
    if isinstance(values, (str, bytes, bytearray, Mapping)):
        raise InvalidArgumentError(f"{what}: {_describe(values)} is not a sequence of dataset "
                                   "indices")
    out = array.array("q")
    for k, v in enumerate(itertools.islice(values, limit + 1)):
        if k == limit:
            raise InvalidArgumentError(
                f"{what}: more than {limit} indices in one call (an endless iterable?); "
                "announce them in parts as they come (libshard.ReadAheadSampler does)")
        out.append(index(v, f"{what}: value {k}"))
    return np.frombuffer(out, dtype=np.int64) if len(out) else np.zeros(0, np.int64)


def batch_indices(batch: Any, where: str, limit: Optional[int] = None) -> List[int]:
    """The indices of one batch a batch sampler yielded (a sequence, a 1-dim integer array or
    tensor), each checked; ``where`` names the batch ("batch 4 of the batch sampler's epoch
    2"). A single index, a string or bytes, a mapping, or more than ``limit`` indices is
    refused (default :data:`MAX_BATCH`)."""
    if limit is None:
        limit = MAX_BATCH
    if isinstance(batch, (int, np.integer)) or (
            isinstance(batch, (torch.Tensor, np.ndarray)) and batch.ndim == 0):
        raise InvalidArgumentError(
            f"{where} is {_describe(batch)}, a single value, not a sequence of indices; pass a "
            "sampler of single indices as sampler= (with batch_size=) instead")
    if isinstance(batch, (str, bytes, bytearray, Mapping)) or not hasattr(batch, "__iter__"):
        raise InvalidArgumentError(
            f"{where} is {_describe(batch)}, not a sequence of dataset indices; a batch sampler "
            "yields lists of ints")
    if isinstance(batch, (torch.Tensor, np.ndarray)):
        arr = indices_array(batch, where, limit)
        return arr.tolist()
    if type(batch) is list and len(batch) <= limit and all(
            type(v) is int and 0 <= v <= _INT64_MAX for v in batch):
        return batch  # the common case, checked at C speed
    out: List[int] = []
    for j, v in enumerate(itertools.islice(batch, limit + 1)):
        if j == limit:
            raise InvalidArgumentError(
                f"{where} holds more than {limit} indices (an endless iterable as a batch?); a "
                "batch of a batch sampler is a finite list of ints")
        out.append(index(v, f"element {j} of {where}"))
    return out


class SamplerOrder:
    """This rank's steps of each epoch, from ``sampler`` (single indices, grouped by
    ``batch_size`` when given, the last partial group dropped with ``drop_last``) or from
    ``batch_sampler`` (one step per batch it yields), read a chunk at a time (module doc)."""

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
        b = batch_size
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 1):
            raise InvalidArgumentError(f"Loader: batch_size must be a positive integer, "
                                       f"got {b!r}")
        self.source = source
        self.batched = batch_sampler is not None
        self.batch_size = batch_size
        self.drop_last = bool(drop_last)
        self.what = "batch_sampler" if self.batched else "sampler"
        # The epoch being streamed: its steps iterator, the steps before the current chunk, the
        # skipped samples of the chunks before it, whether the stream ended.
        self.epoch: Optional[int] = None
        self._steps: Optional[Iterator[List[int]]] = None
        self.offset = 0
        self.chunk_steps = 0
        self.skipped_before: List[int] = []
        self.ended = False
        self._pending: Optional[Tuple[int, Tuple[np.ndarray, np.ndarray]]] = None

    # -- the sampler ------------------------------------------------------------------------
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

    def _step_iter(self, epoch: int) -> Iterator[List[int]]:
        """The epoch's steps, each a checked list of indices, read lazily."""
        it = iter(self.source)
        if self.batched:
            for k, batch in enumerate(it):
                yield batch_indices(batch, f"batch {k} of the batch_sampler's epoch {epoch}")
            return
        position = 0
        group = self.batch_size or 1
        while True:
            step: List[int] = []
            for v in itertools.islice(it, group):
                step.append(v if type(v) is int and 0 <= v <= _INT64_MAX else
                            index(v, f"the value at position {position} of the sampler's "
                                     f"epoch {epoch}"))
                position += 1
            if not step or (len(step) < group and self.drop_last):
                return
            yield step
            if len(step) < group:
                return

    # -- chunks -----------------------------------------------------------------------------
    def _read_chunk(self) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        """The next chunk of the epoch's steps as (samples, bounds), or None at its end (an
        epoch with no step at all is one empty chunk)."""
        assert self._steps is not None
        samples = array.array("q")
        bounds = array.array("q", [0])
        for step in self._steps:
            samples.extend(step)
            bounds.append(len(samples))
            if len(bounds) - 1 >= CHUNK_STEPS or len(samples) >= CHUNK_SAMPLES:
                break
        else:
            self.ended = True
        if len(bounds) == 1 and self.offset + self.chunk_steps > 0:
            return None
        return (np.frombuffer(samples, dtype=np.int64) if len(samples) else
                np.zeros(0, np.int64), np.frombuffer(bounds, dtype=np.int64))

    def begin(self, epoch: int, position: int = 0) -> Tuple[int, int]:
        """Starts epoch ``epoch`` (``set_epoch`` on the sampler) and reads its chunks up to the
        one holding step ``position`` (a resume), kept for :meth:`first_chunk`. Returns
        (position within that chunk, steps before it)."""
        self.set_epoch(epoch)
        self.epoch = epoch
        self._steps = self._step_iter(epoch)
        self.offset, self.chunk_steps, self.skipped_before, self.ended = 0, 0, [], False
        chunk = self._read_chunk()
        assert chunk is not None
        # Position p is "after step p": it belongs to the chunk whose steps reach it.
        while len(chunk[1]) - 1 < position - self.offset and not self.ended:
            self.chunk_steps = len(chunk[1]) - 1  # read() tells an ended epoch by it
            nxt = self._read_chunk()
            if nxt is None:
                break  # past the epoch's end: the loader refuses the position
            self.offset += self.chunk_steps
            chunk = nxt
        self.chunk_steps = len(chunk[1]) - 1
        self._pending = (epoch, chunk)
        return position - self.offset, self.offset

    def first_chunk(self, epoch: int) -> Tuple[np.ndarray, np.ndarray]:
        """Epoch ``epoch``'s first chunk (or, after ``begin(epoch, position)``, the chunk that
        holds the position)."""
        if self._pending is None or self._pending[0] != epoch:
            self.begin(epoch)
        assert self._pending is not None
        chunk = self._pending[1]
        self._pending = None
        return chunk

    def next_chunk(self, skipped: List[int]) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        """The epoch's next chunk once the loader served the current one (``skipped``: the
        samples it skipped in it, kept for the state), or None when the epoch ended."""
        if self.ended or self._steps is None:
            return None
        chunk = self._read_chunk()
        if chunk is None:
            return None
        self.offset += self.chunk_steps
        self.chunk_steps = len(chunk[1]) - 1
        self.skipped_before = self.skipped_before + list(skipped)
        return chunk

    # -- what the Loader reports --------------------------------------------------------------
    def epoch_state(self, state: dict) -> dict:
        """The C++ loader's state of the current chunk as the epoch's: its position counted from
        the epoch's start, the samples skipped in earlier chunks included."""
        if self.offset or self.skipped_before:
            state = dict(state)
            state["position"] = int(state["position"]) + self.offset
            state["skipped"] = self.skipped_before + list(state.get("skipped", []))
        return state

    def steps_per_epoch(self, chunk_steps: int) -> int:
        """Steps of the current epoch: exact when it fits in one chunk or was read to its end;
        otherwise from ``len()`` of the sampler; a ``TypeError`` for an endless sampler."""
        if self.ended:
            return self.offset + chunk_steps
        n = None
        try:
            n = len(self.source)
        except TypeError:
            pass
        if n is None:
            raise TypeError(
                f"len() of a Loader over a {self.what} without len() ({type(self.source).__name__}"
                f") is not known: its epoch is streamed as it is read ({self.offset + chunk_steps}"
                " steps read so far)")
        if self.batched or self.batch_size is None:
            return int(n)
        b = self.batch_size
        return int(n) // b if self.drop_last else -(-int(n) // b)


def warn_unsplit(order: SamplerOrder, world_size: int) -> None:
    """One warning when several ranks share a sampler that does not split by rank: the loader
    does not split a sampler's order again (``docs/ORDER.md`` §6). ``world_size``: the
    data-parallel ranks (the ranks of a sequence-parallel group count as one)."""
    if world_size > 1 and not order.splits_by_rank():
        warnings.warn(
            f"libshard.Loader: {world_size} data-parallel ranks but the sampler does not split the "
            "epoch across ranks (it has no num_replicas); the loader streams the sampler's order "
            "as it is, so every rank reads the same samples. Use a "
            "torch.utils.data.DistributedSampler (or drop sampler= to let the loader split)",
            stacklevel=3)
