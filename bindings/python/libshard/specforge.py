"""libshard inside SpecForge's offline EAGLE-3 training (``specforge`` 0.2.0).

SpecForge's ``scripts/prepare_hidden_states.py`` writes ``rows_{g}-{g+2000}/data_{idx}.ckpt``
(``torch.save`` of ``input_ids``, ``loss_mask``, ``aux_hidden_state``, ``hidden_state``). Pack
the directory once (``libshard pack OUT -o OUT.libshard``) and then either

* run SpecForge's own training entry with the same config, ``data.hidden_states_path`` naming the
  libshard dataset::

      python -m libshard.specforge train --config run.yaml [overrides...]
      torchrun --nproc-per-node 8 -m libshard.specforge train --config run.yaml

* or, building the runtime yourself, pass the store and the refs to SpecForge's public entry::

      import libshard.specforge as ls
      runtime = specforge.launch.build_disagg_offline_runtime(
          feature_store=ls.FeatureStore(path), refs=ls.refs(path, max_len=..., ttt_length=...),
          ...)

The refs come in SpecForge's own order (``OfflineManifestReader``: the string sort of the source
paths, ``data_10`` before ``data_2``, taken from the paths the index records), so its sharding
(``randperm(seed + epoch)``, ``[rank::world]``), normalization and collate see the same samples
in the same places, and the batches are the same bytes. Opening reads the index: no per-sample
file is opened at startup, and the vocabulary count SpecForge makes when the config has no
``model.vocab_mapping_path`` reads only ``input_ids`` and ``loss_mask``.

Importing this module imports SpecForge's data plane (``specforge.runtime``); ``import libshard``
alone never does.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

try:
    from specforge.runtime.contracts import SCHEMA_VERSION, FeatureHandle, SampleRef
    from specforge.runtime.data_plane import feature_store as _sf_store
    from specforge.runtime.data_plane import offline_reader as _sf_reader
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "libshard.specforge needs SpecForge 0.2: `pip install --no-deps specforge==0.2.0` and "
        "`pip install libshard[specforge]` (its data-path dependencies; neither replaces your "
        f"torch nor pulls sglang). Cause: {e}") from e

import torch

from . import _core
from ._dataset import Dataset

PathLike = Union[str, "os.PathLike[str]"]

#: ``SampleRef.feature_store_uri`` of a libshard sample: ``libshard://<abs dataset path>#<index>``.
URI_SCHEME = "libshard://"
_FEATURE_SUFFIXES = _sf_reader._FEATURE_SUFFIXES
_OFFLINE_EAGLE3_KEYS = _sf_reader._OFFLINE_EAGLE3_KEYS

__all__ = ["FeatureStore", "URI_SCHEME", "count_effective_feature_tokens", "install",
           "is_dataset", "main", "order", "refs"]


def is_dataset(path: PathLike) -> bool:
    """True when ``path`` is a libshard dataset directory (it has a manifest and an index)."""
    p = os.fspath(path)
    return (os.path.isdir(p) and os.path.isfile(os.path.join(p, "manifest.json"))
            and not any(n.endswith(_FEATURE_SUFFIXES) for n in _top_names(p)))


def _top_names(p: str) -> List[str]:
    try:
        return os.listdir(p)
    except OSError:
        return []


def order(data: Union[PathLike, Dataset]) -> List[int]:
    """The dataset's sample indices in SpecForge's order: the samples packed from ``.ckpt`` /
    ``.ckpt.gz`` files (the ones SpecForge's reader lists), sorted as SpecForge sorts their paths
    (Python's string sort; the paths share the source directory, so their relative paths sort
    alike). A dataset none of whose samples came from such a file (``libshard.Writer`` keys) is
    served in its own order."""
    ds = data if isinstance(data, Dataset) else Dataset(data, verify=False)
    sources = _core.dataset_sources(ds._core)
    picked = [i for i, s in enumerate(sources) if s.endswith(_FEATURE_SUFFIXES)]
    if not picked:
        return list(range(len(sources)))
    # abspath(join(root, rel)) for one root sorts as the relative paths do ("/" sorts as itself).
    picked.sort(key=lambda i: sources[i])
    return picked


def refs(path: PathLike, *, run_id: str = "offline", strategy: str = "eagle3",
         target_model_version: str = "unknown", tokenizer_version: str = "unknown",
         feature_keys: Sequence[str] = _OFFLINE_EAGLE3_KEYS, ttt_length: int = 7,
         max_len: int = 2048, target_repr: Optional[str] = "hidden_state",
         limit: Optional[int] = None) -> List[SampleRef]:
    """The ``SampleRef``s ``OfflineManifestReader(path, ...).read(limit)`` gives for the source
    directory, for the packed dataset at ``path``: the same ids, keys, strategy and metadata, in the
    same order (:func:`order`); only ``feature_store_uri`` names the libshard sample instead of
    the file. Reads the index only."""
    root = os.path.abspath(os.fspath(path))
    ds = Dataset(root, verify=False)
    schema = ds.schema
    missing = [k for k in feature_keys if k not in schema]
    if missing:
        raise KeyError(f"{root}: the dataset has no fields {missing} (it has {schema.names}); "
                       "SpecForge's offline EAGLE-3 reader needs "
                       f"{list(_OFFLINE_EAGLE3_KEYS)}")
    keys = tuple(feature_keys)
    out: List[SampleRef] = []
    for index, sample in enumerate(order(ds)):
        if limit is not None and index >= limit:
            break
        out.append(SampleRef(
            sample_id=f"{run_id}:{index:08d}",
            run_id=run_id,
            source_task_id=None,
            feature_store_uri=f"{URI_SCHEME}{root}#{sample}",
            feature_keys={k: k for k in keys},
            feature_specs={},
            strategy=strategy,
            schema_version=SCHEMA_VERSION,
            target_model_version=target_model_version,
            tokenizer_version=tokenizer_version,
            num_tokens=0,
            estimated_bytes=0,
            metadata={
                "format": f"offline_{strategy}",
                "target_repr": target_repr,
                "schema_version": SCHEMA_VERSION,
                "ttt_length": ttt_length,
                "max_len": max_len,
                "file_index": index,
            },
        ))
    return out


def _parse_uri(uri: str) -> Tuple[str, int]:
    body = uri[len(URI_SCHEME):]
    path, sep, index = body.rpartition("#")
    if not sep or not index.isdigit():
        raise ValueError(f"not a libshard sample URI: {uri!r} (want libshard://PATH#INDEX)")
    return path, int(index)


class FeatureStore(_sf_store.FeatureStore):
    """SpecForge's ``FeatureStore`` serving the samples of libshard datasets.

    ``get(ref)`` of a ``libshard://`` ref (from :func:`refs`) reads the sample from its shard (one
    read, checked against its checksum when ``verify``) and returns the requested features by
    their raw keys, as ``LocalFeatureStore`` does for a ``file://`` ref. Every other ref
    (``file://``, ``mem://``) and ``put`` go to a ``LocalFeatureStore``, so this store can stand
    wherever SpecForge makes one. Datasets are opened on first use; thread-safe (SpecForge's
    loader fetches from a thread pool).

    Args:
      path: a dataset to open now (others open when a ref names them); None to open lazily.
      store_id: the id of the ``LocalFeatureStore`` behind it.
      verify: check each sample's checksum when it is read.
    """

    def __init__(self, path: Optional[PathLike] = None, *, store_id: Optional[str] = None,
                 verify: bool = True, **local_options: Any) -> None:
        self._local = _sf_store.LocalFeatureStore(store_id, **local_options)
        self.store_id = self._local.store_id
        self._verify = verify
        self._lock = threading.Lock()
        self._datasets: Dict[str, Dataset] = {}
        self._leases: Dict[str, FeatureHandle] = {}
        self._counter = itertools.count()
        if path is not None:
            self.dataset(path)

    def dataset(self, path: PathLike) -> Dataset:
        """The open :class:`libshard.Dataset` at ``path`` (opened on first use)."""
        key = os.path.abspath(os.fspath(path))
        with self._lock:
            ds = self._datasets.get(key)
            if ds is None:
                ds = Dataset(key, verify=self._verify, metadata=False)
                self._datasets[key] = ds
            return ds

    def put(self, tensors: Dict[str, torch.Tensor], *, sample_id: str,
            metadata: Dict[str, Any]) -> SampleRef:
        return self._local.put(tensors, sample_id=sample_id, metadata=metadata)

    def get(self, sample_ref: SampleRef, *, device: "torch.device | str" = "cpu",
            names: Optional[List[str]] = None) -> Tuple[Dict[str, torch.Tensor], FeatureHandle]:
        uri = sample_ref.feature_store_uri
        if not uri.startswith(URI_SCHEME):
            return self._local.get(sample_ref, device=device, names=names)
        path, index = _parse_uri(uri)
        wanted = names or list(sample_ref.feature_keys.keys())
        raw = self.dataset(path)[index]
        tensors = {}
        for n in wanted:
            raw_key = sample_ref.feature_keys.get(n, n)
            raw_key = raw_key.split("/")[-1] if "/" in raw_key else raw_key
            if raw_key not in raw:
                raise KeyError(f"{path}: sample {index} ({self.dataset(path).source(index)}) has "
                               f"no field {raw_key!r} for feature {n!r}")
            tensors[n] = raw[raw_key]
        handle = FeatureHandle(sample_id=sample_ref.sample_id, generation=0,
                               lease_token=f"{sample_ref.sample_id}:0:{next(self._counter)}")
        with self._lock:
            self._leases[handle.lease_token] = handle
        try:
            if str(device) != "cpu":
                tensors = {k: v.to(device) for k, v in tensors.items()}
        except Exception:
            self.release(handle, reason="materialization_failed")
            raise
        return tensors, handle

    def release(self, handle: FeatureHandle, *, reason: str = "consumed") -> None:
        with self._lock:
            mine = self._leases.pop(handle.lease_token, None)
        if mine is None:
            self._local.release(handle, reason=reason)

    def abort(self, sample_id: str, *, reason: str = "aborted") -> None:
        self._local.abort(sample_id, reason=reason)

    def gc(self, *, now: Optional[float] = None) -> Dict[str, int]:
        return self._local.gc(now=now)

    def health(self) -> Dict[str, Any]:
        h = dict(self._local.health())
        with self._lock:
            h["active_leases"] = h.get("active_leases", 0) + len(self._leases)
            h["libshard_datasets"] = sorted(self._datasets)
        return h


def count_effective_feature_tokens(hidden_states_path: PathLike, *,
                                   max_length: Optional[int] = None,
                                   target_vocab_size: Optional[int] = None) -> Counter:
    """SpecForge's ``count_effective_feature_tokens`` (the vocabulary count behind its draft vocab
    mapping) over a libshard dataset, reading only ``input_ids`` and ``loss_mask`` (a few bytes
    per token instead of the whole sample). Same counts, the same errors, and the same insertion
    order of the ``Counter`` (SpecForge's draft vocabulary breaks ties between equal counts by
    it): tokens by the first sample, in SpecForge's order (:func:`order`), that holds them, then
    by token id, as SpecForge's file-by-file pass inserts them."""
    from ._loader import Loader

    path = os.fspath(hidden_states_path)
    ds = Dataset(path, verify=False)
    if len(ds) == 0:
        raise ValueError(f"no offline feature samples in {path!r}")
    missing = [n for n in ("input_ids", "loss_mask") if n not in ds.schema]
    if missing:
        raise KeyError(f"{path} cannot derive an EAGLE vocab mapping; missing {missing}")
    position = {sample: pos for pos, sample in enumerate(order(ds))}
    totals: Dict[int, int] = {}
    first: Dict[int, int] = {}
    loader = Loader(ds, batch_size=256, shuffle=False, fields=["input_ids", "loss_mask"],
                    metadata=False, return_index=True, pin_memory=False,
                    memory_budget="256MiB")
    big = len(position)
    try:
        for batch in loader:
            ids_parts, pos_parts = [], []
            for sample in batch:
                index = int(sample["__index__"])
                if index not in position:
                    continue  # not a sample SpecForge's reader would list
                pos = position[index]
                input_ids = sample["input_ids"].reshape(-1)
                loss_mask = sample["loss_mask"].reshape(-1)
                if input_ids.numel() != loss_mask.numel():
                    raise ValueError(f"{path} sample {index} ({ds.source(index)}) has "
                                     f"{input_ids.numel()} input ids but {loss_mask.numel()} "
                                     "loss-mask entries")
                if max_length is not None:
                    input_ids = input_ids[:max_length]
                    loss_mask = loss_mask[:max_length]
                selected = input_ids[loss_mask.to(dtype=bool)]
                if selected.numel() == 0:
                    continue
                # SpecForge checks the sample's sorted unique ids in order: a negative id first.
                lowest = int(selected.min())
                if lowest < 0:
                    raise ValueError(f"{path} sample {index} ({ds.source(index)}) contains "
                                     f"negative token id {lowest}")
                if target_vocab_size is not None and int(selected.max()) >= target_vocab_size:
                    bad = int(selected[selected >= target_vocab_size].min())
                    raise ValueError(f"{path} sample {index} ({ds.source(index)}) contains token "
                                     f"id {bad}, outside target vocab size {target_vocab_size}")
                ids_parts.append(selected)
                pos_parts.append(torch.full((selected.numel(),), pos, dtype=torch.long))
            if not ids_parts:
                continue
            # One unique per batch: the count of each id and the first sample (in SpecForge's
            # order) that holds it.
            ids = torch.cat(ids_parts)
            pos = torch.cat(pos_parts)
            uniq, inverse, freq = torch.unique(ids, return_inverse=True, return_counts=True)
            first_pos = torch.full((uniq.numel(),), big, dtype=torch.long).scatter_reduce(
                0, inverse, pos, reduce="amin")
            for token_id, frequency, p in zip(uniq.tolist(), freq.tolist(), first_pos.tolist()):
                totals[token_id] = totals.get(token_id, 0) + frequency
                if p < first.get(token_id, big):
                    first[token_id] = p
    finally:
        loader.close()
    counts: Counter = Counter()
    for token_id in sorted(totals, key=lambda t: (first[t], t)):
        counts[token_id] = totals[token_id]
    return counts


# -- SpecForge's own `specforge train`, reading libshard datasets -------------------------------
_installed = False


def install() -> None:
    """Makes SpecForge's training entry read libshard datasets where its config names one
    (``data.hidden_states_path``, ``data.eval_hidden_states_path``); other paths keep SpecForge's
    own reader. SpecForge 0.2 has no plug-in hook for its reader, so this replaces, in this
    process, the four names its offline path looks up: ``OfflineManifestReader`` and
    ``list_feature_files`` (``specforge.runtime.data_plane.offline_reader``; the latter gives the
    shard files for a dataset, so the vocabulary map's dataset identity stats those),
    ``count_effective_feature_tokens`` (``specforge.training.vocab_mapping``) and the
    ``LocalFeatureStore`` that ``specforge.launch`` creates. Idempotent."""
    global _installed
    if _installed:
        return
    import specforge.launch as sf_launch
    import specforge.training.vocab_mapping as sf_vocab

    native_reader = _sf_reader.OfflineManifestReader
    native_list = _sf_reader.list_feature_files
    native_count = sf_vocab.count_effective_feature_tokens

    class OfflineManifestReader(native_reader):  # type: ignore[misc, valid-type]
        def __iter__(self):
            if not is_dataset(self.hidden_states_path):
                yield from super().__iter__()
                return
            yield from refs(self.hidden_states_path, run_id=self.run_id, strategy=self.strategy,
                            target_model_version=self.target_model_version,
                            tokenizer_version=self.tokenizer_version,
                            feature_keys=self.feature_keys, ttt_length=self.ttt_length,
                            max_len=self.max_len, target_repr=self.target_repr)

    def list_feature_files(path):
        if is_dataset(path):
            return [os.path.abspath(os.path.join(path, s["path"]))
                    for s in Dataset(path, verify=False).shards]
        return native_list(path)

    def count_tokens(hidden_states_path, **kw):
        if is_dataset(hidden_states_path):
            return count_effective_feature_tokens(hidden_states_path, **kw)
        return native_count(hidden_states_path, **kw)

    class LocalFeatureStore(FeatureStore):
        def __init__(self, store_id=None, **kw):
            super().__init__(None, store_id=store_id, **kw)

    _sf_reader.OfflineManifestReader = OfflineManifestReader
    _sf_reader.list_feature_files = list_feature_files
    sf_vocab.count_effective_feature_tokens = count_tokens
    sf_launch.LocalFeatureStore = LocalFeatureStore
    _installed = True


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m libshard.specforge train --config CONFIG [...]``: SpecForge's own command line
    (``specforge.cli.main``, the same arguments) after :func:`install`. A launch that would start
    worker processes itself runs them as ``python -m libshard.specforge`` too."""
    install()
    import specforge.cli as sf_cli
    import specforge.launch_plan as sf_plan

    native_plan = sf_plan.build_launch_plan

    def build_launch_plan(cfg, **kw):
        kw.setdefault("worker_prefix", (sys.executable, "-m", "libshard.specforge"))
        return native_plan(cfg, **kw)

    sf_plan.build_launch_plan = build_launch_plan
    return int(sf_cli.main(argv) or 0)


if __name__ == "__main__":
    from libshard.specforge import main as _main  # one copy of the module, not this __main__

    sys.exit(_main())
