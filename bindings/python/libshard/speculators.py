"""libshard inside vLLM speculators' training (``speculators`` 0.9.0 + ``hs-connectors`` 0.9.0).

speculators trains from an Arrow dataset (``input_ids``, ``loss_mask``, ``seq_len``) plus one
``hidden_states/hs_{i}.safetensors`` per row (``hidden_states [S, L+1, H]``, ``token_ids [S]``;
the fp8 backend stores ``float8_e4m3fn`` plus ``hidden_states_scales [S,1,1]``), read through a
``hs_connectors`` backend. This module registers a backend named ``libshard`` that serves the
same samples from a packed dataset. Pack the hidden states once (the Arrow part stays as is)::

    libshard pack DATA/hidden_states -o DATA/hidden_states.libshard

and train with speculators' own command line, the backend chosen by name::

    python -m libshard.speculators train --data-path DATA --hidden-states-backend libshard ...
    torchrun --nproc-per-node 8 -m libshard.speculators train ... --hidden-states-backend libshard

(``--hidden-states-path`` names the dataset; by default ``DATA/hidden_states.libshard`` when it
exists, else ``DATA/hidden_states``.) ``get_cached(i)`` returns what the ``file`` backend's
returns for ``hs_{i}.safetensors`` (bf16), or for an fp8 dump what the ``fp8`` backend's returns
(dequantized with hs_connectors' own function, bit for bit). Row ``i`` is found by the source
path the index records (``hs_{i}.safetensors``), not by position, so a missing file stays
missing (``None``, as the file backend answers) instead of shifting the rows after it. The
transfer pickles as its path and opens the dataset lazily in each DataLoader worker.

Importing this module imports ``hs_connectors`` and registers the backend; do it before
``speculators.train.config`` is imported (``python -m libshard.speculators`` does).
"""

from __future__ import annotations

import os
import re
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

try:
    from hs_connectors import FP8Transfer, HiddenStatesBackend, HiddenStatesTransfer
    from hs_connectors.fp8_utils import SCALES_KEY, dequantize_fp8_tensor
    from hs_connectors.transfer import FileBackend, _add_argument_if_absent
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "libshard.speculators needs hs-connectors 0.9 (and speculators 0.9 to train): "
        "`pip install --no-deps speculators==0.9.0 hs-connectors==0.9.0` and "
        "`pip install libshard[speculators]` (their data-path dependencies; neither replaces "
        f"your torch nor pulls vllm). Cause: {e}") from e

import torch

from . import _core
from . import _trainer_common as common
from ._dataset import Dataset
from ._read_ahead import ReadAheadSampler

PathLike = Union[str, "os.PathLike[str]"]

#: The name the backend is registered under (``--hidden-states-backend libshard``).
BACKEND_NAME = "libshard"
_HS_NAME = re.compile(r"(?:^|/)hs_(\d+)\.safetensors(?:\.gz)?$")
_TRAINER = "speculators (hs-connectors' file/fp8 backends)"
#: ``--libshard-batches`` / :func:`train_loader`'s ``batches``: "auto" (C++ batches where
#: provably speculators', else its own collate, saying why once), "cpp" or "trainer".
BATCHES = ("auto", "cpp", "trainer")

__all__ = ["BACKEND_NAME", "BATCHES", "LibshardBackend", "LibshardTransfer", "PackedLoader",
           "main", "read_ahead_loader", "split_batch_for_sp", "train_loader"]


class LibshardTransfer(HiddenStatesTransfer):
    """A ``HiddenStatesTransfer`` over a libshard dataset packed from ``hs_{i}.safetensors``.

    Args:
      path: the dataset directory, or its ``s3://`` URL.
      dequantize_dtype: the dtype fp8 samples (those with ``hidden_states_scales``) are
        dequantized to, as ``FP8Transfer``; bf16 samples are served as stored.
      verify: check each sample's checksum when it is read.
      cache, cache_size: for an ``s3://`` dataset, the node-local cache directory and its bound
        (as :func:`libshard.open`).
      read_ahead: the settings of the read-ahead :meth:`prefetch_rows` starts in each process
        (``libshard.Dataset(read_ahead=...)``).

    Opening checks the schema speculators needs (``hidden_states``, ``token_ids``, and
    ``hidden_states_scales`` for fp8): ``libshard.InvalidArgumentError`` (a ``ValueError``,
    also a ``KeyError``) naming the field and the dataset, not at the first read.
    """

    def __init__(self, path: PathLike, dequantize_dtype: torch.dtype = torch.bfloat16,
                 verify: bool = True, cache: Optional[PathLike] = None,
                 cache_size: Union[int, str, None] = None,
                 read_ahead: Optional[Dict[str, Any]] = None) -> None:
        self.path = common.location(path)
        self.dequantize_dtype = dequantize_dtype
        self.verify = bool(verify)
        self.cache, self.cache_size = cache, cache_size
        self.read_ahead = read_ahead
        self._init_state()
        self._open()  # the schema, at open; a spawned worker reopens on first use

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._ds: Optional[Dataset] = None
        self._rows: Optional[Dict[int, int]] = None
        # Online generation (samples vLLM writes while training) stays on the files vLLM writes.
        # (For an s3:// dataset the generated files are local to whoever generates them.)
        self._files = FP8Transfer(Path(self.path), dequantize_dtype=self.dequantize_dtype)

    # Pickles as its options: each spawned worker opens the dataset on first use.
    def __getstate__(self) -> Dict[str, Any]:
        return {"path": self.path, "dequantize_dtype": self.dequantize_dtype,
                "verify": self.verify, "cache": self.cache, "cache_size": self.cache_size,
                "read_ahead": self.read_ahead}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        state.setdefault("cache", None)
        state.setdefault("cache_size", None)
        state.setdefault("read_ahead", None)
        self.__dict__.update(state)
        self._init_state()

    def setup(self) -> None:
        self._open()

    def _open(self):
        with self._lock:
            if self._ds is None:
                ds = Dataset(self.path, verify=self.verify, metadata=False,
                             read_ahead=self.read_ahead,
                             **common.open_kwargs(self.cache, self.cache_size))
                needed = ["hidden_states", "token_ids"]
                if "hidden_states" in ds.schema and \
                        ds.schema["hidden_states"].dtype == torch.float8_e4m3fn:
                    needed.append(SCALES_KEY)
                common.require_fields(ds, needed, _TRAINER, "its hidden-states samples")
                rows: Dict[int, int] = {}
                for index, source in enumerate(_core.dataset_sources(ds._core)):
                    m = _HS_NAME.search(source)
                    if m:
                        rows.setdefault(int(m.group(1)), index)
                if not rows and len(ds):
                    raise ValueError(
                        f"{self.path}: no sample was packed from an hs_{{i}}.safetensors file "
                        f"(the first is {ds.source(0)!r}); pack speculators' hidden_states "
                        "directory with `libshard pack DATA/hidden_states -o OUT`")
                self._rows, self._ds = rows, ds
            return self._ds, self._rows

    def prefetch_rows(self, file_idxs) -> None:
        """Announces the rows (``hs_{i}`` indices) ``get_cached`` will be asked for, in order:
        they are read ahead and served from memory already read
        (:meth:`libshard.Dataset.prefetch`). Rows not in the dataset are left out."""
        ds, rows = self._open()
        indices = [rows[int(i)] for i in file_idxs if int(i) in rows]
        if indices and hasattr(ds, "prefetch"):
            ds.prefetch(indices)

    def sample_index(self, file_idx: int) -> Optional[int]:
        """The dataset sample packed from ``hs_{file_idx}.safetensors``, or None."""
        return self._open()[1].get(int(file_idx))

    def get_cached(self, file_idx: int) -> Optional[Dict[str, torch.Tensor]]:
        ds, rows = self._open()
        index = rows.get(int(file_idx))
        if index is None:
            return None
        sample = ds[index]
        if SCALES_KEY not in sample:
            return sample
        # FP8Transfer._dequantize, with hs_connectors' own function.
        out = dict(sample)
        out["hidden_states"] = dequantize_fp8_tensor(sample["hidden_states"], sample[SCALES_KEY],
                                                     dtype=self.dequantize_dtype)
        del out[SCALES_KEY]
        return out

    def get_generated(self, hs_transfer_params: Dict[str, Any]):
        return self._files.get_generated(hs_transfer_params)

    def delete(self, handle: str) -> None:
        self._files.delete(handle)


class LibshardBackend(HiddenStatesBackend):
    """``--hidden-states-backend libshard``: cached samples from a libshard dataset; samples
    generated during training (``--on-missing generate``) through the files vLLM writes, as the
    ``fp8``/``file`` backends read them."""

    @staticmethod
    def add_train_args(parser) -> None:
        _add_argument_if_absent(
            parser, "--hidden-states-path", type=str, default=None,
            help=("The path where cached hidden states files are stored. (Default: "
                  "args.data_path / 'hidden_states')"))
        _add_argument_if_absent(
            parser, "--hidden-states-cache", type=str, default=None,
            help=("libshard: the node-local cache directory of an s3:// hidden-states dataset "
                  "(default $LIBSHARD_CACHE_DIR, else ~/.cache/libshard)"))
        _add_argument_if_absent(
            parser, "--hidden-states-cache-size", type=str, default=None,
            help="libshard: the bound of that cache directory (e.g. 500GiB)")

    @staticmethod
    def add_launch_args(parser) -> None:
        FileBackend.add_launch_args(parser)

    @staticmethod
    def from_train_args(args, data_path: str) -> LibshardTransfer:
        path = getattr(args, "hidden_states_path", None)
        if not path:
            packed = Path(data_path) / "hidden_states.libshard"
            path = packed if packed.is_dir() else Path(data_path) / "hidden_states"
        return LibshardTransfer(path, cache=getattr(args, "hidden_states_cache", None),
                                cache_size=getattr(args, "hidden_states_cache_size", None))

    @staticmethod
    def build_kv_transfer_config(args) -> Dict[str, Any]:
        # vLLM writes safetensors files (libshard pack them afterwards).
        return FileBackend.build_kv_transfer_config(args)


# -- speculators' training DataLoader, with its batches built in C++ ---------------------------
def split_batch_for_sp(batch: Dict[str, Any], sp_rank: int, sp_size: int) -> Dict[str, Any]:
    """SP rank ``sp_rank``'s part of a packed batch, as speculators' ``--sp-size`` cuts it
    (speculators#871, ``src/speculators/train/sequence_parallel.py`` ``split_batch_for_sp``;
    not in the 0.9.0 wheel): every tensor with a sequence dimension (dim 1 of [1, L, ...]) is
    ``torch.chunk(sp_size, dim=1)[sp_rank]``, ``document_ids`` stays whole, and
    ``full_seq_len = torch.tensor(L)`` is added; other values are kept. L (the packed row,
    ``--total-seq-len``) must be a multiple of ``sp_size``: ``ValueError`` otherwise, as
    speculators refuses it. The rows are those of libshard's ``speculators`` split rule
    (``libshard._core.sequence_parallel_slice("speculators", L, sp_size, sp_rank)``)."""
    sp_size, sp_rank = int(sp_size), int(sp_rank)
    if sp_size < 1 or not 0 <= sp_rank < sp_size:
        raise ValueError(f"split_batch_for_sp: sp_rank={sp_rank} is not a rank of an SP group "
                         f"of sp_size={sp_size}")
    total = int(batch["input_ids"].shape[1])
    if total % sp_size:
        raise ValueError(f"split_batch_for_sp: the packed row's {total} positions "
                         f"(--total-seq-len) are not a multiple of --sp-size {sp_size}")
    out: Dict[str, Any] = {}
    for key, value in batch.items():
        if key == "document_ids" or not isinstance(value, torch.Tensor) or value.dim() < 2:
            out[key] = value
        else:
            out[key] = value.chunk(sp_size, dim=1)[sp_rank]
    out["full_seq_len"] = torch.tensor(total)
    return out


class _SplitBatches:
    """A loader whose every batch is SP rank ``sp_rank``'s part (:func:`split_batch_for_sp`);
    ``len()``, ``batch_sampler`` and ``dataset`` are the wrapped loader's."""

    def __init__(self, loader: Any, sp_rank: int, sp_size: int) -> None:
        self.loader, self.sp_rank, self.sp_size = loader, int(sp_rank), int(sp_size)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)

    def __iter__(self):
        for batch in self.loader:
            yield split_batch_for_sp(batch, self.sp_rank, self.sp_size)


def _sp_place(sp_size: Optional[int], sp_rank: Optional[int]):
    """(sp_rank, sp_size): as given, else speculators' own (``speculators.train.distributed``:
    its ``("dp", "sp")`` groups of consecutive ranks, ``sp_rank = rank % sp_size``)."""
    if sp_size is None or sp_rank is None:
        from speculators.train import distributed as sp_dist

        sp_size = sp_dist.get_sp_size() if sp_size is None else sp_size
        sp_rank = sp_dist.get_sp_rank() if sp_rank is None else sp_rank
    return int(sp_rank), int(sp_size)


class PackedLoader:
    """speculators' training ``DataLoader`` (its ``MultipackDistributedBatchSamplerV2`` and its
    packing ``CollateFn`` with ``shift_batch``) whose batches are read ahead in the sampler's
    order and built in C++ (``collate='speculators-eagle3'``): the same dict, key for key and
    byte for byte: ``input_ids``, ``hidden_states``, ``verifier_last_hidden_states``,
    ``loss_mask`` (from the Arrow rows, as speculators takes it), ``position_ids``,
    ``document_ids``, ``error_records``. Build it with :func:`train_loader`, which checks that
    the batches are provably speculators'. ``batch_sampler``, ``len()`` and ``set_epoch``
    through the sampler behave as on speculators' DataLoader (its trainer's resume fast-skip
    included).
    """

    def __init__(self, dataset: Any, batch_sampler: Any, collate_fn: Any, transfer: Any,
                 rows: Any, memory_budget: Union[int, str] = "auto", sp_size: int = 1,
                 sp_rank: int = 0) -> None:
        self.dataset = dataset
        self.batch_sampler = batch_sampler
        self.collate_fn = collate_fn
        self._transfer = transfer
        self._rows = rows  # _ArrowRows: the split's input_ids and loss_mask
        self._memory_budget = memory_budget
        self._loaders: Any = None  # common.OrderedLoaders, made at the first iteration
        # --sp-size > 1: each batch is SP rank sp_rank's part (split_batch_for_sp's), the C++
        # loader reading only the rows of the samples behind it (sp_rule='speculators').
        self.sp_size, self.sp_rank = int(sp_size), int(sp_rank)

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self):
        start = self.dataset.start_file_idx
        positions = [[int(p) for p in batch] for batch in self.batch_sampler]
        order = [[self._transfer.sample_index(p + start) for p in batch] for batch in positions]
        max_len = self.collate_fn.max_len
        ds = self._transfer._open()[0]
        sp = None
        if self.sp_size > 1:
            from ._sequence_parallel import SequenceParallel

            sp = SequenceParallel(self.sp_size, rule="speculators")
        # One C++ loader kept across epochs (its arena serves every epoch).
        self._loaders = common.ordered_loaders(
            self._loaders, ds, collate="speculators-eagle3", recipe_len=max_len,
            memory_budget=self._memory_budget, sequence_parallel=sp, sp_rank=self.sp_rank)
        with self._loaders.open(order) as batches:
            for batch_positions, got in zip(positions, batches):
                got.pop("__index__", None)
                mask = self._rows.loss_mask(batch_positions, max_len)
                batch = {"input_ids": got["input_ids"], "hidden_states": got["hidden_states"],
                         "verifier_last_hidden_states": got["verifier_last_hidden_states"],
                         "loss_mask": mask if sp is None
                         else mask.chunk(self.sp_size, dim=1)[self.sp_rank],
                         "position_ids": got["position_ids"],
                         "document_ids": got["document_ids"], "error_records": 0}
                if sp is not None:
                    batch["full_seq_len"] = torch.tensor(max_len)
                yield batch

    @property
    def libshard_stats(self) -> Dict[str, Any]:
        """The C++ loader's counters after an iteration (``bytes_read``: what this rank read
        in all)."""
        held = self._loaders._idle if self._loaders is not None else None
        return dict(held[0].stats()) if held is not None else {}


class _ArrowRows:
    """The Arrow split's ``input_ids`` and ``loss_mask`` columns as flat arrays with offsets
    (zero-copy where Arrow allows), for the token check and the loss mask of a packed batch."""

    def __init__(self, dataset: Any) -> None:
        import numpy as np

        table = dataset.data.with_format("arrow")[:]
        self._ids_offsets, self._ids = self._column(table, "input_ids")
        self._mask_offsets, self._mask = self._column(table, "loss_mask")
        # The dtype speculators' torch-formatted rows give the loss mask.
        self.mask_dtype = dataset.data[0]["loss_mask"].dtype if len(dataset) else torch.int64
        self._np = np

    @staticmethod
    def _column(table: Any, name: str):
        if name not in table.column_names:
            raise common.missing_field(
                "speculators' training data (the Arrow split its dataset reads)", [name],
                table.column_names, "its CollateFn packs it into every batch: regenerate the "
                "data with speculators' data preparation")
        col = table.column(name).combine_chunks()
        return col.offsets.to_numpy(), col.values.to_numpy(zero_copy_only=False)

    def __len__(self) -> int:
        return len(self._ids_offsets) - 1

    def input_ids(self, position: int):
        return self._ids[self._ids_offsets[position]:self._ids_offsets[position + 1]]

    def loss_mask(self, positions: List[int], max_len: int) -> torch.Tensor:
        """CollateFn's loss_mask row: each sample's loss_mask[1:] packed and truncated as the
        batch's other keys, zeros after."""
        out = torch.zeros(max_len, dtype=self.mask_dtype)
        offset = 0
        for p in positions:
            lo, hi = int(self._mask_offsets[p]), int(self._mask_offsets[p + 1])
            n = min(max(hi - lo - 1, 0), max_len - offset)
            if n > 0:
                # A copy: Arrow's buffers are read-only.
                out[offset:offset + n] = torch.from_numpy(
                    self._np.array(self._mask[lo + 1:lo + 1 + n])).to(self.mask_dtype)
            offset += n
            if offset == max_len:
                break
        return out.unsqueeze(0)


def _cpp_plan(dataset: Any, collate_fn: Any):
    """(transfer, rows, "") when batches of ``dataset`` with ``collate_fn`` are provably what
    collate='speculators-eagle3' builds plus the Arrow loss mask; else (None, None, why)."""
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.data import ArrowDataset, CollateFn

    transfer = getattr(dataset, "transfer", None)
    if type(dataset) is not ArrowDataset or not isinstance(transfer, LibshardTransfer):
        return None, None, "the dataset is not an ArrowDataset over the libshard backend"
    if type(collate_fn) is not CollateFn or collate_fn.preprocess is not shift_batch:
        return None, None, "the collate is not speculators' CollateFn with shift_batch"
    if collate_fn.dtype != torch.bfloat16 or transfer.dequantize_dtype != torch.bfloat16:
        return None, None, "the hidden states are not bfloat16 (--hidden-states-dtype)"
    ds, rows_of = transfer._open()
    start = dataset.start_file_idx
    missing = [p for p in range(len(dataset)) if rows_of.get(p + start) is None]
    if missing:
        return None, None, (f"{len(missing)} rows of the split (e.g. hs_{missing[0] + start}) "
                            "are not in the dataset, so speculators' --on-missing decides")
    try:
        common.check_recipe(ds, collate="speculators-eagle3", recipe_len=collate_fn.max_len)
    except ValueError as e:
        return None, None, str(e)
    rows = _ArrowRows(dataset)
    why = _token_check(ds, rows, [rows_of[p + start] for p in range(len(dataset))])
    if why:
        return None, None, why
    return transfer, rows, ""


def _token_check(ds: Dataset, rows: "_ArrowRows", samples: List[int]) -> str:
    """speculators serves a row only when the stored token_ids equal its Arrow input_ids (else
    the row is unavailable): checked for every row once, reading token_ids only."""
    import numpy as np

    from ._loader import Loader

    position = {sample: p for p, sample in enumerate(samples)}
    loader = Loader(ds, batch_size=256, shuffle=False, fields=["token_ids"], metadata=False,
                    return_index=True, pin_memory=False, memory_budget="256MiB")
    try:
        for batch in loader:
            for sample in batch:
                p = position.get(int(sample["__index__"]))
                if p is None:
                    continue
                if not np.array_equal(sample["token_ids"].numpy(), rows.input_ids(p)):
                    return (f"the token_ids of {ds.source(int(sample['__index__']))} differ from "
                            f"the Arrow row's input_ids (speculators skips such rows)")
    finally:
        loader.close()
    return ""


def train_loader(dataset: Any, batch_sampler: Any, collate_fn: Any, *,
                 batches: str = "auto", memory_budget: Union[int, str] = "auto",
                 fallback: Any = None, sp_size: Optional[int] = None,
                 sp_rank: Optional[int] = None) -> Any:
    """A :class:`PackedLoader` over speculators' ``dataset``, ``batch_sampler`` and
    ``collate_fn`` when its batches are provably speculators' (an ``ArrowDataset`` over
    :class:`LibshardTransfer` with every row of the split in the dataset and its token_ids equal
    to the Arrow input_ids; ``CollateFn`` with ``shift_batch``; bfloat16), else ``fallback()``
    (speculators' own DataLoader), saying why once (``batches="auto"``), or ValueError
    (``batches="cpp"``).

    Sequence parallelism (``--sp-size``): with ``sp_size`` > 1 (default: speculators'
    ``get_sp_size()``, its ``("dp", "sp")`` mesh; the batch sampler already gives the SP group
    its data-parallel rank's batches) every batch is this rank's part,
    :func:`split_batch_for_sp` (``sp_rank``: default ``get_sp_rank()``): the C++ batches read
    only the rows of the samples behind that part (``sp_rule="speculators"``), speculators' own
    are cut from the whole batch. ``sp_size`` 1: the whole batch, as speculators gives it."""
    if batches not in BATCHES:
        raise ValueError(f"batches={batches!r}: give one of {BATCHES}")
    sp_rank, sp_size = _sp_place(sp_size, sp_rank)
    if sp_size < 1 or not 0 <= sp_rank < sp_size:
        raise ValueError(f"libshard.speculators: sp_rank={sp_rank} is not a rank of an SP group "
                         f"of --sp-size {sp_size}")
    if sp_size > 1 and collate_fn is not None and getattr(collate_fn, "max_len", 0) % sp_size:
        raise ValueError(f"libshard.speculators: --total-seq-len {collate_fn.max_len} is not "
                         f"a multiple of --sp-size {sp_size}")
    why = "batches='trainer'"
    if batches != "trainer":
        if not common.ordered_loader_available():
            transfer, why = None, ("this libshard cannot stream in a given order yet "
                                   "(libshard.Loader(batch_sampler=...))")
        else:
            transfer, rows, why = _cpp_plan(dataset, collate_fn)
        if transfer is not None:
            return PackedLoader(dataset, batch_sampler, collate_fn, transfer, rows,
                                memory_budget=memory_budget, sp_size=sp_size, sp_rank=sp_rank)
    if batches == "cpp":
        raise ValueError(f"libshard.speculators.train_loader(batches='cpp'): {why}")
    if batches == "auto":
        common.note_once("speculators:" + why, (
            f"libshard.speculators: speculators' own DataLoader and collate build the batches "
            f"({why}); batches built in C++ need --hidden-states-backend libshard with every "
            "row packed and bfloat16 hidden states"))
    whole = fallback() if fallback is not None else None
    # speculators' own batches are whole: each SP rank cuts its part from them.
    return _SplitBatches(whole, sp_rank, sp_size) if whole is not None and sp_size > 1 \
        else whole


def _announce_rows(dataset: Any, positions: List[int]) -> None:
    """libshard.ReadAheadSampler's announcement in a DataLoader worker: the ArrowDataset
    positions it will be asked for, as rows of its libshard transfer."""
    transfer = getattr(dataset, "transfer", None)
    if isinstance(transfer, LibshardTransfer):
        start = dataset.start_file_idx
        transfer.prefetch_rows([int(p) + start for p in positions])


class _ReadAheadBatches(ReadAheadSampler):
    """libshard.ReadAheadSampler over speculators' multipack batch sampler, whose fast-skip of a
    resumed epoch (the sampler's batch cache) reaches the wrapped sampler."""

    @property
    def _cached_generated_batches(self):
        return self.sampler._cached_generated_batches

    @_cached_generated_batches.setter
    def _cached_generated_batches(self, value):
        self.sampler._cached_generated_batches = value

    def _generate_batches(self, epoch):
        return self.sampler._generate_batches(epoch)


def read_ahead_loader(loader: Any) -> Any:
    """speculators' DataLoader (as its ``_setup_dataloader`` builds it) with each batch the
    multipack sampler draws announced ahead to the worker that will fetch it, so the libshard
    backend's ``get_cached`` is served from memory already read (``libshard.ReadAheadSampler``);
    the same batches. The loader as given when its dataset is not over the libshard backend."""
    if not isinstance(getattr(loader.dataset, "transfer", None), LibshardTransfer):
        return loader
    batches = _ReadAheadBatches(loader.batch_sampler, loader.dataset, num_workers=loader.num_workers,
                      announce=_announce_rows)
    workers = loader.num_workers > 0
    return torch.utils.data.DataLoader(
        loader.dataset, batch_sampler=batches, num_workers=loader.num_workers,
        prefetch_factor=loader.prefetch_factor if workers else None,
        pin_memory=loader.pin_memory, collate_fn=loader.collate_fn,
        persistent_workers=loader.persistent_workers,
        multiprocessing_context=loader.multiprocessing_context if workers else None,
        worker_init_fn=loader.worker_init_fn)


def _install_loader(batches: str) -> None:
    """speculators' training entry builds its loaders with ``_setup_dataloader``: build its
    DataLoader as it does, then take the C++ batches where :func:`train_loader` proves them."""
    import speculators.train.dataloader as sp_loader

    native = sp_loader._setup_dataloader
    if getattr(native, "_libshard", False):
        return

    def setup(dataset, *args, **kwargs):
        loader = native(dataset, *args, **kwargs)
        return train_loader(dataset, loader.batch_sampler, loader.collate_fn, batches=batches,
                            fallback=lambda: read_ahead_loader(loader))

    setup._libshard = True  # type: ignore[attr-defined]
    sp_loader._setup_dataloader = setup


# Registered by the importable module only: run as `python -m libshard.speculators`, this file is
# also `__main__`, whose classes spawned workers could not unpickle.
if __name__ != "__main__" and BACKEND_NAME not in HiddenStatesBackend.registry:
    HiddenStatesBackend.register(BACKEND_NAME)(LibshardBackend)


def take_sp_size(argv: List[str]) -> Optional[int]:
    """The value of ``--sp-size N`` / ``--sp-size=N`` in ``argv``, removed from it; None when
    absent."""
    for i, arg in enumerate(argv):
        value = None
        if arg == "--sp-size" and i + 1 < len(argv):
            value = argv[i + 1]
            del argv[i:i + 2]
        elif arg.startswith("--sp-size="):
            value = arg.split("=", 1)[1]
            del argv[i]
        if value is not None:
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"--sp-size {value!r}: give a positive integer")
            return int(value)
    return None


def _install_sp_size(sp_size: int) -> None:
    """speculators' training entry sets its process groups up with ``sp_size`` 1
    (``maybe_setup_distributed()``); make it ``maybe_setup_distributed(sp_size=N)``, its
    ``("dp", "sp")`` mesh (groups of N consecutive ranks), so that its batch sampler serves
    data-parallel ranks and :func:`train_loader` gives each SP rank its part."""
    import speculators.train.cli as sp_cli

    native = sp_cli.maybe_setup_distributed

    def setup(*args, **kwargs):
        kwargs["sp_size"] = sp_size
        return native(*args, **kwargs)

    sp_cli.maybe_setup_distributed = setup


def _trainer_has_sp_size() -> bool:
    """Whether speculators' own command line takes ``--sp-size`` (speculators#871)."""
    try:
        from speculators.train.config.resolution import build_parser
        return any("--sp-size" in a.option_strings for a in build_parser()._actions)
    except Exception:  # noqa: BLE001 - an older or newer layout: assume not
        return False


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m libshard.speculators train ARGS...``: speculators' training command line
    (``python -m speculators.train ARGS...``) with the ``libshard`` backend registered, and its
    loaders' batches built in C++ where provably speculators' (:func:`train_loader`;
    ``--libshard-batches auto|cpp|trainer``, taken out before speculators sees the arguments).
    ``--sp-size N``: sequence parallelism over groups of N consecutive ranks; passed on to
    speculators where its command line has it, else taken out here and given to its
    ``maybe_setup_distributed``; each SP rank's batches are its part of the packed row
    (:func:`split_batch_for_sp`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    batches = common.take_batches_option(argv)
    sp_size = None
    if not _trainer_has_sp_size():
        try:
            sp_size = take_sp_size(argv)
        except ValueError as e:
            print(str(e), file=sys.stderr)
            return 2
    if not argv or argv[0] != "train":
        print("usage: python -m libshard.speculators train ARGS...  (speculators' training "
              "arguments; --hidden-states-backend libshard)", file=sys.stderr)
        return 2
    from speculators.train.cli import main as train_main
    from speculators.train.config import TrainConfig

    if batches not in BATCHES:
        print(f"--libshard-batches {batches!r}: give one of {', '.join(BATCHES)}",
              file=sys.stderr)
        return 2
    _install_loader(batches)
    if sp_size is not None and sp_size > 1:
        common.note_once("speculators:sp-size", (
            f"libshard.speculators: --sp-size {sp_size}: this speculators has no sequence-"
            "parallel attention of its own (speculators#871); each SP rank gets its part of the "
            "packed row as #871 splits it"))
        _install_sp_size(sp_size)

    train_main(TrainConfig.resolve(argv[1:]))
    return 0


if __name__ == "__main__":
    from libshard.speculators import main as _main  # the registered module, not this __main__

    sys.exit(_main())
