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
from typing import Any, Dict, List, Optional, Union

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

from ._dataset import Dataset

PathLike = Union[str, "os.PathLike[str]"]

__all__ = ["EagleOfflineDataCollator", "OfflineDataset", "data_module"]


class OfflineDataset(OfflineSupervisedDataset):
    """ModelOpt's ``OfflineSupervisedDataset`` over a packed libshard dataset.

    ``ds[i]`` is what ``OfflineSupervisedDataset([src_0, src_1, ...])[i]`` returns, where
    ``src_i`` is the file sample ``i`` was packed from (:attr:`dumped_files`, relative to the
    source directory): ``input_ids``, ``base_model_hidden_states``, ``aux_hidden_states``,
    ``attention_mask``, ``loss_mask``, ``labels`` and ``base_hidden_prenorm``. Opening reads the
    index only (no per-sample file); each item is one read from a shard. Pickles by path, so it
    works with ``num_workers > 0`` under any start method.

    Args:
      path: the libshard dataset directory (``libshard pack`` of the dump directory).
      answer_only_loss, tokenizer: as ModelOpt's (the stored ``loss_mask``, or one recovered from
        ``input_ids`` with the tokenizer's registered recovery, else ``ValueError``).
      sample_size: ``-1`` for every sample, else the first ``sample_size`` (ModelOpt's
        ``data.sample_size``).
      verify: check each sample's checksum when it is read.
    """

    def __init__(self, path: PathLike, answer_only_loss: bool = False, tokenizer: Any = None, *,
                 sample_size: int = -1, verify: bool = True) -> None:
        if sample_size == 0 or sample_size < -1:
            raise ValueError("sample_size must be -1 (use all samples) or a positive integer")
        self._data = Dataset(path, verify=verify, metadata=True)
        n = len(self._data)
        self._n = n if sample_size < 0 else min(n, sample_size)
        self._sample_size = sample_size
        # ModelOpt names the file in its errors; the source paths come from the index (no I/O).
        super().__init__(_LazySources(self._data, self._n), answer_only_loss=answer_only_loss,
                         tokenizer=tokenizer)

    def __reduce__(self):
        return (_rebuild, (self._data.path, self.answer_only_loss, self.tokenizer,
                           self._sample_size, self._data._verify))

    @property
    def dataset(self) -> Dataset:
        """The underlying :class:`libshard.Dataset`."""
        return self._data

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


def _rebuild(path, answer_only_loss, tokenizer, sample_size, verify):
    return OfflineDataset(path, answer_only_loss, tokenizer, sample_size=sample_size,
                          verify=verify)


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
