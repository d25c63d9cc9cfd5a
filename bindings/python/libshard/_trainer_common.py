"""What the trainer integrations (libshard.specforge, .modelopt, .speculators) share: where a
dataset is (a local directory or an ``s3://`` URL), the schema their trainer needs, the one line
that says why a run uses the trainer's own collate, and the nesting of recipe batch keys.

No trainer is imported here.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Dict, Iterable, Optional, Set, Union

PathLike = Union[str, "os.PathLike[str]"]

logger = logging.getLogger("libshard")


def is_url(path: PathLike) -> bool:
    """Whether ``path`` names a dataset in object storage (``s3://BUCKET/PREFIX``), as the
    library's storage driver for it says (a malformed URL is its error, naming the URL)."""
    if not isinstance(path, str):
        return False
    from . import _core

    return not _core.storage_info(path)["local_files"]


def take_batches_option(argv: list) -> str:
    """The value of ``--libshard-batches X`` / ``--libshard-batches=X`` in ``argv`` (a trainer's
    command line), removed from it before the trainer parses it; "auto" when absent."""
    for i, arg in enumerate(argv):
        if arg == "--libshard-batches" and i + 1 < len(argv):
            value = argv[i + 1]
            del argv[i:i + 2]
            return value
        if arg.startswith("--libshard-batches="):
            del argv[i]
            return arg.split("=", 1)[1]
    return "auto"


def location(path: PathLike) -> str:
    """The dataset's location as the integrations key it: an ``s3://`` URL as given, a local
    path made absolute (``os.path.abspath`` would turn a URL into ``CWD/s3:/bucket/...``)."""
    p = os.fspath(path)
    return p if is_url(p) else os.path.abspath(p)


def _missing_field_error() -> type:
    from ._core import InvalidArgumentError

    class MissingFieldError(InvalidArgumentError, KeyError):
        """A field a trainer needs is not in the dataset (or in its manifest): a libshard
        ``InvalidArgumentError`` (a ``ValueError``) whose message names the field, the dataset
        and what to do; also a ``KeyError``, as the trainers' own readers raise for a missing
        key, so code that catches that keeps working."""

        __str__ = BaseException.__str__  # the message as written (KeyError would quote it)

    MissingFieldError.__module__ = "libshard"
    return MissingFieldError


#: Raised by the trainer modules for every missing field, at open and per batch.
MissingFieldError = _missing_field_error()


def missing_field(where: str, fields: Iterable[str], has: Iterable[str], needs: str) -> Exception:
    """The :data:`MissingFieldError` for ``fields`` absent from ``where`` (the dataset, a sample
    of it, or its manifest), saying what is there and who needs them for what."""
    fields = list(fields)
    named = repr(fields[0]) if len(fields) == 1 else repr(fields)
    return MissingFieldError(f"{where}: no field{'s' if len(fields) > 1 else ''} {named} "
                             f"(it has {sorted(has)}); {needs}")


def require_fields(dataset: Any, needed: Iterable[str], trainer: str, what: str) -> None:
    """:data:`MissingFieldError` naming the fields ``trainer`` needs that ``dataset`` (a
    libshard.Dataset) lacks, and what the dataset has, at open: not a bare KeyError at the
    first read."""
    schema = dataset.schema
    needed = list(needed)
    missing = [name for name in needed if name not in schema]
    if missing:
        raise MissingFieldError(
            f"{dataset.path}: the dataset has no field{'s' if len(missing) > 1 else ''} "
            f"{missing} (it has {schema.names}); {trainer} needs {needed} for {what}: pack the "
            f"files {trainer} writes")


_noted: Set[str] = set()
_noted_lock = threading.Lock()


def note_once(key: str, message: str) -> None:
    """Logs ``message`` (a warning on the ``libshard`` logger) once per process per ``key``."""
    with _noted_lock:
        if key in _noted:
            return
        _noted.add(key)
    logger.warning("%s", message)


def nest(flat: Dict[str, Any]) -> Dict[str, Any]:
    """A recipe batch's keys as the trainer's dict: ``"a/b"`` becomes ``out["a"]["b"]``."""
    out: Dict[str, Any] = {}
    for key, value in flat.items():
        if "/" in key:
            outer, inner = key.split("/", 1)
            out.setdefault(outer, {})[inner] = value
        else:
            out[key] = value
    return out


def open_kwargs(cache: Optional[PathLike], cache_size: Union[int, str, None]) -> Dict[str, Any]:
    """libshard.Dataset's object-storage keywords, as the integrations pass them on."""
    return {"cache": cache, "cache_size": cache_size}


# -- Batch recipes in a trainer's order ---------------------------------------------------------
def ordered_loader_available() -> bool:
    """Whether this libshard's Loader streams in an order given as batches of indices
    (``libshard.Loader(batch_sampler=...)``)."""
    import inspect

    from ._loader import Loader

    return "batch_sampler" in inspect.signature(Loader.__init__).parameters


def check_recipe(dataset: Any, *, collate: str, recipe_len: int,
                 fields: Optional[Iterable[str]] = None) -> None:
    """InvalidArgumentError (the library's words: the field, the trainer) when ``dataset`` does
    not fit the batch recipe ``collate``; the library decides (loader/recipes/)."""
    from ._loader import Loader

    # A budget that holds two of its one-sample batches, so that the probe says nothing of its
    # own arena (a 1 MiB one printed a memory_budget warning meant for real loaders).
    import numpy as np

    budget = 256 << 20  # a dataset given by path: what its loader would take by default, less
    if hasattr(dataset, "lengths") and hasattr(dataset, "total_raw_bytes"):
        lengths = np.asarray(dataset.lengths, dtype=np.int64)
        per_position = dataset.total_raw_bytes / max(int(lengths.sum()), 1)
        longest = int(lengths.max()) if len(lengths) else 0
        positions = recipe_len if collate == "speculators-eagle3" else max(longest, recipe_len)
        budget = max(1 << 20, int(8 * positions * per_position * 1.1))
    probe = Loader(dataset, collate=collate, recipe_len=recipe_len, batch_size=1, shuffle=False,
                   fields=None if fields is None else list(fields), memory_budget=budget,
                   pin_memory=False, rank=0, world_size=1)
    probe.close()


#: The smallest arena the drop-ins give their loader ("auto"), as libshard.Loader's default.
MIN_AUTO_BUDGET = 2 << 30


def auto_memory_budget(dataset: Any, batches: Any, collate: str, recipe_len: int) -> int:
    """memory_budget="auto" of the drop-ins: the Loader's default 2 GiB, or 8 times the largest
    batch of this order when that is more, so that its batch memory (a quarter of the budget)
    holds two batches (the one the trainer holds and the next) however the trainer's sampler
    groups the samples. Bytes per position: the dataset's raw bytes over its positions."""
    import numpy as np

    lengths = np.asarray(dataset.lengths, dtype=np.int64)
    total = int(lengths.sum())
    per_position = dataset.total_raw_bytes / max(total, 1)
    largest = 0
    for batch in batches:
        if collate == "speculators-eagle3":
            positions = recipe_len
        elif collate == "modelopt-eagle":
            positions = len(batch) * recipe_len
        else:
            longest = int(lengths[list(batch)].max()) if len(batch) else 0
            positions = len(batch) * min(longest, recipe_len)
        largest = max(largest, positions)
    return max(MIN_AUTO_BUDGET, int(8 * largest * per_position * 1.1))


class _GivenOrder:
    """The batch sampler of a reused loader: each epoch, the order its owner was given last."""

    def __init__(self, batches: Any) -> None:
        self.batches = batches

    def __iter__(self) -> Any:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class OrderedLoaders:
    """The C++ loaders of one drop-in (a trainer's data loader): ``with loaders.open(batches)
    as it:`` iterates the recipe's batches (dicts with ``"__index__"``), batch k holding the
    samples ``batches[k]``, read ahead in that order.

    Each ``open`` streams its order as the next epoch of the loader the last iteration used
    (``Loader(batch_sampler=...)``, ``set_epoch``), so its pinned arena, faulted in and
    registered once, serves every epoch: a new loader per epoch first-touched its whole arena
    again each epoch (0.2-1.4 CPU-s per GiB on a VM, docs/performance.md). A new loader only
    where the order needs a larger arena ("auto" budget), or where an earlier iteration is
    still open (each open iteration has its own). ``close()`` frees the idle one; a loader of
    an iteration still open closes when that iteration ends."""

    def __init__(self, dataset: Any, *, collate: str, recipe_len: int,
                 fields: Optional[Iterable[str]] = None, memory_budget: Union[int, str] = "auto",
                 metadata: bool = False, sequence_parallel: Any = None,
                 sp_rank: int = 0) -> None:
        self._dataset = dataset
        self._collate, self._recipe_len = collate, recipe_len
        # A libshard.SequenceParallel (the recipe's packed-row rule) and this rank's place in
        # its group: each batch is then the rank's part, read from the rows behind it.
        self._sp, self._sp_rank = sequence_parallel, int(sp_rank)
        self._fields = None if fields is None else list(fields)
        self._memory_budget, self._metadata = memory_budget, metadata
        self._lock = threading.Lock()
        self._idle: Optional[Any] = None  # (Loader, _GivenOrder, budget, epoch) of no iteration
        self._closed = False

    def matches(self, dataset: Any, collate: str, recipe_len: int,
                fields: Optional[Iterable[str]], sequence_parallel: Any = None,
                sp_rank: int = 0) -> bool:
        """Whether these loaders serve that dataset and recipe (a drop-in whose dataset or
        recipe changed between iterations makes new ones)."""
        return (dataset is self._dataset and collate == self._collate
                and recipe_len == self._recipe_len
                and (None if fields is None else list(fields)) == self._fields
                and sequence_parallel == self._sp and int(sp_rank) == self._sp_rank)

    def open(self, batches: Any) -> "_OrderedIteration":
        from ._loader import Loader

        budget = self._memory_budget
        if budget == "auto":
            budget = auto_memory_budget(self._dataset, batches, self._collate, self._recipe_len)
        with self._lock:
            idle, self._idle = self._idle, None
        if idle is not None and _holds(idle[2], budget):
            loader, order, had, epoch = idle
            order.batches = batches
            loader.set_epoch(epoch + 1)
            return _OrderedIteration(self, (loader, order, had, epoch + 1))
        if idle is not None:
            idle[0].close()
        order = _GivenOrder(batches)
        # With sequence parallelism the group is the world of this loader (its order is the
        # group's, given): rank sp_rank of sp_size.
        place = {"rank": 0, "world_size": 1} if self._sp is None else {
            "rank": self._sp_rank, "world_size": self._sp.degree,
            "sequence_parallel": self._sp}
        loader = Loader(self._dataset, batch_sampler=order, collate=self._collate,
                        recipe_len=self._recipe_len, return_index=True, metadata=self._metadata,
                        fields=self._fields, memory_budget=budget, **place)
        return _OrderedIteration(self, (loader, order, budget, 0))

    def _give_back(self, held: Any) -> None:
        with self._lock:
            if not self._closed and self._idle is None:
                self._idle = held
                return
        held[0].close()

    def close(self) -> None:
        """Closes the idle loader (its arena is freed); later opens make a new one."""
        with self._lock:
            idle, self._idle = self._idle, None
        if idle is not None:
            idle[0].close()


def _holds(had: Union[int, str], need: Union[int, str]) -> bool:
    """Whether a loader made with memory_budget ``had`` serves one asked ``need``."""
    if isinstance(had, int) and isinstance(need, int):
        return had >= need
    return had == need


class _OrderedIteration:
    """One iteration of :class:`OrderedLoaders`: its loader goes back to them on exit."""

    def __init__(self, owner: OrderedLoaders, held: Any) -> None:
        self._owner, self._held = owner, held

    def __enter__(self) -> Any:
        return iter(self._held[0])

    def __exit__(self, *exc: Any) -> None:
        held, self._held = self._held, None
        if held is not None:
            self._owner._give_back(held)


def ordered_loaders(current: Optional[OrderedLoaders], dataset: Any, *, collate: str,
                    recipe_len: int, fields: Optional[Iterable[str]] = None,
                    memory_budget: Union[int, str] = "auto",
                    metadata: bool = False, sequence_parallel: Any = None,
                    sp_rank: int = 0) -> OrderedLoaders:
    """``current`` when it serves that dataset and recipe, else new :class:`OrderedLoaders`
    (``current`` closed)."""
    if current is not None and current.matches(dataset, collate, recipe_len, fields,
                                               sequence_parallel, sp_rank) \
            and current._memory_budget == memory_budget and current._metadata == metadata:
        return current
    if current is not None:
        current.close()
    return OrderedLoaders(dataset, collate=collate, recipe_len=recipe_len, fields=fields,
                          memory_budget=memory_budget, metadata=metadata,
                          sequence_parallel=sequence_parallel, sp_rank=sp_rank)
