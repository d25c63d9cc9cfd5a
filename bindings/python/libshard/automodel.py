"""libshard inside NeMo AutoModel's offline speculative-decoding training (``nemo-automodel`` 0.7).

AutoModel's precompute jobs write an offline cache: ``manifest.json`` plus
``shard-NNNNNN.safetensors`` files, each tensor stacked along dim 0 (EAGLE-3:
``precompute_eagle3``; DSpark: its ``dspark_cache``). Its training reads it with
``CachedEagle3Dataset`` / ``CachedDSparkDataset``. Pack the cache once (the layout is detected from
its manifest; ``--from automodel`` says so explicitly)::

    libshard pack /data/eagle3_cache -o /data/eagle3.libshard

and replace the dataset (or the dataloader builder) by the one here::

    from libshard.automodel import CachedEagle3Dataset, build_cached_eagle3_dataloader
    train_dataset = CachedEagle3Dataset("/data/eagle3.libshard")
    loader = build_cached_eagle3_dataloader(path="/data/eagle3.libshard", batch_size=8,
                                            shuffle=True)

Items are AutoModel's own: ``CachedEagle3Dataset(path)[i]`` is what AutoModel's
``CachedEagle3Dataset(cache_dir)[i]`` returns, the same keys in the same order, dtypes, shapes
and bytes (a top-k cache's ``target_probs`` rebuilt at full width by AutoModel's own
``reconstruct_target_probs``, from the stored values and indices). The classes subclass
AutoModel's, and the batches come from AutoModel's own collate function.

What the recipes read from the cache's ``manifest.json`` is in :func:`manifest`: pack records
its keys as the dataset's attributes (``automodel.<key>``), except a key whose JSON exceeds the
64 KiB an attribute holds (``selected_token_ids`` of a large draft vocabulary; pack names it): keep
the cache's ``manifest.json`` (and ``target_embeddings.safetensors``) for the recipe, which reads
them from its ``cache_dir`` as before.

Importing this module imports AutoModel's dataset modules (``nemo_automodel``, torch,
``safetensors``); ``import libshard`` alone never does.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Tuple, Union

try:
    from nemo_automodel.components.datasets.llm import dspark_cache, eagle3_cache
    from nemo_automodel.components.datasets.llm.offline_cache import build_cached_dataloader
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "libshard.automodel needs NeMo AutoModel's offline-cache readers: "
        "`pip install --no-deps nemo-automodel==0.7.0` and `pip install libshard[automodel]` "
        "(what its dataset modules import: transformers, datasets, pillow, safetensors); the "
        f"torch build of your environment is kept. Cause: {e}") from e

import torch

from . import _trainer_common as common
from ._core import InvalidArgumentError
from ._dataset import Dataset

PathLike = Union[str, "os.PathLike[str]"]

__all__ = ["CachedDSparkDataset", "CachedEagle3Dataset", "build_cached_dspark_dataloader",
           "build_cached_eagle3_dataloader", "manifest"]

_PREFIX = "automodel."


def _decode(value: Union[str, int]) -> Any:
    """An attribute back to the manifest's value: integers and strings as they are; the JSON text
    pack recorded for any other value (lists, objects, floats, booleans, null) decoded."""
    if not isinstance(value, str):
        return value
    if value in ("null", "true", "false") or value[:1] in ("[", "{", "-") or value[:1].isdigit():
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def manifest(data: Union[Dataset, PathLike]) -> Dict[str, Any]:
    """The AutoModel cache manifest a dataset was packed from, rebuilt from its attributes (the
    keys pack could record; ``num_samples`` is the dataset's length)."""
    if not isinstance(data, Dataset):
        data = Dataset(data, verify=False, metadata=False)
    attrs = data.attributes
    if attrs.get("source_format") != "automodel":
        raise InvalidArgumentError(f"{data.path} was not packed from a NeMo AutoModel cache (its "
                         f"source_format attribute is {attrs.get('source_format')!r}); pack the "
                         "cache directory with `libshard pack CACHE -o OUT`")
    m = {k[len(_PREFIX):]: _decode(v) for k, v in attrs.items() if k.startswith(_PREFIX)}
    m["num_samples"] = len(data)
    return m


def _manifest_field(data: Dataset, m: Dict[str, Any], name: str, cache_name: str) -> Any:
    """``m[name]`` of the AutoModel manifest ``data`` was packed from, or the libshard error
    naming the field and the dataset (AutoModel's reader raises a bare KeyError)."""
    if name not in m:
        raise common.missing_field(
            f"{data.path} (the {cache_name} cache's manifest.json, recorded as its "
            f"automodel.* attributes)", [name], m,
            f"AutoModel's {cache_name} reader needs it: pack a cache whose manifest has it")
    return m[name]


class _Served:
    """What the two cached datasets share: the packed dataset, its manifest, and the owner's
    per-sample dict (disk keys in the owner's order)."""

    _data: Dataset

    def _open(self, path: PathLike, verify: bool, cache_name: str,
              format_version: int) -> Dict[str, Any]:
        self._data = Dataset(path, verify=verify, metadata=False)
        m = manifest(self._data)
        if m.get("format_version") != format_version:
            raise InvalidArgumentError(
                f"{self._data.path} was packed from a {cache_name} cache of format_version "
                f"{m.get('format_version')!r}; this AutoModel reads {format_version}. Regenerate "
                "the cache with the current AutoModel and pack it again.")
        self.cache_dir = self._data.path
        self.cache_name = cache_name
        self.manifest = m
        self.num_samples = len(self._data)
        self.shard_size = int(_manifest_field(self._data, m, "shard_size", cache_name))
        self._open_handles: Dict[int, Any] = {}
        self._shard_indices = []
        return m

    @property
    def dataset(self) -> Dataset:
        """The underlying :class:`libshard.Dataset`."""
        return self._data

    def __len__(self) -> int:
        return self.num_samples

    def _row(self, index: int) -> Dict[str, torch.Tensor]:
        index = int(index)
        if index < 0:
            index += self.num_samples
        if not 0 <= index < self.num_samples:
            raise IndexError(index)
        item = self._data[index]
        missing = [k for k in self._disk_keys if k not in item]
        if missing:
            raise common.missing_field(
                f"sample {index} of {self._data.path} (packed from {self._data.source(index)})",
                missing, item,
                f"AutoModel's {self.cache_name} reader reads {list(self._disk_keys)}")
        return {k: item[k] for k in self._disk_keys}

    def _require_disk_keys(self) -> None:
        """The fields AutoModel's reader reads from every shard, checked at open against the
        dataset's schema: a missing one is named there, not at the first item."""
        common.require_fields(self._data, self._disk_keys,
                              f"AutoModel's {self.cache_name} reader",
                              "its items (pack the cache AutoModel's precompute wrote)")


class CachedEagle3Dataset(_Served, eagle3_cache.CachedEagle3Dataset):
    """AutoModel's ``CachedEagle3Dataset`` over a libshard dataset packed from its EAGLE-3 cache.

    Args:
      path: the libshard dataset (``libshard pack`` of the cache directory).
      verify: check each sample's checksum when it is read.
    """

    def __init__(self, path: PathLike, *, verify: bool = True) -> None:
        m = self._open(path, verify, eagle3_cache._CACHE_NAME, eagle3_cache._FORMAT_VERSION)
        m = {**eagle3_cache.MANIFEST_DEFAULTS, **m}
        self.manifest = m
        self.draft_vocab_size = int(_manifest_field(self._data, m, "draft_vocab_size",
                                                    self.cache_name))
        self._compressed = eagle3_cache.is_compressed(m.get("target_probs_topk"),
                                                      self.draft_vocab_size)
        self._disk_keys = eagle3_cache._COMMON_KEYS + (
            eagle3_cache._TOPK_PROBS_KEYS if self._compressed else eagle3_cache._LOSSLESS_PROBS_KEYS)
        self._require_disk_keys()
        self._verify = verify

    def __reduce__(self):
        return (CachedEagle3Dataset, (self._data.path,), None, None, None)

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        sample = self._row(index)
        # From here on, AutoModel 0.7's CachedEagle3Dataset.__getitem__.
        if self._compressed:
            sample["target_probs"] = eagle3_cache.reconstruct_target_probs(
                sample.pop(eagle3_cache._TARGET_PROBS_VALUES),
                sample.pop(eagle3_cache._TARGET_PROBS_INDICES),
                self.draft_vocab_size,
            )
        return sample


class CachedDSparkDataset(_Served, dspark_cache.CachedDSparkDataset):
    """AutoModel's ``CachedDSparkDataset`` over a libshard dataset packed from its DSpark cache."""

    def __init__(self, path: PathLike, *, verify: bool = True) -> None:
        m = self._open(path, verify, dspark_cache._CACHE_NAME, dspark_cache._FORMAT_VERSION)
        self.manifest = {**getattr(dspark_cache, "MANIFEST_DEFAULTS", {}), **m}
        dspark_cache.ensure_manifest_complete(self.manifest, self.cache_dir)
        self._disk_keys = dspark_cache.CACHE_KEYS
        self._require_disk_keys()
        self._verify = verify

    def __reduce__(self):
        return (CachedDSparkDataset, (self._data.path,), None, None, None)

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        return self._row(index)


def build_cached_eagle3_dataloader(*, path: PathLike, batch_size: int, shuffle: bool,
                                   num_workers: int = 0, distributed: bool = False):
    """AutoModel's ``build_cached_eagle3_dataloader`` with ``path`` (the packed dataset) in place
    of ``cache_dir``: AutoModel's own DataLoader settings and collate function."""
    return build_cached_dataloader(dataset=CachedEagle3Dataset(path), batch_size=batch_size,
                                   shuffle=shuffle, collate_fn=eagle3_cache._collate_cached,
                                   num_workers=num_workers, distributed=distributed)


def build_cached_dspark_dataloader(*, path: PathLike, batch_size: int, shuffle: bool,
                                   num_workers: int = 0, distributed: bool = False):
    """AutoModel's ``build_cached_dspark_dataloader`` over the packed dataset ``path``."""
    return build_cached_dataloader(dataset=CachedDSparkDataset(path), batch_size=batch_size,
                                   shuffle=shuffle, collate_fn=dspark_cache._collate_cached,
                                   num_workers=num_workers, distributed=distributed)
