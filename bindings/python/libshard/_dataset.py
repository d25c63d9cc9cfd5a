"""``libshard.Dataset``: a packed dataset as a map-style ``torch.utils.data.Dataset``."""

from __future__ import annotations

import operator
import os
import threading
from dataclasses import dataclass
from typing import (Any, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional,
                    Tuple, Union)

import numpy as np
import torch
import torch.utils.data

from . import _core
from ._tensors import sample_to_dict, torch_dtype

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Field:
    """One named tensor of every sample."""

    name: str
    #: Element type, e.g. ``torch.bfloat16``.
    dtype: torch.dtype
    #: Number of dimensions (0 for a scalar).
    rank: int
    #: The dimension holding the sequence (token) axis, or None.
    seq_dim: Optional[int]


@dataclass(frozen=True)
class Schema:
    """The fields every sample has, and which one gives the sample's token length."""

    fields: Tuple[Field, ...]
    #: Name of the field whose ``shape[seq_dim]`` is the sample length, or None.
    length_field: Optional[str]

    @property
    def names(self) -> List[str]:
        return [f.name for f in self.fields]

    @property
    def seq_dims(self) -> Dict[str, Optional[int]]:
        return {f.name: f.seq_dim for f in self.fields}

    def __getitem__(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return any(f.name == name for f in self.fields)

    @staticmethod
    def _from_core(d: Dict[str, Any]) -> "Schema":
        fields = tuple(
            Field(f["name"], torch_dtype(f["dtype"]), int(f["rank"]),
                  None if f["seq_dim"] < 0 else int(f["seq_dim"]))
            for f in d["fields"])
        lf = d["length_field"]
        return Schema(fields, None if lf < 0 else fields[lf].name)


class Identity(NamedTuple):
    """What made a dataset (``Dataset.identity``; C++ ``Dataset::identity()``, libshard/identity.h):
    its attributes and its schema, hashed. ``digest`` is 16 hex digits (XXH3-64 of their canonical
    encoding, FORMAT.md §2.2), what a loader's state carries to know its dataset; ``recorded``:
    the manifest records it (False for a dataset written before identities: computed all the
    same, but its writes were not checked against it)."""

    digest: str
    recorded: bool
    attributes: Dict[str, Union[str, int]]


class Dataset(torch.utils.data.Dataset):
    """A packed libshard dataset opened for random access.

    ``ds[i]`` reads sample ``i`` (negative indices count from the end) and returns a dict of
    ``torch.Tensor`` with the keys, dtypes, shapes and bytes that ``torch.load`` gives for the
    source file (nested containers appear flattened, e.g. ``"hidden_states.0"``); non-tensor
    entries of the source (strings, numbers) follow as Python values unless ``metadata=False``.
    Tensors view the read buffer without a copy, are writable, and are private to the call.

    Works as a map-style dataset in ``torch.utils.data.DataLoader``, also with ``num_workers > 0``:
    pickling keeps only the path and options, and workers reopen the dataset.
    Reads release the GIL. Thread-safe.

    Read-ahead: :meth:`prefetch` announces the indices that will be asked for, in order; the
    dataset then reads them ahead with the Loader's engine (io_uring, O_DIRECT, one arena of
    ``read_ahead["memory_budget"]`` bytes per process, every byte checked), and ``ds[i]`` in
    that order is served from memory already read (zero-copy views of the arena). Unannounced
    or out-of-order reads still work, read synchronously. In a DataLoader,
    :class:`libshard.ReadAheadSampler` announces to each worker the indices it will be asked
    for (docs/guide/loading.md).

    Raises (on open and on reads) a ``libshard.Error``: ``NotFoundError`` (a ``FileNotFoundError``:
    no dataset at ``path``), ``CorruptionError`` (bad index, manifest or checksum; the message
    names the file, sample and offset), ``IoError`` (an ``OSError``: I/O failure, with errno),
    ``InvalidArgumentError`` / ``UnsupportedError`` (``ValueError``).
    """

    def __init__(self, path: PathLike, *, verify: bool = True, metadata: bool = True,
                 cache: Optional[PathLike] = None,
                 cache_size: Union[int, str, None] = None,
                 read_ahead: Optional[Mapping[str, Any]] = None) -> None:
        """Opens the dataset in directory ``path``, or in object storage (``s3://BUCKET/PREFIX``,
        ``gs://BUCKET/PREFIX``).

        Args:
          verify: check each sample's xxh3-64 checksum when it is read.
          metadata: add the sample's non-tensor entries to the dicts ``ds[i]`` returns.
          cache: object stores only (s3://, gs://): the node-local cache directory, shared by
            every process of the node (default ``$LIBSHARD_CACHE_DIR``, else
            ``~/.cache/libshard``).
          cache_size: object stores only: bytes the whole cache directory may hold, every
            dataset under it together (int or "500GiB"); blocks are evicted to stay within it
            (docs/CACHE.md);
            None or 0 (the default): no bound but the free-space floor.
          read_ahead: the settings of the read-ahead that :meth:`prefetch` starts, by the
            Loader's names: ``memory_budget`` (default ``"512MiB"``, per process: each
            DataLoader worker has its own), ``queue_depth``, ``read_size``, ``engine``,
            ``io_mode``, ``pin_memory`` (default False), ``worker_threads``,
            ``slow_wait_warning_seconds``. Checked when the read-ahead starts. Verification
            follows ``verify``.

        ``cache`` and ``cache_size`` are read by the library's table (``DatasetOptionTable``),
        as ``libshard info/verify/bench --cache/--cache-size`` are.
        """
        self._path = os.fspath(path)
        self._verify = bool(verify)
        self._metadata = bool(metadata)
        self._cache = None if cache is None else os.fspath(cache)
        self._cache_size = cache_size
        self._core = _core.Dataset.open(self._path, self._verify,
                                        {"cache": self._cache, "cache_size": self._cache_size})
        self._schema: Optional[Schema] = None
        self._lengths: Optional[np.ndarray] = None
        self._key_index: Optional[Dict[str, int]] = None
        self._read_ahead_options: Dict[str, Any] = dict(read_ahead or {})
        # The read-ahead engine of this process (made by prefetch); see _engine.
        self._ra: Optional[Any] = None
        self._ra_pid = os.getpid()
        self._ra_lock = threading.Lock()

    # -- pickling: reopen by path (DataLoader workers with the spawn/forkserver start method) --
    def __getstate__(self) -> Dict[str, Any]:
        return {"path": self._path, "verify": self._verify, "metadata": self._metadata,
                "cache": self._cache, "cache_size": self._cache_size,
                "read_ahead": self._read_ahead_options}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state["path"], verify=state["verify"], metadata=state["metadata"],
                      cache=state.get("cache") or None, cache_size=state.get("cache_size"),
                      read_ahead=state.get("read_ahead"))

    def __repr__(self) -> str:
        return (f"libshard.Dataset({self._path!r}, samples={len(self)}, "
                f"fields={self.schema.names})")

    def __len__(self) -> int:
        return len(self._core)

    def __getitem__(self, index: int) -> Dict[str, Any]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]  # type: ignore[return-value]
        i = operator.index(index)
        ra = self._ra
        if ra is None or self._ra_pid != os.getpid():
            return sample_to_dict(self._core.read(i), metadata=self._metadata)
        n = len(self._core)
        if not -n <= i < n:
            raise IndexError(f"sample index {i} is out of range: dataset {self._path} has {n} "
                             "samples")
        return sample_to_dict(ra.get(i + n if i < 0 else i), metadata=self._metadata)

    def read(self, index: int, *, rows: Union[slice, Tuple[int, int], None] = None,
             fields: Optional[Iterable[str]] = None) -> Dict[str, Any]:
        """Reads sample ``index``, or part of it: ``ds.read(i)`` is ``ds[i]``.

        ``rows``: only rows ``[start, stop)`` along the sequence dimension (``seq_dim``) of every
        field that has one (a sequence-parallel rank's token slice); fields without one are read
        whole. A ``(start, stop)`` pair of non-negative ints (``start <= stop``), or a
        ``slice`` (step 1; negative bounds count from the sample's length, as for a list).
        Rows past a field's length are clipped away: the window served is
        ``range(*slice(start, stop).indices(ds.lengths[index]))``, and a window wholly past the
        end gives empty tensors. The tensors are bit for bit ``ds[index][name]`` sliced along
        ``seq_dim`` (``[start:stop]`` on that dimension).

        ``fields``: the names to read (the dict has these keys, in this order); None: all.

        With row blocks (:attr:`has_row_blocks`, index version 4) a row range reads its rows plus
        less than one ~1 MiB block at each end of each field, checked block by block, stored raw
        or compressed (``--compress auto``, codecs). A dataset written before them, or a sample
        stored with ``--compress zstd`` (whole-sample zstd), is read field by field or whole and
        checked so; the dataset says so once on stderr, and :func:`upgrade` adds row blocks.
        Raises ``InvalidArgumentError`` for a bad window or an unknown field name, and the errors
        of ``ds[index]``.
        """
        i = operator.index(index)
        n = len(self._core)
        if not -n <= i < n:
            raise IndexError(f"sample index {index} is out of range: dataset {self._path} has {n} "
                             "samples")
        if i < 0:
            i += n
        if isinstance(fields, str):
            raise TypeError("fields= takes a list of field names, not a string")
        names = [] if fields is None else [str(f) for f in fields]
        if rows is None:
            if not names:
                return self[i]
            return sample_to_dict(self._core.read_rows(i, None, None, names),
                                  metadata=self._metadata)
        start, stop = self._row_window(i, rows)
        return sample_to_dict(self._core.read_rows(i, start, stop, names),
                              metadata=self._metadata)

    def _row_window(self, i: int, rows: Union[slice, Tuple[int, int]]) -> Tuple[int, Optional[int]]:
        """``rows`` as (start, stop) for the library (stop None: to the end)."""
        if isinstance(rows, slice):
            if rows.step not in (None, 1):
                raise _core.InvalidArgumentError(
                    f"rows={rows!r}: a row range has step 1 (read the rows, then step)")
            start = None if rows.start is None else operator.index(rows.start)
            stop = None if rows.stop is None else operator.index(rows.stop)
            if (start is not None and start < 0) or (stop is not None and stop < 0):
                length = int(self.lengths[i])
                start, stop, _ = slice(start, stop).indices(length)
            start = 0 if start is None else start
            if stop is not None and stop < start:
                stop = start  # an empty slice, as a list's
            return start, stop
        try:
            start, stop = rows
        except (TypeError, ValueError):
            raise _core.InvalidArgumentError(
                f"rows={rows!r}: give (start, stop) or a slice") from None
        start, stop = operator.index(start), operator.index(stop)
        if start < 0 or stop < 0:
            raise _core.InvalidArgumentError(
                f"rows={rows!r}: (start, stop) are rows from 0; use a slice for negative bounds")
        return start, stop

    # -- read-ahead ------------------------------------------------------------------------
    def prefetch(self, indices: Iterable[int]) -> None:
        """Announces that the samples ``indices`` (an iterable of ints, a numpy array or a
        tensor; repeats allowed) will be asked for, in this order, after those announced
        before: they are read ahead, and ``ds[i]`` in that order is served from memory already
        read. The first call in a process starts the read-ahead (settings: ``read_ahead``).

        The rule (docs/guide/loading.md, "Reading ahead for a map-style dataset"): ``ds[i]``
        takes the earliest announced entry of ``i`` still held; the entries announced before
        it and not taken are passed over (those not yet read are never read; those read stay
        available to a late request for 64 more entries, or until their memory is needed).
        A sample with no held entry is read synchronously, as without prefetch; nothing
        announced and never asked for blocks anything. An index out of range, a value that is
        not an index (a float, a string, a bool: named with its type and position), or more
        than 2^24 indices in one call (announce an endless stream in parts, as
        :class:`libshard.ReadAheadSampler` does) raises ``InvalidArgumentError`` and announces
        nothing.
        """
        # Each value checked as an index (a float, string or bool is refused, never truncated or
        # parsed), at most MAX_ANNOUNCE of them (libshard/_sampler_order.py).
        from ._sampler_order import indices_array
        values = indices_array(indices, f"{self._path}: prefetch")
        self._engine().announce(values)

    def _default_read_ahead_budget(self, nbytes: int) -> None:
        """Sets the read-ahead's ``memory_budget`` to ``nbytes`` where its settings give none
        and it has not started in this process: an integration that knows the batches its
        trainer holds at once sizes it (the 512 MiB default holds one large batch ahead)."""
        with self._ra_lock:
            if "memory_budget" not in self._read_ahead_options and self._ra is None:
                self._read_ahead_options["memory_budget"] = int(nbytes)

    def read_ahead_stats(self) -> Optional[Dict[str, Any]]:
        """The read-ahead's counters in this process, or None before :meth:`prefetch`:
        ``announced``, ``hits`` (served from memory already read), ``waits`` (served once its
        read completed), ``misses`` (read synchronously), ``skipped`` (passed over, never
        read), ``evicted`` (read, dropped unasked), ``held``, ``bytes_read``,
        ``bytes_served``, ``checksum_failures``, ``wait_seconds``, ``engine``, ``direct_io``,
        ``io_status``, ``pinned``, ``arena_budget``, ``arena_in_use``, ``arena_peak``."""
        ra = self._ra
        if ra is None or self._ra_pid != os.getpid():
            return None
        return ra.stats()

    def _engine(self) -> Any:
        """This process's read-ahead engine, made on first use. One inherited through fork()
        (its threads are not in this process) is left alone and replaced."""
        if self._ra_pid != os.getpid():  # a forked child: fresh state, fresh lock
            self._ra, self._ra_pid, self._ra_lock = None, os.getpid(), threading.Lock()
        with self._ra_lock:
            if self._ra is None:
                options = dict(self._read_ahead_options)
                if "verify" in options or "verify_checksums" in options:
                    raise _core.InvalidArgumentError(
                        "read_ahead: the read-ahead checks what the dataset checks: set "
                        "verify= of the Dataset, not of read_ahead")
                options["verify"] = self._verify
                self._ra = _core.ReadAhead(self._core, options)
            return self._ra

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        for i in range(len(self)):
            yield self[i]

    @property
    def path(self) -> str:
        """The dataset directory as given to ``open``."""
        return self._path

    @property
    def schema(self) -> Schema:
        if self._schema is None:
            self._schema = Schema._from_core(self._core.schema)
        return self._schema

    @property
    def lengths(self) -> np.ndarray:
        """Token length of every sample (int64 numpy array; from the index, no I/O). Read-only."""
        if self._lengths is None:
            lengths = self._core.lengths()
            lengths.setflags(write=False)
            self._lengths = lengths
        return self._lengths

    @property
    def shards(self) -> List[Dict[str, Any]]:
        """``[{"path", "size", "samples"}]`` for every shard file."""
        return self._core.shards

    @property
    def total_raw_bytes(self) -> int:
        return self._core.total_raw_bytes

    @property
    def total_stored_bytes(self) -> int:
        return self._core.total_stored_bytes

    @property
    def index_version(self) -> int:
        """The index's format version: 1, 2 (loaded lazily, block by block: a rank of a large
        world opens millions of samples at once), 3 (version 2 with a checksum per field, so
        reads of some fields or of a prefix are checked) or 4 (version 3 with row blocks, so
        row ranges are checked while reading only their blocks). :func:`upgrade` rewrites 1 to
        3 as 4."""
        return self._core.index_version

    @property
    def has_row_blocks(self) -> bool:
        """Whether the index records row blocks (docs/FORMAT.md §3.10, index version 4): a row
        range (:meth:`read` with ``rows=``) then reads its rows plus at most a block at each end
        of each field, checked, raw or compressed. :func:`upgrade` adds them."""
        return self._core.has_row_blocks

    @property
    def has_field_checksums(self) -> bool:
        """Whether every sample has a checksum per field (docs/FORMAT.md §3.9): a verified
        ``Loader(fields=...)`` / ``max_len=`` read then checks only the fields it serves;
        without them it reads whole samples to check them. :func:`upgrade` adds them."""
        return self._core.has_field_checksums

    def key(self, index: int) -> str:
        """Sample ``index``'s key: ``libshard.Writer``'s ``key``, or for ``pack`` the source file's
        path relative to the source root (``source_file(index)["path"]``, C++ ``Dataset::key``);
        what :meth:`find` looks up and ``merge(by_key=True)`` orders by."""
        return self._core.source_file(operator.index(index))["path"]

    def source(self, index: int) -> str:
        """The former name of :meth:`key` (the same string)."""
        return self.key(index)

    @property
    def attributes(self) -> Dict[str, Union[str, int]]:
        """What produced the data, as its writer recorded it (``Writer(attrs=...)``,
        ``pack --attr``): e.g. ``target_model``, layer ids, ``hidden_size``; ``{}`` if none."""
        return _core.dataset_attributes(self._core)

    @property
    def identity(self) -> Identity:
        """What made the dataset: :class:`Identity` (its attributes and schema, and their digest;
        docs/guide/loading.md#identity)."""
        d = _core.dataset_identity(self._core)
        return Identity(d["xxh3"], bool(d["recorded"]), d["attributes"])

    def check(self, expect: Optional[Dict[str, Union[str, int]]]) -> None:
        """Raises ``InvalidArgumentError`` (a ``ValueError``) naming the dataset, the attribute and
        both values unless every key of ``expect`` is recorded with that value."""
        if expect:
            _core.check_attributes(self._core, dict(expect))

    def find(self, key: str) -> int:
        """Index of the sample whose key (``libshard.Writer``'s ``key``, or ``pack``'s source path)
        is ``key``; raises ``KeyError`` when none is. The key -> index map is built on first use
        from the index (no sample I/O); when a key occurs twice, the first sample wins."""
        if self._key_index is None:
            keys = _core.dataset_sources(self._core)
            index: Dict[str, int] = {}
            for i, k in enumerate(keys):
                index.setdefault(k, i)
            self._key_index = index
        try:
            return self._key_index[key]
        except KeyError:
            raise KeyError(f"no sample with key {key!r} in {self._path}") from None

    def source_file(self, index: int) -> Dict[str, Any]:
        """``{"path", "size", "mtime_ns", "content_hash"}`` of the file sample ``index`` came from
        (C++ ``Dataset::source_file``); ``path`` is its :meth:`key`."""
        return self._core.source_file(operator.index(index))

    def provenance(self, index: Optional[int] = None) -> Dict[str, Any]:
        """How the dataset was made, as its manifest records it (C++ ``Dataset::provenance()``):
        ``{"source_root", "sources", "created_by", "created_at", "attributes"}``.

        ``provenance(i)``, with a sample index, is the former spelling of :meth:`source_file`
        and still returns sample ``i``'s source file."""
        if index is not None:
            return self.source_file(index)
        return _core.dataset_provenance(self._core)

    def location(self, index: int) -> Dict[str, Any]:
        """Where sample ``index`` is stored: ``{"shard", "offset", "stored_size", "raw_size",
        "checksum", "flags", "length"}`` (``shard`` indexes :attr:`shards`)."""
        return self._core.location(operator.index(index))

    def metadata(self, index: int) -> Dict[str, Any]:
        """The non-tensor entries (strings, numbers, bools) of sample ``index``'s source."""
        return self._core.metadata(operator.index(index))

    def verify(self, index: Optional[int] = None) -> None:
        """Checks the checksum of sample ``index`` (all samples when None); raises
        ``libshard.CorruptionError`` naming the file, sample and offset on a mismatch."""
        if index is not None:
            self._core.verify(operator.index(index))
            return
        for i in range(len(self)):
            self._core.verify(i)


def upgrade(path: PathLike) -> bool:
    """Rewrites the index of the dataset at ``path`` as index version 4, with field checksums
    and row blocks (docs/FORMAT.md §3.9, §3.10), as ``libshard upgrade`` does: every sample is read and checked first
    (a damaged one raises CorruptionError naming it, and nothing changes), then the new index is
    committed under the dataset lock, crash-safe (the dataset opens, old or new, at any point),
    shard files untouched. Returns True when it was rewritten, False when it already was
    current."""
    return _core.upgrade_index(os.fspath(path))


def open(path: PathLike, *, verify: bool = True, metadata: bool = True,  # noqa: A001
         cache: Optional[PathLike] = None, cache_size: Union[int, str, None] = None,
         read_ahead: Optional[Mapping[str, Any]] = None, follow: bool = False) -> Dataset:
    """Opens the packed dataset in directory ``path`` or at an ``s3://`` URL (through the
    node-local ``cache``); see :class:`Dataset` (``read_ahead``: the settings of
    :meth:`Dataset.prefetch`). With ``follow=True``, a dataset that is still being written (or
    not started yet), which grows as its writer commits samples: see
    :class:`libshard.FollowedDataset`."""
    if follow:
        if read_ahead is not None:
            raise _core.InvalidArgumentError(
                f"libshard.open({os.fspath(path)!r}, follow=True): read_ahead does not apply to "
                "a dataset being written; read it with libshard.Loader(path, follow=True), or "
                "open it with read_ahead once it is complete")
        from ._follow import FollowedDataset
        return FollowedDataset(path, verify=verify, metadata=metadata, cache=cache,
                               cache_size=cache_size)
    return Dataset(path, verify=verify, metadata=metadata, cache=cache, cache_size=cache_size,
                   read_ahead=read_ahead)
