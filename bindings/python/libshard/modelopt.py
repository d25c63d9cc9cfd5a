"""libshard inside NVIDIA ModelOpt's offline EAGLE training (``nvidia-modelopt`` 0.47).

ModelOpt's ``examples/speculative_decoding`` dumps one ``<conversation_id>.pt`` per conversation
(``input_ids [S]``, ``hidden_states [S, H]``, ``aux_hidden_states [S, 3H]``, optional
``loss_mask [S]``) and trains from them with ``OfflineSupervisedDataset`` +
``EagleOfflineDataCollator(train_len)`` inside a Hugging Face ``Trainer``. Pack the dump once::

    libshard pack /data/dump -o /data/dump.libshard

and replace the dataset (the one line in the example's ``make_eagle_supervised_data_module``)::

    from libshard.modelopt import OfflineDataset
    train_dataset = OfflineDataset("/data/dump.libshard", answer_only_loss=answer_only_loss)
    data_collator = EagleOfflineDataCollator(train_len=train_len)   # ModelOpt's own, unchanged

or take both from :func:`data_module`. Items are ModelOpt's: the same keys, dtypes, shapes and
bytes as ``OfflineSupervisedDataset`` returns for the source files, in the dataset's order (the
natural sort of the source paths; ModelOpt's own ``rglob`` order is the file system's).

Importing this module imports ModelOpt (``modelopt.torch.speculative.eagle.utils``, which imports
``transformers``); ``import libshard`` alone never does.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Optional, Union

try:
    from modelopt.torch.speculative.eagle.utils import (
        IGNORE_TOKEN_ID,
        EagleOfflineDataCollator,
        OfflineSupervisedDataset,
    )
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "libshard.modelopt needs NVIDIA ModelOpt's speculative-decoding package: "
        "`pip install libshard[modelopt]` (nvidia-modelopt 0.47, transformers); the torch build "
        f"of your environment is kept. Cause: {e}") from e

import torch

from . import _trainer_common as common
from ._dataset import Dataset

PathLike = Union[str, "os.PathLike[str]"]

__all__ = ["DataLoader", "EagleOfflineDataCollator", "OfflineDataset", "data_module"]

#: The fields ModelOpt's offline EAGLE reader takes from each dump (loss_mask only with
#: answer_only_loss, where a tokenizer's loss-mask recovery may stand in for it).
NEEDED_FIELDS = ("input_ids", "hidden_states", "aux_hidden_states")
_TRAINER = "ModelOpt's offline EAGLE training (OfflineSupervisedDataset)"


class OfflineDataset(OfflineSupervisedDataset):
    """ModelOpt's ``OfflineSupervisedDataset`` over a packed libshard dataset.

    ``ds[i]`` is what ``OfflineSupervisedDataset([src_0, src_1, ...])[i]`` returns, where
    ``src_i`` is the file sample ``i`` was packed from (:attr:`dumped_files`, relative to the
    source directory): ``input_ids``, ``base_model_hidden_states``, ``aux_hidden_states``,
    ``attention_mask``, ``loss_mask``, ``labels`` and ``base_hidden_prenorm``. Opening reads the
    index only (no per-sample file); each item is one read from a shard. Pickles by path, so it
    works with ``num_workers > 0`` under any start method.

    Args:
      path: the libshard dataset directory (``libshard pack`` of the dump directory), or its
        ``s3://BUCKET/PREFIX`` URL (read through the node-local ``cache``, as
        :func:`libshard.open`).
      answer_only_loss, tokenizer: as ModelOpt's (the stored ``loss_mask``, or one recovered from
        ``input_ids`` with the tokenizer's registered recovery, else ``ValueError``).
      sample_size: ``-1`` for every sample, else the first ``sample_size`` (ModelOpt's
        ``data.sample_size``).
      verify: check each sample's checksum when it is read.
      cache, cache_size: for an ``s3://`` dataset, the node-local cache directory and its bound.
      read_ahead: the settings of the read-ahead :meth:`prefetch` starts (in each process that
        reads; ``libshard.Dataset(read_ahead=...)``).

    Raises ``libshard.InvalidArgumentError`` (a ``ValueError``, also a ``KeyError``) at open,
    naming the field, the dataset and ModelOpt, when the dataset lacks a field
    ModelOpt's reader needs (``loss_mask`` with ``answer_only_loss`` and no tokenizer).
    """

    def __init__(self, path: PathLike, answer_only_loss: bool = False, tokenizer: Any = None, *,
                 sample_size: int = -1, verify: bool = True, cache: Optional[PathLike] = None,
                 cache_size: Union[int, str, None] = None,
                 read_ahead: Optional[Dict[str, Any]] = None) -> None:
        if sample_size == 0 or sample_size < -1:
            raise ValueError("sample_size must be -1 (use all samples) or a positive integer")
        self._open_kwargs = common.open_kwargs(cache, cache_size)
        self._open_kwargs["read_ahead"] = read_ahead
        self._data = Dataset(common.location(path), verify=verify, metadata=True,
                             **self._open_kwargs)
        needed = list(NEEDED_FIELDS)
        if answer_only_loss and tokenizer is None:
            needed.append("loss_mask")
        common.require_fields(self._data, needed, _TRAINER,
                              "answer_only_loss" if "loss_mask" in needed else "its samples")
        n = len(self._data)
        self._n = n if sample_size < 0 else min(n, sample_size)
        self._sample_size = sample_size
        # ModelOpt names the file in its errors; the source paths come from the index (no I/O).
        super().__init__(_LazySources(self._data, self._n), answer_only_loss=answer_only_loss,
                         tokenizer=tokenizer)

    def __reduce__(self):
        return (_rebuild, (self._data.path, self.answer_only_loss, self.tokenizer,
                           self._sample_size, self._data._verify, self._open_kwargs))

    @property
    def dataset(self) -> Dataset:
        """The underlying :class:`libshard.Dataset`."""
        return self._data

    def prefetch(self, indices) -> None:
        """Announces the items that will be asked for, in order, so that they are read ahead
        and served from memory already read (:meth:`libshard.Dataset.prefetch`; in DataLoader
        workers through ``libshard.ReadAheadSampler``, as :class:`DataLoader` does)."""
        self._data.prefetch(indices)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i) -> Dict[str, torch.Tensor]:
        i = int(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"sample {i} out of range for {self._data.path} ({self._n} samples)")
        offline_data = self._data[i]
        # From here on, ModelOpt 0.47's OfflineSupervisedDataset.__getitem__ line for line.
        labels = torch.full_like(offline_data["input_ids"], IGNORE_TOKEN_ID)
        labels[..., :-1] = offline_data["input_ids"][..., 1:]

        if self.answer_only_loss:
            from modelopt.torch.utils.loss_mask import get_loss_mask_recovery

            recovery = get_loss_mask_recovery(self.tokenizer) if self.tokenizer else None
            if "loss_mask" in offline_data:
                loss_mask = offline_data["loss_mask"].to(offline_data["input_ids"].dtype)
            elif recovery is not None:
                loss_mask = recovery.compute(self.tokenizer, offline_data["input_ids"]).to(
                    offline_data["input_ids"].dtype)
            else:
                raise ValueError(
                    f"answer_only_loss=True requires a 'loss_mask' field, but sample {i} of "
                    f"{self._data.path} (packed from {self._data.source(i)}) has none: re-dump "
                    "with --answer-only-loss and pack again, or pass a tokenizer with a "
                    "registered loss-mask recovery.")
        else:
            loss_mask = torch.ones_like(offline_data["input_ids"])

        return {
            "input_ids": offline_data["input_ids"],
            "base_model_hidden_states": offline_data["hidden_states"],
            "aux_hidden_states": offline_data["aux_hidden_states"],
            "attention_mask": torch.ones_like(offline_data["input_ids"]),
            "loss_mask": loss_mask,
            "labels": labels,
            "base_hidden_prenorm": bool(offline_data.get("hidden_states_prenorm", False)),
        }


def _rebuild(path, answer_only_loss, tokenizer, sample_size, verify, open_kwargs=None):
    return OfflineDataset(path, answer_only_loss, tokenizer, sample_size=sample_size,
                          verify=verify, **(open_kwargs or {}))


class _LazySources:
    """``dumped_files`` of an :class:`OfflineDataset`: the source paths, read from the index on
    first use (a list of 10^6 strings is not built unless something asks for it)."""

    def __init__(self, data: Dataset, n: int) -> None:
        self._data = data
        self._n = n
        self._list: Optional[List[str]] = None

    def _all(self) -> List[str]:
        if self._list is None:
            from . import _core

            self._list = list(_core.dataset_sources(self._data._core)[:self._n])
        return self._list

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        return self._all()[i]

    def __iter__(self):
        return iter(self._all())


def data_module(path: PathLike, train_len: int, *, answer_only_loss: bool = False,
                tokenizer: Any = None, sample_size: int = -1) -> Dict[str, Any]:
    """``{"train_dataset", "data_collator"}`` as the offline branch of ModelOpt's
    ``make_eagle_supervised_data_module`` builds them, from a libshard dataset: an
    :class:`OfflineDataset` and ModelOpt's own ``EagleOfflineDataCollator(train_len)``."""
    return {
        "train_dataset": OfflineDataset(path, answer_only_loss, tokenizer,
                                        sample_size=sample_size),
        "data_collator": EagleOfflineDataCollator(train_len=train_len),
    }


# -- ModelOpt's batches built in C++ -------------------------------------------------------------
#: :class:`DataLoader`'s ``batches``: "auto" (C++ batches where provably ModelOpt's, else its own
#: collator, saying why once), "cpp" (C++ batches or ValueError saying why not), "trainer".
BATCHES = ("auto", "cpp", "trainer")
_PRENORM = "hidden_states_prenorm"


class DataLoader:
    """A ``torch.utils.data.DataLoader`` for ModelOpt's offline EAGLE training (the same
    arguments) whose batches are built in C++: when ``dataset`` is an :class:`OfflineDataset`
    and ``collate_fn`` ModelOpt's ``EagleOfflineDataCollator``, each batch the sampler draws is
    read ahead in its order and built as that collator builds it (``collate='modelopt-eagle'``,
    docs/guide/trainers.md): ``input_ids``, ``attention_mask``, ``loss_mask``, ``labels`` and
    ``base_model_outputs`` (``base_model_hidden_states``, ``aux_hidden_states``,
    ``base_hidden_prenorm``), the same keys, dtypes, shapes and bytes. Otherwise (another
    collate, a loss mask recovered by a tokenizer) it is the torch DataLoader it wraps, and with
    ``batches="auto"`` it says once why.

    In a Hugging Face ``Trainer`` (ModelOpt's ``examples/speculative_decoding``), return it from
    ``get_train_dataloader``: ``DataLoader(self.train_dataset, self._train_batch_size,
    sampler=self._get_train_sampler(), collate_fn=self.data_collator)``.

    Args (besides torch's): batches ("auto", "cpp", "trainer"), memory_budget (the C++ loader's
    pinned arena; "auto": 2 GiB, or what two of the order's largest batches need).
    """

    def __init__(self, dataset: Any, batch_size: Optional[int] = 1, shuffle: Optional[bool] = None,
                 sampler: Any = None, batch_sampler: Any = None, num_workers: int = 0,
                 collate_fn: Any = None, *, batches: str = "auto",
                 memory_budget: Union[int, str] = "auto", **kwargs: Any) -> None:
        if batches not in BATCHES:
            raise ValueError(f"batches={batches!r}: give one of {BATCHES}")
        self._torch = torch.utils.data.DataLoader(
            dataset, batch_size=batch_size, shuffle=shuffle, sampler=sampler,
            batch_sampler=batch_sampler, num_workers=num_workers, collate_fn=collate_fn,
            **kwargs)
        self._kwargs = kwargs
        self.batches = batches
        self.memory_budget = memory_budget

    def __getattr__(self, name: str) -> Any:  # dataset, sampler, batch_sampler, batch_size, ...
        if name == "_torch":
            raise AttributeError(name)
        return getattr(self._torch, name)

    def __len__(self) -> int:
        return len(self._torch)

    def _why_not(self) -> str:
        ds, collate = self._torch.dataset, self._torch.collate_fn
        if self.batches == "trainer":
            return "batches='trainer'"
        if not isinstance(ds, OfflineDataset):
            return f"the dataset is a {type(ds).__name__}, not libshard.modelopt.OfflineDataset"
        if type(collate) is not EagleOfflineDataCollator:
            return "collate_fn is not ModelOpt's EagleOfflineDataCollator"
        if not isinstance(collate.train_len, int) or collate.train_len < 1:
            return f"train_len {collate.train_len!r} is not a positive integer"
        schema = ds.dataset.schema
        if ds.answer_only_loss and "loss_mask" not in schema:
            return "answer_only_loss recovers the loss mask with the tokenizer"
        if _PRENORM in schema:
            return f"the dump stores {_PRENORM} as a tensor"
        if not common.ordered_loader_available():
            return ("this libshard cannot stream in a given order yet "
                    "(libshard.Loader(batch_sampler=...))")
        try:
            common.check_recipe(ds.dataset, **self._recipe(ds, collate))
        except ValueError as e:
            return str(e)
        return ""

    def _read_ahead_loader(self) -> Any:
        """The torch DataLoader, its batches announced to the (workers') OfflineDataset ahead
        (libshard.ReadAheadSampler), so ModelOpt's own collate gets items already read."""
        t = self._torch
        if not isinstance(t.dataset, OfflineDataset):
            return t
        from ._read_ahead import ReadAheadSampler

        batches = ReadAheadSampler(t.batch_sampler, t.dataset, num_workers=t.num_workers)
        return torch.utils.data.DataLoader(t.dataset, batch_sampler=batches,
                                           num_workers=t.num_workers, collate_fn=t.collate_fn,
                                           **self._kwargs)

    @staticmethod
    def _recipe(ds: "OfflineDataset", collate: Any) -> Dict[str, Any]:
        fields = list(NEEDED_FIELDS) + (["loss_mask"] if ds.answer_only_loss else [])
        return {"collate": "modelopt-eagle", "recipe_len": collate.train_len, "fields": fields}

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        why = self._why_not()
        if why:
            if self.batches == "cpp":
                raise ValueError(f"libshard.modelopt.DataLoader(batches='cpp'): {why}")
            if self.batches == "auto":
                common.note_once("modelopt:" + why, (
                    f"libshard.modelopt: ModelOpt's own collator builds the batches ({why}); "
                    "batches built in C++ need libshard.modelopt.OfflineDataset with ModelOpt's "
                    "EagleOfflineDataCollator and a stored loss_mask for answer_only_loss"))
            yield from self._read_ahead_loader()
            return
        ds = self._torch.dataset
        order = [[int(i) for i in batch] for batch in self._torch.batch_sampler]
        # One C++ loader kept across iterations (its arena serves every epoch).
        self._loaders = common.ordered_loaders(
            self.__dict__.get("_loaders"), ds.dataset, memory_budget=self.memory_budget,
            metadata=True, **self._recipe(ds, self._torch.collate_fn))
        with self._loaders.open(order) as steps:
            for step in steps:
                yield _modelopt_batch(step)


def _modelopt_batch(step: Dict[str, Any]) -> Dict[str, Any]:
    """A collate='modelopt-eagle' step as EagleOfflineDataCollator returns it: nested
    base_model_outputs, base_hidden_prenorm from the samples' metadata (False when they have
    none; mixed values are ModelOpt's ValueError)."""
    flags = {bool(v) if v is not None else False for v in step.get(_PRENORM, [False])}
    if len(flags) > 1:
        raise ValueError("base_hidden_prenorm is not constant across the batch "
                         f"(got {flags}); do not mix pre-norm and post-norm dumps.")
    tensors = {k: v for k, v in step.items() if isinstance(v, torch.Tensor) and k != "__index__"}
    batch = common.nest(tensors)
    batch["base_model_outputs"]["base_hidden_prenorm"] = flags.pop()
    return batch
