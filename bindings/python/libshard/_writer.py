"""``libshard.Writer``: write a dataset straight from a hidden-state generator.

The generator hands each sample (a dict of tensors) and its key to :meth:`Writer.write`, which
returns while the bytes are still being encoded and written (a queue bounded in bytes), so the
GPU keeps working. Worker threads of the C++ core lay out, compress and checksum samples with the
GIL released; one thread appends them to the shards in the order they were written.

Keys make a generator restartable: every key is stored as the sample's source path (the index's
provenance), :meth:`Writer.has` says whether a key is already in the output, and a Writer reopened
on the same output after a crash (kill -9 included) continues from what was durable.

Many ranks: each rank writes its own part, ``OUT/parts/rank-RRRRR-of-WWWWW/`` (a complete dataset
once that rank has closed), and the last rank to close joins the parts into ``OUT`` itself with
hard links (no shard byte is copied), ordered by key, so ``OUT`` opens as one dataset whose order
does not depend on which rank finished first. ``libshard merge --by-key OUT PARTS...`` does the
same by hand.
"""

from __future__ import annotations

import collections
import functools
import os
import threading
from typing import Any, Deque, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from . import _core
from ._core import InvalidArgumentError
from ._dataset import Field, Schema
from ._world import resolve_world

PathLike = Union[str, "os.PathLike[str]"]

_MANIFEST = "manifest.json"
_JOURNAL = "_journal.lsj"
#: Samples whose GPU->host copies may be in flight before write() waits for the oldest.
_MAX_PENDING_COPIES = 4


def resolve_writer_rank(rank: Optional[int], world_size: Optional[int]) -> Tuple[int, int, str]:
    """(rank, world_size, where from) for a writer: the one rule of :mod:`libshard._world`
    (explicit values, torch.distributed, RANK/WORLD_SIZE, a Slurm array, SLURM_PROCID/
    SLURM_NTASKS, else 0 of 1)."""
    return resolve_world(rank, world_size)


def part_dir(out: str, rank: int, world_size: int) -> str:
    """Where rank ``rank`` of ``world_size`` writes its part of dataset ``out`` (PartDirectory,
    FORMAT.md §7.1)."""
    return _core.part_directory(out, rank, world_size)


@functools.lru_cache(maxsize=None)
def _option_spellings() -> Tuple[Dict[str, str], Dict[str, str]]:
    """({keyword spelling: row name}, {row name: default literal}) of the library's Writer option
    table: every row's name and its other spellings that are Python identifiers (not the
    command-line flags)."""
    names: Dict[str, str] = {}
    defaults: Dict[str, str] = {}
    for row in _core.writer_option_table():
        defaults[row["name"]] = row["default"]
        for spelling in (row["name"], *row["aliases"]):
            if spelling.isidentifier():
                names[spelling] = row["name"]
    return names, defaults


def _with_aliases(options: Dict[str, Any], aliases: Mapping[str, Any]) -> Dict[str, Any]:
    """``options`` (row name: value) with the settings given under another spelling of their row
    (``queue_size`` for ``in_flight_bytes``), kept under that spelling so that the library's
    messages name the keyword the caller wrote. A keyword no row has is a ``TypeError``, as for
    any function; a setting given under two spellings an ``InvalidArgumentError``."""
    names, defaults = _option_spellings()
    out = dict(options)
    for spelling, value in aliases.items():
        name = names.get(spelling)
        if name is None or spelling == name:
            raise TypeError(f"Writer() got an unexpected keyword argument {spelling!r}")
        if name in out and repr(out[name]) != defaults[name] and out[name] is not None:
            raise InvalidArgumentError(
                f"Writer options {name!r} and {spelling!r} are one setting; give one of them")
        out.pop(name, None)
        out[spelling] = value
    return out


def _in_turn(method):
    """Runs ``method`` holding the Writer's lock: its calls from several threads take turns."""
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return locked


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _no_plain_bytes(t: torch.Tensor) -> Optional[str]:
    """Why ``t`` has no plain bytes the Writer could store, and what to do; None when it has.

    The Writer stores a tensor's values as the dense, row-major bytes of its dtype. Tensors whose
    values are not such bytes in memory are refused before anything of the sample is queued,
    rather than failing deep inside torch (``NotImplementedError`` for a meta tensor) or storing
    the bytes of an internal buffer. Views that only need materialising (non-contiguous, conj/neg
    bits) and tensors on devices other than the CPU and CUDA (copied with ``.to("cpu")``) are
    not refused: ``_queue`` materialises them.
    """
    cls = type(t)
    if t.is_nested:
        return ("is a nested tensor, which has no single shape; write each component as its own "
                "sample, or pad it first (torch.nested.to_padded_tensor(t, 0))")
    if t.layout != torch.strided:
        layout = str(t.layout).replace("torch.", "")
        return (f"has layout {layout}, not strided (its values are not plain bytes); "
                "call .to_dense() first")
    if t.is_quantized:
        return ("is a quantized tensor (its bytes mean nothing without its scale and zero "
                "point); call .dequantize() first, or .int_repr() to store the integers")
    if t.is_meta:
        return ("is on the meta device: it has a shape but no data; materialise it on a real "
                "device first (compute it outside torch.device('meta'), or fill "
                "torch.empty_like(t, device='cpu'))")
    if getattr(cls, "__torch_dispatch__", None) is not torch._C._disabled_torch_dispatch_impl:
        # FakeTensor, FunctionalTensor, DTensor, wrapper subclasses: values defined by Python code.
        name = f"{cls.__module__}.{cls.__qualname__}"
        if "fake_tensor" in cls.__module__:
            return (f"is a {name} (shape and dtype only, no data: made under FakeTensorMode or "
                    "while torch.compile traces); write tensors computed outside it")
        return (f"is a tensor subclass {name} whose values come from its __torch_dispatch__, "
                "not from plain bytes; convert it to a plain torch.Tensor first (e.g. "
                "DTensor.full_tensor(), or the subclass's own way to materialise it)")
    try:
        wrapped = torch._C._functorch.is_functorch_wrapped_tensor(t)
    except (AttributeError, RuntimeError):  # pragma: no cover - an older or newer torch
        wrapped = False
    # Functionalization wrappers on other devices (torch_xla wraps every tensor) are copied to
    # the CPU by _queue like any tensor of those devices.
    if wrapped or (t.device.type in ("cpu", "cuda") and torch._is_functional_tensor(t)):
        return ("is wrapped by a torch.func transform (vmap, grad, functionalize) or by "
                "torch.compile's functionalization, and has no plain bytes; write it outside the "
                "transform (return it from the transformed function, then write the result)")
    if t.device.type in ("cpu", "cuda") and t.numel() > 0 and not torch._C._has_storage(t):
        return "has no storage (no plain bytes); materialise it as a dense CPU or CUDA tensor first"
    return None


def infer_schema(tensors: Mapping[str, torch.Tensor], *, what: str = "the first sample") -> Schema:
    """The schema ``libshard pack`` would infer from a file holding ``tensors``: the library's
    one rule (InferSchema, libshard/schema_inference.h), field order = the dict's order."""
    described = [(name, _dtype_name(t.dtype), tuple(t.shape)) for name, t in tensors.items()]
    return Schema._from_core(_core.infer_schema(described, what))


def _schema_to_core(schema: Schema) -> Dict[str, Any]:
    names = [f.name for f in schema.fields]
    return {
        "fields": [{"name": f.name, "dtype": _dtype_name(f.dtype), "rank": f.rank,
                    "seq_dim": -1 if f.seq_dim is None else f.seq_dim} for f in schema.fields],
        "length_field": -1 if schema.length_field is None else names.index(schema.length_field),
    }


def _schema_from_arg(schema: Any) -> Schema:
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, (list, tuple)) and all(isinstance(f, Field) for f in schema):
        fields = tuple(schema)
        return Schema(fields, next((f.name for f in fields if f.seq_dim is not None), None))
    raise InvalidArgumentError(
        "schema must be a libshard.Schema (e.g. libshard.open(path).schema) or a list of "
        f"libshard.Field, got {type(schema).__name__}")


class _Pending:
    """A sample waiting for its GPU->host copies (or, behind one, for its turn)."""

    __slots__ = ("key", "fields", "metadata", "event", "keep")

    def __init__(self, key: str, fields: List[Tuple[str, torch.Tensor]],
                 metadata: Dict[str, Any], event: Optional[Any], keep: List[torch.Tensor]):
        self.key = key
        self.fields = fields        # (name, contiguous host tensor), schema order
        self.metadata = metadata
        self.event = event          # torch.cuda.Event recorded after the copies, or None
        self.keep = keep            # source GPU tensors, held until the copies are done


class Writer:
    """Writes a libshard dataset sample by sample (a context manager).

    ::

        with libshard.Writer("out/", compress="zstd") as w:
            for conv in conversations:
                if w.has(conv.id):            # written by an earlier, interrupted run
                    continue
                w.write({"input_ids": ids, "hidden_state": hs, ...}, key=conv.id)

    Args:
      out: the dataset directory. With one rank the dataset is written there; with several, rank
        r writes ``out/parts/rank-RRRRR-of-WWWWW/`` and the last rank to close joins the parts
        into ``out`` (hard links, ordered by key).
      compress: None, ``"zstd"`` or ``"zstd:LEVEL"`` (per sample; 2-byte dtypes are byte-shuffled
        first, FORMAT.md §4.2), or ``"auto"`` / ``"planes2"`` / ``"planes"`` (field codecs chosen
        per field, lossless, FORMAT.md §4.3: bf16/fp16 as planes2, codec 5, or with ``"planes"``
        as codec 2; other dtypes zstd per field with ``"auto"``, raw otherwise).
      store_dtype: ``"float8_e4m3fn"`` stores bf16/fp16 hidden states (rank >= 2, with a sequence
        dim) as fp8 with a float32 scale per token (lossy, FORMAT.md §4.3.5; read back as their
        own dtype), as ``libshard pack --store-dtype`` does; with a field-codec ``compress``, as
        fp8-planes. None keeps every dtype.
      shard_size: roll to a new shard file past this many bytes (int or ``"4GiB"``).
      schema: a :class:`libshard.Schema`; default: inferred from the first sample as
        ``libshard pack`` does (field order = the dict's order, ``seq_dim`` from ``input_ids``).
      rank, world_size: default: torch.distributed, else ``RANK``/``WORLD_SIZE``, else Slurm's
        ``SLURM_ARRAY_TASK_ID``/``SLURM_ARRAY_TASK_COUNT`` and ``SLURM_PROCID``/``SLURM_NTASKS``,
        else 0/1.
      threads: encoding threads (layout, zstd, checksum); None or 0: one per CPU, at most 4.
      in_flight_bytes: bytes of samples written but not yet on disk before ``write`` waits (at
        least one sample is always admitted); None or 0: 1 GiB. ``queue_size``, its former name,
        is still accepted.
      journal_every: durability interval: after a crash, a reopened Writer keeps every sample up
        to the last journal checkpoint (this many bytes apart, and at every shard roll).
      commit_interval: seconds a written sample may wait before the journal makes it durable
        and visible to followers (``Loader(path, follow=True)`` trains on the dataset while it is
        written, docs/guide/loading.md); also when ``write`` is not called again. 0: only every
        ``journal_every`` bytes and at shard rolls.
      fsync: fsync shards, journal, index and manifest.
      attrs: what produced the data, recorded in the manifest (``{key: str|int}``, e.g.
        ``target_model``, ``hidden_state_layer_ids`` as a str, ``hidden_size``, ``tokenizer``):
        ``Dataset.attributes`` and ``libshard info`` show them, joining parts with other
        attributes is refused, ``Loader(expect=...)`` checks them. With the schema they are the
        dataset's identity (``Dataset.identity``, docs/guide/writing.md#identity): reopening an
        output (an interrupted write, or a committed one) with an attribute it does not record
        with the same value is refused, naming the key and both values; attributes not given
        are kept.
      allow_identity_change: a deliberate change of identity: what the output (this rank's
        part) holds of other attributes is set aside instead of refused (moved to
        ``OUT.stale-TIME``, kept, never reused; listed in ``Writer.set_aside``) and the write
        starts afresh; joining parts of other attributes then records only those they share.

    ``write`` reads the tensors' bytes in place (a contiguous CPU tensor is not copied by Python)
    after it returns, so a tensor must not be modified in place until a later ``write``,
    ``flush`` or ``close`` returned; CUDA tensors are copied to pinned host memory on a side
    stream (ordered after the work queued on the current stream, no synchronisation of the
    caller) and the copy is awaited before the bytes are encoded. Errors of the background work
    are raised by the next call (``write``, ``flush``, ``close``) as ``libshard.Error``.

    These options are the library's writer configuration (``docs/guide/writing.md#options``):
    ``libshard pack``, :func:`libshard.pack` and ``python -m libshard.capture`` read the same
    table, so the names, bounds and defaults are the same everywhere. Other spellings of an option
    (``queue_size``, ``journal_every_bytes``, ``compression``, ``commit_interval_seconds``,
    ``attributes``) are accepted as keywords too.

    Thread-safe: several threads may share one Writer. Its calls take turns (a ``write`` waiting
    for the queue holds the others back until it is admitted), so a key is written once whichever
    thread writes it (the others get the ``InvalidArgumentError`` of a key already written), and a
    ``write`` after ``close`` or ``abort`` from another thread raises that the Writer is closed.
    The order of the samples is the order the ``write`` calls took turns.
    """

    def __init__(self, out: PathLike, *, compress: Optional[str] = None,
                 store_dtype: Optional[str] = None,
                 shard_size: Union[int, str] = "4GiB", schema: Any = None,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 attrs: Optional[Mapping[str, Union[str, int]]] = None,
                 threads: Optional[int] = None, in_flight_bytes: Union[int, str, None] = None,
                 journal_every: Union[int, str] = "1GiB", commit_interval: float = 5.0,
                 fsync: bool = True, allow_identity_change: bool = False,
                 **aliases: Any) -> None:
        # Every call that reads or changes the Writer's state takes this turn (class docstring).
        self._lock = threading.RLock()
        self._core: Optional[Any] = None
        self._held: Dict[int, List[torch.Tensor]] = {}
        self._pending: Deque[_Pending] = collections.deque()
        self._closed = False
        self.out = os.fspath(out)
        self.rank, self.world_size, self._rank_source = resolve_writer_rank(rank, world_size)
        # Where the output lives, as the library's storage driver for it says (DescribeStorage).
        storage = _core.storage_info(self.out)
        if not storage["local_files"] and self.world_size > 1:
            # The parts are joined through local files (locks, markers) next to them.
            raise _core.UnsupportedError(
                f"{self.out}: a Writer of several ranks (world_size {self.world_size}) writes "
                "local parts only; write the parts to a local or shared directory and "
                f"`libshard merge {self.out} PARTS...` them")
        self.path = self.out if self.world_size == 1 else part_dir(self.out, self.rank,
                                                                   self.world_size)
        parts_root = os.path.join(self.out, "parts")
        if self.world_size == 1 and os.path.isdir(parts_root) and any(
                n.startswith("rank-") for n in os.listdir(parts_root)):
            # Samples added to the joined dataset itself would be lost at the next join.
            raise InvalidArgumentError(
                f"{self.out} was written by several ranks ({parts_root}); reopen it with the "
                "same rank and world size as the run that made it, or write to another directory")
        # Read, checked and defaulted by the library's Writer option table (WriterOptionTable):
        # sizes as ints or "4GiB", compress by ParseCompression, threads=None resolved in C++.
        options: Dict[str, Any] = {
            "shard_size": shard_size,
            "compress": compress,
            "store_dtype": store_dtype,
            "fsync": fsync,
            "threads": threads,
            "in_flight_bytes": in_flight_bytes,
            "journal_every": journal_every,
            "commit_interval": commit_interval,
            "attrs": attrs or None,
            "allow_identity_change": allow_identity_change,
        }
        self._options = _with_aliases(options, aliases)
        self._options["created_by"] = f"libshard.Writer {_core.__version__}"
        _core.check_writer_options(self._options)  # refused here, not at the first write
        self._given_schema = None if schema is None else _schema_from_arg(schema)
        self._schema: Optional[Schema] = None
        self._ref_shapes: Optional[Dict[str, Tuple[int, ...]]] = None
        self._keys: set = set()
        self._copy_stream: Optional[Any] = None
        self.summary: Optional[Dict[str, Any]] = None
        #: What this Writer set aside (a part of a run of another world size, what the output
        #: held of another identity with ``allow_identity_change``): paths, kept, never reused.
        self.set_aside: List[str] = []
        if self.world_size > 1:
            # Parts a run of another world size left are set aside (BeginPart, merge.h).
            self.set_aside += _core.begin_part(self.out, self.rank, self.world_size,
                                               bool(self._options.get("allow_identity_change")))
        # The directory the write works in: the output itself, or an object-storage URL's
        # staging directory; what it holds (a journal, a committed dataset) is resumed when it
        # has this Writer's identity (CheckWriteIdentity: refused otherwise, or set aside with
        # allow_identity_change, and then this write starts afresh).
        self._work_dir = storage["work_dir"] if self.world_size == 1 else self.path
        if self._holds_write():
            self.set_aside += _core.check_write_identity(self._work_dir, self._options)
        if self._holds_write():
            self._open(resume=True)
        elif self._given_schema is not None:
            self._open(resume=False, schema=self._given_schema)

    # -- opening ------------------------------------------------------------------------------
    def _holds_write(self) -> bool:
        return os.path.exists(os.path.join(self._work_dir, _MANIFEST)) or \
            os.path.exists(os.path.join(self._work_dir, _JOURNAL))

    def _open(self, *, resume: bool, schema: Optional[Schema] = None) -> None:
        os.makedirs(self._work_dir, exist_ok=True)
        if self.world_size > 1:  # this rank has samples after all
            _core.mark_part_empty(self.out, self.rank, self.world_size, False)
        self._core = _core.Writer.open(
            self.path, None if schema is None else _schema_to_core(schema), self._options, resume)
        self._schema = Schema._from_core(self._core.schema)
        if resume:
            if self._given_schema is not None and self._given_schema != self._schema:
                self._core.abort()
                raise InvalidArgumentError(
                    f"{self.path} holds samples of another schema ({self._schema}) than the "
                    f"given one ({self._given_schema}); write to another directory")
            self._keys = set(self._core.existing_keys())

    # -- writing ------------------------------------------------------------------------------
    @_in_turn
    def has(self, key: str) -> bool:
        """True when ``key`` is in the output: durable samples of an earlier run of this rank's
        part, and every sample written by this Writer."""
        return key in self._keys

    @_in_turn
    def __contains__(self, key: object) -> bool:
        return key in self._keys

    @_in_turn
    def __len__(self) -> int:
        return len(self._keys)

    @property
    def schema(self) -> Optional[Schema]:
        return self._schema

    @_in_turn
    def write(self, sample: Mapping[str, Any], *, key: str) -> None:
        """Queues ``sample`` (``{name: tensor}``; str/int/float/bool values become the sample's
        metadata) under ``key``. Returns before the bytes are on disk.

        Raises ``InvalidArgumentError`` (a ``ValueError``) naming the key and the field when the
        sample does not fit the schema, for a tensor without plain bytes (meta, sparse or other
        non-strided layouts, nested, quantized, FakeTensor and other ``__torch_dispatch__``
        subclasses, tensors of a ``torch.func`` transform: the message says what to call first),
        for a key already written, or for a non-str key; a refused sample is not written and the
        Writer stays usable. Also raises any error of earlier background work
        (``libshard.Error``). Non-contiguous tensors, conj/neg views and tensors that require
        grad are accepted: their values are materialised.
        """
        if self._closed:
            raise InvalidArgumentError(f"Writer({self.out!r}) is closed")
        if not isinstance(key, str) or not key:
            raise InvalidArgumentError(f"key must be a non-empty str, got {key!r}")
        if "\0" in key or len(key.encode("utf-8", "surrogateescape")) > 4096:
            raise InvalidArgumentError(f"key {key[:80]!r}: must have no NUL byte and at most "
                                       "4096 bytes")
        if key in self._keys:
            raise InvalidArgumentError(
                f"key {key!r} is already in {self.path}; a key may occur once in a dataset "
                "(skip samples for which Writer.has(key) is true)")
        tensors: Dict[str, torch.Tensor] = {}
        metadata: Dict[str, Any] = {}
        for name, value in sample.items():
            if not isinstance(name, str):
                raise InvalidArgumentError(f"sample {key!r}: field names must be str, got {name!r}")
            if isinstance(value, torch.Tensor):
                tensors[name] = value
            elif isinstance(value, (str, int, float, bool)):
                metadata[name] = value
            else:
                raise InvalidArgumentError(
                    f"sample {key!r}: field {name!r} is a {type(value).__name__}; a sample holds "
                    "torch tensors and str/int/float/bool metadata")
        for name, t in tensors.items():
            why = _no_plain_bytes(t)
            if why is not None:
                raise InvalidArgumentError(f"sample {key!r}: field {name!r} {why}")
        if self._schema is None:
            self._open(resume=False, schema=self._given_schema or
                       infer_schema(tensors, what=f"sample {key!r}"))
        shapes = self._check(key, tensors)
        self._queue(key, tensors, metadata)
        if self._ref_shapes is None:
            self._ref_shapes = shapes  # from the first sample accepted, not the first refused
        self._keys.add(key)

    def _check(self, key: str, tensors: Dict[str, torch.Tensor]) -> Dict[str, Tuple[int, ...]]:
        """Raises InvalidArgumentError where ``tensors`` do not fit the schema or the first
        sample's shapes; returns their shapes."""
        assert self._schema is not None
        for f in self._schema.fields:
            t = tensors.get(f.name)
            where = f"sample {key!r}: field {f.name!r}"
            if t is None:
                raise InvalidArgumentError(f"{where} is missing (the schema has "
                                           f"{self._schema.names})")
            if t.dtype != f.dtype:
                raise InvalidArgumentError(f"{where}: dtype {t.dtype} != schema dtype {f.dtype}")
            if t.dim() != f.rank:
                raise InvalidArgumentError(f"{where}: rank {t.dim()} (shape {tuple(t.shape)}) != "
                                           f"schema rank {f.rank}")
        extra = [n for n in tensors if n not in self._schema]
        if extra:
            raise InvalidArgumentError(f"sample {key!r}: field {extra[0]!r} is not in the schema "
                                       f"{self._schema.names}")
        shapes = {n: tuple(t.shape) for n, t in tensors.items()}
        if self._ref_shapes is None:
            return shapes
        for f in self._schema.fields:
            ref, got = self._ref_shapes[f.name], shapes[f.name]
            for d, (a, b) in enumerate(zip(ref, got)):
                if a != b and d != f.seq_dim:
                    raise InvalidArgumentError(
                        f"sample {key!r}: field {f.name!r}: shape {list(got)} differs from "
                        f"{list(ref)} (the first sample's) in dim {d}, which is not the "
                        f"sequence dim ({f.seq_dim})")
        return shapes

    def _queue(self, key: str, tensors: Dict[str, torch.Tensor],
               metadata: Dict[str, Any]) -> None:
        assert self._schema is not None
        fields: List[Tuple[str, torch.Tensor]] = []
        keep: List[torch.Tensor] = []
        event = None
        for f in self._schema.fields:
            t = tensors[f.name].detach()
            if t.is_cuda:
                if self._copy_stream is None or self._copy_stream.device != t.device:
                    self._copy_stream = torch.cuda.Stream(t.device)
                stream = self._copy_stream
                stream.wait_stream(torch.cuda.current_stream(t.device))
                with torch.cuda.stream(stream):
                    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                    host.copy_(t, non_blocking=True)
                keep.append(t)
                t = host
                event = torch.cuda.Event()
                event.record(stream)
            elif t.device.type != "cpu":
                try:
                    t = t.to("cpu")
                except (RuntimeError, NotImplementedError) as e:
                    raise InvalidArgumentError(
                        f"sample {key!r}: field {f.name!r}: cannot copy it from {t.device} to "
                        f"the CPU ({e}); write a CPU or CUDA tensor") from e
            if t.is_conj() or t.is_neg():
                t = t.resolve_conj().resolve_neg()
            if not t.is_contiguous():
                t = t.contiguous()
            fields.append((f.name, t))
        self._pending.append(_Pending(key, fields, metadata, event, keep))
        self._drain(wait=len(self._pending) > _MAX_PENDING_COPIES)

    def _drain(self, *, wait: bool, all_: bool = False) -> None:
        """Submits pending samples in order: those whose copies are done; waits for the oldest
        when ``wait`` (for every one when ``all_``)."""
        while self._pending:
            p = self._pending[0]
            if p.event is not None and not p.event.query():
                if not (wait or all_):
                    break
                p.event.synchronize()
            wait = False
            self._pending.popleft()
            self._submit(p)
        self._release()

    def _submit(self, p: _Pending) -> None:
        assert self._core is not None
        raw = [(name, _dtype_name(t.dtype), tuple(t.shape), t.data_ptr(),
                t.numel() * t.element_size()) for name, t in p.fields]
        seq = self._core.submit(p.key, raw, p.metadata)
        self._held[seq] = [t for _, t in p.fields]

    def _release(self) -> None:
        if self._core is not None:
            for seq in self._core.take_encoded():
                self._held.pop(seq, None)

    @_in_turn
    def flush(self) -> None:
        """Waits until every sample written so far is in the shards and journaled (durable: a
        crash keeps it, and followers of the write see it; the dataset is committed by
        ``close``); raises a pending error."""
        self._drain(wait=True, all_=True)
        if self._core is not None:
            self._core.flush()
        self._release()

    @property
    @_in_turn
    def blocked_seconds(self) -> float:
        """Seconds ``write`` has waited for the queue (the disk, or encoding) so far."""
        if self._closed or self._core is None:
            return float((self.summary or {}).get("blocked_seconds", 0.0))
        return self._core.blocked_seconds

    # -- closing ------------------------------------------------------------------------------
    @_in_turn
    def close(self) -> None:
        """Commits this rank's dataset (or part), then, with several ranks, joins the parts into
        ``out`` when every rank has closed. Idempotent."""
        self._close(join=True)

    def _close(self, *, join: bool) -> None:
        if self._closed:
            return
        try:
            self._drain(wait=True, all_=True)
            if self._core is not None:
                self.summary = self._core.finish()
        finally:
            self._closed = True
            if self._core is not None:
                self._core.abort()
            self._held.clear()
            self._pending.clear()
        if self._core is None and self.world_size > 1 and not os.path.exists(
                os.path.join(self.path, _MANIFEST)):
            # This rank wrote nothing (so no schema, no part): say so, or the parts never join.
            _core.mark_part_empty(self.out, self.rank, self.world_size, True)
        if join and self.world_size > 1:
            self.joined = join_parts(
                self.out, self.world_size,
                allow_identity_change=bool(self._options.get("allow_identity_change")))

    @_in_turn
    def abort(self) -> None:
        """Stops without committing: what the journal holds is kept for the next Writer."""
        self._closed = True
        if self._core is not None:
            self._core.abort()
        self._held.clear()
        self._pending.clear()

    def __enter__(self) -> "Writer":
        return self

    @_in_turn
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
            return
        # The body failed: keep the work done (commit this rank's samples, so that a rerun
        # continues after them) but do not join the parts; never mask the original exception.
        try:
            self._close(join=False)
        except Exception:  # noqa: BLE001
            self.abort()

    def __del__(self) -> None:
        # Before the tensors the background threads read are released.
        core = getattr(self, "_core", None)
        if core is not None:
            core.abort()

    def __repr__(self) -> str:
        return (f"libshard.Writer({self.out!r}, rank={self.rank}, world_size={self.world_size}, "
                f"samples={len(self._keys)})")


def join_parts(out: PathLike, world_size: int, *, allow_identity_change: bool = False) -> bool:
    """Joins ``out/parts/rank-*-of-WORLD`` into ``out`` when every rank has finished (ordered by
    key, shards hard-linked). Returns True when ``out`` holds the join of the current parts.

    The library's JoinParts (libshard/merge.h; the protocol is FORMAT.md §7.1): safe against
    ranks closing at once (they queue on ``out/parts/.join.lock``), a join already done for the
    same part manifests is not redone, one made before a part changed is replaced, and a crash
    never leaves a partial dataset in ``out``. Parts of different identities (other attributes)
    are refused unless ``allow_identity_change`` (the join then records the attributes they
    share).
    """
    return bool(_core.join_parts(os.fspath(out), world_size,
                                 allow_identity_change=allow_identity_change)["joined"])


def merge(out: PathLike, parts: Sequence[PathLike], *, by_key: bool = False,
          link: bool = True, allow_identity_change: bool = False) -> None:
    """Builds dataset ``out`` from the datasets ``parts`` (``libshard merge``): shard files are
    hard-linked (copied when ``link`` is False or linking fails), only a new index and manifest
    are written. Order: part by part, or by key with ``by_key`` (a key found twice is an
    ``InvalidArgumentError``). ``out`` must not hold a dataset yet. Parts of different
    identities (other attributes) are refused, naming the keys and values, unless
    ``allow_identity_change``: the merged dataset then records only the attributes they share."""
    _core.merge(os.fspath(out), [os.fspath(p) for p in parts], by_key=by_key, link=link,
                allow_identity_change=allow_identity_change)
