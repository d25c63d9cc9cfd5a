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
import json
import os
import sys
import threading
from collections import Counter
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

try:
    from specforge.runtime.contracts import SCHEMA_VERSION, FeatureHandle, SampleRef, TrainBatch
    from specforge.runtime.data_plane import feature_dataloader as _sf_loader
    from specforge.runtime.data_plane import feature_store as _sf_store
    from specforge.runtime.data_plane import offline_reader as _sf_reader
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "libshard.specforge needs SpecForge 0.2: `pip install --no-deps specforge==0.2.0` and "
        "`pip install libshard[specforge]` (its data-path dependencies; neither replaces your "
        f"torch nor pulls sglang). Cause: {e}") from e

import torch

from . import _core
from . import _trainer_common as common
from ._dataset import Dataset

PathLike = Union[str, "os.PathLike[str]"]

#: ``SampleRef.feature_store_uri`` of a libshard sample: ``libshard://<abs dataset path>#<index>``.
URI_SCHEME = "libshard://"
_FEATURE_SUFFIXES = _sf_reader._FEATURE_SUFFIXES
_OFFLINE_EAGLE3_KEYS = _sf_reader._OFFLINE_EAGLE3_KEYS

__all__ = ["FeatureDataLoader", "FeatureStore", "URI_SCHEME", "USP_RULE",
           "count_effective_feature_tokens", "install", "is_dataset", "main", "order", "refs",
           "sequence_parallel", "sp_overrides", "usp_features", "usp_layout"]


def is_dataset(path: PathLike) -> bool:
    """True when ``path`` is a libshard dataset directory (it has a manifest and an index), or
    an ``s3://`` URL (SpecForge's own reader reads local files only)."""
    p = os.fspath(path)
    if common.is_url(p):
        return True
    return (os.path.isdir(p) and os.path.isfile(os.path.join(p, "manifest.json"))
            and not any(n.endswith(_FEATURE_SUFFIXES) for n in _top_names(p)))


def _top_names(p: str) -> List[str]:
    try:
        return os.listdir(p)
    except OSError:
        return []


def order(data: Union[PathLike, Dataset], *, cache: Optional[PathLike] = None,
          cache_size: Union[int, str, None] = None) -> List[int]:
    """The dataset's sample indices in SpecForge's order: the samples packed from ``.ckpt`` /
    ``.ckpt.gz`` files (the ones SpecForge's reader lists), sorted as SpecForge sorts their paths
    (Python's string sort; the paths share the source directory, so their relative paths sort
    alike). A dataset none of whose samples came from such a file (``libshard.Writer`` keys) is
    served in its own order."""
    ds = data if isinstance(data, Dataset) else Dataset(common.location(data), verify=False,
                                                        cache=cache, cache_size=cache_size)
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
         limit: Optional[int] = None, cache: Optional[PathLike] = None,
         cache_size: Union[int, str, None] = None) -> List[SampleRef]:
    """The ``SampleRef``s ``OfflineManifestReader(path, ...).read(limit)`` gives for the source
    directory, for the packed dataset at ``path`` (a directory, or an ``s3://`` URL read through
    the node-local ``cache`` as :func:`libshard.open` does): the same ids, keys, strategy and
    metadata, in the same order (:func:`order`); only ``feature_store_uri`` names the libshard
    sample instead of the file. Reads the index only. ``libshard.InvalidArgumentError`` (a
    ``ValueError``, also a ``KeyError``) naming the fields and the dataset when it lacks one
    SpecForge's reader needs."""
    root = common.location(path)
    ds = Dataset(root, verify=False, cache=cache, cache_size=cache_size)
    common.require_fields(ds, list(feature_keys), "SpecForge's offline EAGLE-3 reader",
                          "its samples")
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
        A directory or an ``s3://`` URL.
      store_id: the id of the ``LocalFeatureStore`` behind it.
      verify: check each sample's checksum when it is read.
      cache, cache_size: for ``s3://`` datasets, the node-local cache directory and its bound
        (as :func:`libshard.open`).
      read_ahead: the settings of the read-ahead (``libshard.Dataset(read_ahead=...)``) that
        :class:`FeatureDataLoader` starts when SpecForge's own collate runs: it tells the
        dataset the refs' order, and ``get`` is then served from memory already read.
        Without a ``memory_budget`` there, the loader sizes it to the batches its fetch
        threads hold and two more (512 MiB to 8 GiB).
    """

    def __init__(self, path: Optional[PathLike] = None, *, store_id: Optional[str] = None,
                 verify: bool = True, cache: Optional[PathLike] = None,
                 cache_size: Union[int, str, None] = None,
                 read_ahead: Optional[Dict[str, Any]] = None, **local_options: Any) -> None:
        self._local = _sf_store.LocalFeatureStore(store_id, **local_options)
        self.store_id = self._local.store_id
        self._verify = verify
        self._open_kwargs = common.open_kwargs(cache, cache_size)
        self._open_kwargs["read_ahead"] = read_ahead
        self._lock = threading.Lock()
        self._datasets: Dict[str, Dataset] = {}
        self._leases: Dict[str, FeatureHandle] = {}
        self._counter = itertools.count()
        if path is not None:
            self.dataset(path)

    def dataset(self, path: PathLike) -> Dataset:
        """The open :class:`libshard.Dataset` at ``path`` (opened on first use)."""
        key = common.location(path)
        with self._lock:
            ds = self._datasets.get(key)
            if ds is None:
                ds = Dataset(key, verify=self._verify, metadata=False, **self._open_kwargs)
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
                raise common.missing_field(
                    f"{path}: sample {index} ({self.dataset(path).source(index)})", [raw_key],
                    raw, f"the ref {sample_ref.sample_id} asks for it as the feature {n!r}")
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
                                   target_vocab_size: Optional[int] = None,
                                   cache: Optional[PathLike] = None,
                                   cache_size: Union[int, str, None] = None) -> Counter:
    """SpecForge's ``count_effective_feature_tokens`` (the vocabulary count behind its draft vocab
    mapping) over a libshard dataset, reading only ``input_ids`` and ``loss_mask`` (a few bytes
    per token instead of the whole sample). Same counts, the same errors, and the same insertion
    order of the ``Counter`` (SpecForge's draft vocabulary breaks ties between equal counts by
    it): tokens by the first sample, in SpecForge's order (:func:`order`), that holds them, then
    by token id, as SpecForge's file-by-file pass inserts them."""
    from ._loader import Loader

    path = common.location(hidden_states_path)
    ds = Dataset(path, verify=False, cache=cache, cache_size=cache_size)
    if len(ds) == 0:
        raise ValueError(f"no offline feature samples in {path!r}")
    missing = [n for n in ("input_ids", "loss_mask") if n not in ds.schema]
    if missing:
        raise common.missing_field(path, missing, ds.schema.names,
                                   "SpecForge's count_effective_feature_tokens needs them to "
                                   "derive an EAGLE vocab mapping")
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


# -- Sequence parallelism: SpecForge's USP preprocessing from each rank's slice ---------------
#: The split rule of SpecForge's offline EAGLE-3 USP (``attention_backend: usp``):
#: ``OfflineEagle3Dataset.process_data_usp`` (docs/guide/long-context.md).
USP_RULE = "specforge-usp"


def usp_layout(sp_size: Optional[int] = None, sp_rank: Optional[int] = None,
               ring_rank: Optional[int] = None, sp_ring_size: Optional[int] = None
               ) -> Dict[str, int]:
    """This rank's place in its SpecForge SP group: ``sp_rank``, ``sp_size``, ``ring_rank``,
    ``sp_ring_size`` and ``ulysses_size`` (``sp_size // sp_ring_size``). Taken as SpecForge
    takes them (``build_offline_normalizer``, ``OfflineEagle3Dataset``): the rank and size of
    ``specforge.distributed.get_draft_sp_group()`` and of ``get_sp_ring_group()``, where a value
    is not given. ``ValueError`` when a value is missing and SpecForge's process groups are not
    initialized, or when the ranks are not yunchang's ``use_ulysses_low`` layout (the Ulysses
    peers consecutive: ``ring_rank == sp_rank // ulysses_size``), the layout the split rule
    assumes and the one SpecForge's ``init_distributed`` builds."""
    if None in (sp_size, sp_rank, ring_rank, sp_ring_size):
        import torch.distributed as dist
        from specforge.distributed import get_draft_sp_group, get_sp_ring_group

        if not (dist.is_available() and dist.is_initialized()) or get_draft_sp_group() is None:
            raise ValueError("libshard.specforge: give sp_size, sp_rank, ring_rank and "
                             "sp_ring_size, or initialize SpecForge's process groups "
                             "(specforge.distributed.init_distributed) first")
        sp_group, ring_group = get_draft_sp_group(), get_sp_ring_group()
        sp_size = dist.get_world_size(sp_group) if sp_size is None else sp_size
        sp_rank = dist.get_rank(sp_group) if sp_rank is None else sp_rank
        ring_group = sp_group if ring_group is None else ring_group
        if sp_ring_size is None:
            sp_ring_size = dist.get_world_size(ring_group)
        if ring_rank is None:
            ring_rank = dist.get_rank(ring_group)
    sp_size, sp_rank, ring_rank, sp_ring_size = (int(sp_size), int(sp_rank), int(ring_rank),
                                                 int(sp_ring_size))
    if sp_size < 1 or not 0 <= sp_rank < sp_size:
        raise ValueError(f"libshard.specforge: sp_rank={sp_rank} is not a rank of an SP group "
                         f"of sp_size={sp_size}")
    if sp_ring_size < 1 or sp_size % sp_ring_size:
        raise ValueError(f"libshard.specforge: sp_ring_size={sp_ring_size} does not divide "
                         f"sp_size={sp_size}")
    ulysses = sp_size // sp_ring_size
    if ring_rank != sp_rank // ulysses:
        raise ValueError(
            f"libshard.specforge: ring_rank={ring_rank} of sp_rank={sp_rank} (sp_size={sp_size}, "
            f"sp_ring_size={sp_ring_size}) is not yunchang's use_ulysses_low layout "
            f"(ring_rank = sp_rank // {ulysses}), the layout the specforge-usp rule splits by")
    return {"sp_size": sp_size, "sp_rank": sp_rank, "ring_rank": ring_rank,
            "sp_ring_size": sp_ring_size, "ulysses_size": ulysses}


def sequence_parallel(ttt_length: int, sp_size: Optional[int] = None,
                      sp_ring_size: Optional[int] = None) -> "Any":
    """The ``libshard.SequenceParallel`` setting of SpecForge's USP with ``sp_size`` ranks
    (``training.sp_ulysses_size * training.sp_ring_size``) and ``ttt_length``; each rank of a
    ``libshard.Loader(..., sequence_parallel=this, rank=, world_size=)`` reads only its rows.
    The sizes default to SpecForge's process groups (:func:`usp_layout`)."""
    from ._sequence_parallel import SequenceParallel

    if sp_size is None or sp_ring_size is None:
        layout = usp_layout(sp_size=sp_size, sp_ring_size=sp_ring_size)
        sp_size, sp_ring_size = layout["sp_size"], layout["sp_ring_size"]
    return SequenceParallel(int(sp_size), rule=USP_RULE, ttt_length=int(ttt_length),
                            ulysses_size=int(sp_size) // int(sp_ring_size))


def _pad_rows(t: torch.Tensor, dim: int, rows: int) -> torch.Tensor:
    """``t`` with zero rows appended along ``dim`` up to ``rows`` (as ``F.pad``), contiguous."""
    have = t.shape[dim]
    if have == rows:
        return t.contiguous()
    shape = list(t.shape)
    shape[dim] = rows - have
    return torch.cat([t, t.new_zeros(shape)], dim=dim)


def usp_features(sample: Dict[str, Any], *, ttt_length: Optional[int] = None) -> Dict[str, Any]:
    """``OfflineEagle3Dataset.process_data_usp``'s output, bit for bit, from one sample of a
    sequence-parallel ``libshard.Loader`` with the ``specforge-usp`` rule (the rows of this
    rank's slice, and ``sample["__sp__"]``): ``hidden_state`` (from ``aux_hidden_state``) and
    ``target`` (from ``hidden_state``) [1, chunk + ttt, H], ``input_ids``, ``loss_mask`` (the
    sample's last row zeroed where this rank holds it) and ``attention_mask`` [1, chunk + ttt],
    ``position_ids`` [1, chunk] (this rank's global positions); zero rows pad each sequence
    tensor to chunk + ttt. Stored shapes: ids and mask [S] or [1, S], the hidden states
    [1, S, H] (what ``prepare_hidden_states.py`` writes)."""
    from ._sequence_parallel import SP_KEY

    sp = sample.get(SP_KEY)
    if sp is None or sp.get("rule") != USP_RULE:
        raise ValueError("libshard.specforge.usp_features: the sample is not from a Loader with "
                         f"sequence_parallel=SequenceParallel(N, rule={USP_RULE!r}, ...)")
    pad_to, rows = int(sp["pad_to"]), int(sp["stop"]) - int(sp["start"])
    if ttt_length is not None and pad_to != int(sp["chunk"]) + int(ttt_length):
        raise ValueError(f"libshard.specforge.usp_features: the loader's slices overlap by "
                         f"{pad_to - int(sp['chunk'])} rows, not ttt_length={ttt_length}")

    def seq2(name: str) -> torch.Tensor:
        t = sample[name]
        return t.reshape(1, -1) if t.dim() <= 1 else t

    def seq3(name: str) -> torch.Tensor:
        t = sample[name]
        if t.dim() != 3:
            raise ValueError(f"libshard.specforge.usp_features: {name} is {tuple(t.shape)}; "
                             "SpecForge's USP preprocessing slices [1, S, H] hidden states")
        return t

    out: Dict[str, Any] = {}
    out["hidden_state"] = _pad_rows(seq3("aux_hidden_state"), 1, pad_to)
    out["target"] = _pad_rows(seq3("hidden_state"), 1, pad_to)
    out["input_ids"] = _pad_rows(seq2("input_ids"), 1, pad_to)
    mask = seq2("loss_mask")
    last = int(sp["full_length"]) - 1
    if int(sp["start"]) <= last < int(sp["stop"]):
        mask = mask.clone()
        mask[0, last - int(sp["start"])] = 0
    out["loss_mask"] = _pad_rows(mask, 1, pad_to)
    attention = torch.zeros((1, pad_to), dtype=torch.long)
    attention[:, :rows] = 1
    out["attention_mask"] = attention
    begin, count = int(sp["position_begin"]), int(sp["position_count"])
    out["position_ids"] = torch.arange(begin, begin + count, dtype=torch.long).unsqueeze(0)
    return out


def _usp_transform(t: Any) -> Optional[Dict[str, int]]:
    """The settings of ``partial(OfflineEagle3Dataset.process_data_usp, ...)`` (SpecForge's USP
    normalizer, ``build_offline_normalizer(use_usp_preprocess=True)``), or None when ``t`` is
    not that."""
    from functools import partial

    try:
        from specforge.data.preprocessing import OfflineEagle3Dataset
    except ImportError:  # pragma: no cover - SpecForge without its USP preprocessing
        return None
    if not (isinstance(t, partial) and t.func is OfflineEagle3Dataset.process_data_usp
            and not t.args):
        return None
    kw = dict(t.keywords)
    if kw.get("transform") is not None or not set(kw) <= {
            "max_len", "ttt_length", "transform", "sp_rank", "sp_size", "ring_rank",
            "sp_ring_size"} or "max_len" not in kw:
        return None
    out = {"max_len": kw["max_len"], "ttt_length": kw.get("ttt_length", 1),
           "sp_rank": kw.get("sp_rank", 0), "sp_size": kw.get("sp_size", 1),
           "ring_rank": kw.get("ring_rank", 0), "sp_ring_size": kw.get("sp_ring_size", 1)}
    if not all(isinstance(v, int) for v in out.values()) or out["max_len"] < 1:
        return None
    return out


# -- SpecForge's FeatureDataLoader, with its batches built in C++ ------------------------------
#: ``FeatureDataLoader(batches=...)``: "auto" (C++ batches when provably SpecForge's, else its own
#: collate, saying why once), "cpp" (C++ batches or an error saying why not), "trainer" (its own
#: normalizer and collate, as SpecForge's FeatureDataLoader).
BATCHES = ("auto", "cpp", "trainer")
_EAGLE3_RAW_KEYS = ("input_ids", "loss_mask", "aux_hidden_state", "hidden_state")


class FeatureDataLoader(_sf_loader.FeatureDataLoader):
    """SpecForge's ``FeatureDataLoader`` (the same constructor, iteration, ``seek``,
    ``set_epoch`` and ``close``), whose batches of libshard refs are built in C++.

    SpecForge's offline eagle3 path batches with a fixed rule: per sample
    ``normalize_offline_sample(raw, max_len)``, then ``DataCollatorWithPadding``. When the loader
    is given exactly that (the refs are ``libshard://`` samples of one dataset served by a
    :class:`FeatureStore`, ``per_sample_transform`` is ``partial(normalize_offline_sample,
    max_len=M)``, ``collate_fn`` a ``DataCollatorWithPadding`` without sequence parallelism),
    each batch is read ahead in the refs' order (SpecForge's ``randperm(seed + epoch)`` split
    ``[rank::world]``) and built in C++ into pinned memory (``collate='specforge-eagle3'``,
    ``docs/guide/trainers.md``): the same ``TrainBatch`` (ids, keys, dtypes, shapes, bytes,
    metadata), without SpecForge's per-sample Python work. Otherwise it is SpecForge's loader,
    and with ``batches="auto"`` says once why.

    Args (besides SpecForge's):
      batches: "auto" (default), "cpp" or "trainer" (:data:`BATCHES`).
      memory_budget: the C++ loader's pinned arena (read-ahead and batches); "auto": 2 GiB, or
        what two of the order's largest batches need.
    """

    def __init__(self, store: Any, queue: Any = None, *, batches: str = "auto",
                 memory_budget: Union[int, str] = "auto", **kwargs: Any) -> None:
        if batches not in BATCHES:
            raise ValueError(f"batches={batches!r}: give one of {BATCHES}")
        super().__init__(store, queue, **kwargs)
        self.batches = batches
        self.memory_budget = memory_budget

    def _recipe_plan(self, refs: List[SampleRef]) -> Tuple[Optional[Dataset], int, str]:
        """(the dataset, max_len, "") when this loader's batches are provably what
        collate='specforge-eagle3' builds; else (None, 0, why)."""
        from functools import partial

        from specforge.algorithms.eagle3.data import normalize_offline_sample
        from specforge.data.utils import DataCollatorWithPadding

        if not refs:
            return None, 0, "there are no refs"
        if not isinstance(self.store, FeatureStore):
            return None, 0, f"the store is a {type(self.store).__name__}, not libshard's"
        t = self.per_sample_transform
        if not (isinstance(t, partial) and t.func is normalize_offline_sample and not t.args
                and set(t.keywords) == {"max_len"} and isinstance(t.keywords["max_len"], int)
                and t.keywords["max_len"] >= 1):
            return None, 0, ("per_sample_transform is not SpecForge's eagle3 normalizer "
                             "(partial(normalize_offline_sample, max_len=N))")
        c = self.collate_fn
        if not (type(c) is DataCollatorWithPadding and c.sp_degree == 1
                and c.ulysses_degree == 1):
            return None, 0, ("collate_fn is not SpecForge's DataCollatorWithPadding without "
                             "sequence parallelism")
        path = None
        for ref in refs:
            uri = ref.feature_store_uri
            if not uri.startswith(URI_SCHEME):
                return None, 0, f"ref {ref.sample_id} is not a libshard sample ({uri})"
            here = _parse_uri(uri)[0]
            if path is None:
                path = here
            elif here != path:
                return None, 0, "the refs name more than one dataset"
            keys = ref.feature_keys
            for k in _EAGLE3_RAW_KEYS:
                raw = keys.get(k)
                if raw is None or raw.split("/")[-1] != k:
                    return None, 0, (f"ref {ref.sample_id} maps the feature {k!r} to "
                                     f"{raw!r}, not to the field {k!r}")
        return self.store.dataset(path), int(t.keywords["max_len"]), ""

    def _recipe_loader_or_why(self, dataset: Dataset, max_len: int):
        """(this loader's C++ loaders for the recipe, "") or (None, why) when this build cannot
        stream in a given order or the dataset does not fit the recipe (the library's
        message). The loaders are kept across iterations (one arena for every epoch)."""
        from ._core import InvalidArgumentError

        if not common.ordered_loader_available():
            return None, ("this libshard cannot stream in a given order yet "
                          "(libshard.Loader(batch_sampler=...))")
        options = {"collate": "specforge-eagle3", "recipe_len": max_len}
        current = getattr(self, "_libshard_loaders", None)
        if current is None or not current.matches(dataset, fields=None, **options):
            try:
                common.check_recipe(dataset, **options)
            except InvalidArgumentError as e:
                return None, str(e)
        self._libshard_loaders = common.ordered_loaders(
            current, dataset, memory_budget=self.memory_budget, **options)
        return self._libshard_loaders, ""

    def close(self) -> None:
        """SpecForge's ``close``, and the C++ loader's arena freed."""
        loaders = getattr(self, "_libshard_loaders", None)
        if loaders is not None:
            loaders.close()
        super().close()

    def _chunks(self, skip: int) -> List[List[SampleRef]]:
        """The batches of refs an iteration fetches (SpecForge's _iter_refs rule)."""
        refs = self._refs
        chunks = []
        for start in range(skip * self.batch_size, len(refs), self.batch_size):
            chunk = refs[start:start + self.batch_size]
            if self.drop_last and len(chunk) < self.batch_size:
                break
            chunks.append(chunk)
        return chunks

    def _announce(self, chunks: List[List[SampleRef]]) -> None:
        """With SpecForge's own collate: tells the datasets the samples this iteration will
        get, in order, so the store serves them from memory already read
        (libshard.Dataset.prefetch)."""
        if not isinstance(self.store, FeatureStore):
            return
        by_path: Dict[str, List[int]] = {}
        for chunk in chunks:
            for ref in chunk:
                if ref.feature_store_uri.startswith(URI_SCHEME):
                    path, index = _parse_uri(ref.feature_store_uri)
                    by_path.setdefault(path, []).append(index)
        for path, indices in by_path.items():
            ds = self.store.dataset(path)
            if hasattr(ds, "prefetch"):
                ds._default_read_ahead_budget(self._read_ahead_budget(ds, indices))
                ds.prefetch(indices)

    def _read_ahead_budget(self, ds: Dataset, indices: List[int]) -> int:
        """The store's read-ahead budget where its settings give none: the batches SpecForge's
        fetch threads hold at once and two more ahead, at least the Dataset's 512 MiB and at
        most 8 GiB. SpecForge's eagle3 batches are 100-300 MB: the default held one ahead."""
        import numpy as np

        lengths = np.asarray(ds.lengths, dtype=np.int64)
        per_position = ds.total_raw_bytes / max(int(lengths.sum()), 1)
        got = lengths[np.asarray(indices, dtype=np.int64)] if indices else lengths[:0]
        b = max(int(self.batch_size), 1)
        usable = len(got) // b * b
        largest = int(got[:usable].reshape(-1, b).sum(axis=1).max()) if usable else \
            int(got.sum())
        if usable < len(got):
            largest = max(largest, int(got[usable:].sum()))
        need = int((max(self.num_workers, 1) + 2) * largest * per_position * 1.1)
        return min(max(need, 512 << 20), 8 << 30)

    def _usp_plan(self, refs: List[SampleRef]) -> Tuple[Optional[Dataset], Dict[str, int], str]:
        """(the dataset, SpecForge's USP settings, "") when ``per_sample_transform`` is
        SpecForge's USP normalizer (``partial(OfflineEagle3Dataset.process_data_usp, ...)``)
        over ``libshard://`` refs of one dataset: each rank then reads only its slice. (None,
        {}, why) when the transform is that but the refs or the store are not libshard's;
        (None, {}, "") when it is not that transform."""
        settings = _usp_transform(self.per_sample_transform)
        if settings is None:
            return None, {}, ""
        try:
            usp_layout(settings["sp_size"], settings["sp_rank"], settings["ring_rank"],
                       settings["sp_ring_size"])
        except ValueError as e:
            return None, {}, str(e)
        if not refs:
            return None, {}, "there are no refs"
        if not isinstance(self.store, FeatureStore):
            return None, {}, f"the store is a {type(self.store).__name__}, not libshard's"
        path = None
        for ref in refs:
            uri = ref.feature_store_uri
            if not uri.startswith(URI_SCHEME):
                return None, {}, f"ref {ref.sample_id} is not a libshard sample ({uri})"
            here = _parse_uri(uri)[0]
            if path is None:
                path = here
            elif here != path:
                return None, {}, "the refs name more than one dataset"
            keys = ref.feature_keys
            for k in _EAGLE3_RAW_KEYS:
                raw = keys.get(k)
                if raw is None or raw.split("/")[-1] != k:
                    return None, {}, (f"ref {ref.sample_id} maps the feature {k!r} to "
                                      f"{raw!r}, not to the field {k!r}")
        return self.store.dataset(path), settings, ""

    def _iter_usp(self, dataset: Dataset, settings: Dict[str, int]) -> Iterator[TrainBatch]:
        """SpecForge's USP batches, each rank reading only its rows: a sequence-parallel
        ``libshard.Loader`` (rule specforge-usp) in the refs' order, :func:`usp_features` per
        sample (``process_data_usp``'s output, bit for bit), then the loader's own
        ``collate_fn`` (SpecForge's ``DataCollatorWithPadding``)."""
        from ._loader import Loader

        skip, self._seek_batches = self._seek_batches, 0
        chunks = self._chunks(skip)
        for chunk in chunks:
            self._validate_refs(chunk)
        if not chunks:
            return
        order = [[_parse_uri(r.feature_store_uri)[1] for r in chunk] for chunk in chunks]
        n = settings["sp_size"]
        budget = self.memory_budget if self.memory_budget != "auto" else "2GiB"
        loader = Loader(dataset, batch_sampler=order, rank=settings["sp_rank"], world_size=n,
                        sequence_parallel=sequence_parallel(settings["ttt_length"], n,
                                                            settings["sp_ring_size"]),
                        max_len=settings["max_len"], fields=list(_EAGLE3_RAW_KEYS),
                        metadata=False, pin_memory=False, memory_budget=budget)
        self._libshard_usp_loader = loader
        try:
            for chunk, samples in zip(chunks, loader):
                if isinstance(samples, dict):
                    samples = [samples]
                features = [usp_features(s, ttt_length=settings["ttt_length"])
                            for s in samples]
                tensors = self.collate_fn(features)
                non_tensors = [k for k, v in tensors.items() if not isinstance(v, torch.Tensor)]
                if non_tensors:
                    raise TypeError(f"collate_fn returned non-tensors for {non_tensors}")
                if str(self.device) != "cpu":
                    tensors = {k: v.to(self.device) for k, v in tensors.items()}
                yield TrainBatch(
                    sample_ids=[r.sample_id for r in chunk], strategy=self.strategy,
                    tensors=tensors,
                    metadata={"target_repr": chunk[0].metadata.get("target_repr"),
                              "ttt_length": chunk[0].metadata.get("ttt_length")})
        finally:
            #: The sequence-parallel Loader's statistics (bytes read: this rank's slices).
            self.libshard_stats = loader.stats()
            loader.close()
            self._libshard_usp_loader = None

    def _iter_refs(self) -> Iterator[TrainBatch]:
        refs = self._refs
        if self.batches != "trainer":
            usp_dataset, settings, why_usp = self._usp_plan(refs)
            if usp_dataset is not None:
                yield from self._iter_usp(usp_dataset, settings)
                return
            if why_usp:
                if self.batches == "cpp":
                    raise ValueError(f"libshard.specforge.FeatureDataLoader(batches='cpp'): "
                                     f"{why_usp}")
                common.note_once("specforge-usp:" + why_usp, (
                    f"libshard.specforge: SpecForge's own USP preprocessing reads whole samples "
                    f"({why_usp}); each rank reads only its slice with the refs of "
                    "libshard.specforge.refs() served by libshard.specforge.FeatureStore"))
                self._announce(self._chunks(self._seek_batches))
                yield from _sf_loader.FeatureDataLoader._iter_refs(self)
                return
        dataset, max_len, why = (None, 0, "batches='trainer'") if self.batches == "trainer" \
            else self._recipe_plan(refs)
        loader = None
        if dataset is not None:
            loader, why = self._recipe_loader_or_why(dataset, max_len)
        if loader is None:
            if self.batches == "cpp":
                raise ValueError(f"libshard.specforge.FeatureDataLoader(batches='cpp'): {why}")
            if self.batches == "auto":
                common.note_once("specforge:" + why, (
                    f"libshard.specforge: SpecForge's own normalizer and collate build the "
                    f"batches ({why}); batches built in C++ need the refs of "
                    "libshard.specforge.refs() served by libshard.specforge.FeatureStore with "
                    "SpecForge's eagle3 normalizer and DataCollatorWithPadding"))
            self._announce(self._chunks(self._seek_batches))
            yield from super()._iter_refs()
            return
        skip, self._seek_batches = self._seek_batches, 0
        chunks = self._chunks(skip)
        for chunk in chunks:
            self._validate_refs(chunk)
        order = [[_parse_uri(r.feature_store_uri)[1] for r in chunk] for chunk in chunks]
        with loader.open(order) as batches:
            for chunk, batch in zip(chunks, batches):
                batch.pop("__index__", None)
                if str(self.device) != "cpu":
                    batch = {k: v.to(self.device) for k, v in batch.items()}
                yield TrainBatch(
                    sample_ids=[r.sample_id for r in chunk], strategy=self.strategy,
                    tensors=batch,
                    metadata={"target_repr": chunk[0].metadata.get("target_repr"),
                              "ttt_length": chunk[0].metadata.get("ttt_length")})


# -- SpecForge's own `specforge train`, reading libshard datasets -------------------------------
_installed = False


def install(batches: str = "auto") -> None:
    """Makes SpecForge's training entry read libshard datasets where its config names one
    (``data.hidden_states_path``, ``data.eval_hidden_states_path``: a directory or an ``s3://``
    URL, cached under ``$LIBSHARD_CACHE_DIR``); other paths keep SpecForge's own reader.
    SpecForge 0.2 has no plug-in hook for its reader, so this replaces, in this process, the
    names its offline path looks up: ``OfflineManifestReader`` and ``list_feature_files``
    (``specforge.runtime.data_plane.offline_reader``; the latter gives the shard files for a
    dataset, so the vocabulary map's dataset identity stats those),
    ``count_effective_feature_tokens`` (``specforge.training.vocab_mapping``), the
    ``LocalFeatureStore`` that ``specforge.launch`` creates and the ``FeatureDataLoader`` its
    trainer and evaluation loaders are (:class:`FeatureDataLoader`, whose ``batches`` default
    is ``batches`` here: C++ batches where provably SpecForge's). Idempotent (the first call's
    ``batches`` stands)."""
    global _installed
    if _installed:
        return
    if batches not in BATCHES:
        raise ValueError(f"batches={batches!r}: give one of {BATCHES}")
    import specforge.launch as sf_launch
    import specforge.training.trainer as sf_trainer
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
        if common.is_url(path):
            return [_url_identity_file(path)]
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

    class Loader(FeatureDataLoader):
        def __init__(self, store, queue=None, **kw):
            kw.setdefault("batches", batches)
            super().__init__(store, queue, **kw)

    _sf_reader.OfflineManifestReader = OfflineManifestReader
    _sf_reader.list_feature_files = list_feature_files
    sf_vocab.count_effective_feature_tokens = count_tokens
    sf_launch.LocalFeatureStore = LocalFeatureStore
    sf_launch.FeatureDataLoader = Loader
    sf_trainer.FeatureDataLoader = Loader
    _installed = True


def _url_identity_file(url: str) -> str:
    """A local file standing for an ``s3://`` dataset in SpecForge's vocabulary-map identity
    (which stats the feature files): named by the URL and the dataset's manifest, so a dataset
    rewritten under the same URL is another identity."""
    import hashlib
    import tempfile

    ds = Dataset(url, verify=False)
    text = json.dumps({"url": url, "samples": len(ds),
                       "shards": [(s["path"], s.get("size"), s.get("uid")) for s in ds.shards]},
                      sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    folder = os.path.join(tempfile.gettempdir(), "libshard-specforge")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{digest}.json")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return path


_SP_OPTIONS = ("--sp-size", "--sp-ulysses-size", "--sp-ring-size")


def sp_overrides(argv: List[str]) -> List[str]:
    """``argv`` with ``--sp-size N``, ``--sp-ulysses-size U`` and ``--sp-ring-size R`` (also
    ``--opt=V``) taken out and given to SpecForge as its dotted overrides
    ``training.sp_ulysses_size=U training.sp_ring_size=R training.attention_backend=usp``
    (after the dotted overrides given, else last). ``--sp-size N`` alone is N Ulysses ranks; with
    ``--sp-ring-size R``, ``U = N / R``. A degree of 1 adds nothing. ``ValueError`` for a
    value that is not a positive integer or sizes that disagree."""
    argv = list(argv)
    got: Dict[str, int] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, value = arg, None
        if "=" in arg and arg.split("=", 1)[0] in _SP_OPTIONS:
            name, value = arg.split("=", 1)
            del argv[i]
        elif arg in _SP_OPTIONS:
            if i + 1 >= len(argv):
                raise ValueError(f"{arg}: give the number of ranks")
            value = argv[i + 1]
            del argv[i:i + 2]
        else:
            i += 1
            continue
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{name} {value!r}: give a positive integer")
        got[name] = int(value)
    if not got:
        return argv
    ring = got.get("--sp-ring-size", 1)
    if "--sp-ulysses-size" in got:
        ulysses = got["--sp-ulysses-size"]
        if "--sp-size" in got and got["--sp-size"] != ulysses * ring:
            raise ValueError(f"--sp-size {got['--sp-size']} is not --sp-ulysses-size {ulysses} "
                             f"x --sp-ring-size {ring}")
    else:
        total = got.get("--sp-size", ring)
        if total % ring:
            raise ValueError(f"--sp-ring-size {ring} does not divide --sp-size {total}")
        ulysses = total // ring
    if ulysses * ring == 1:
        return argv
    extra = [f"training.sp_ulysses_size={ulysses}", f"training.sp_ring_size={ring}",
             "training.attention_backend=usp"]
    # Next to the dotted overrides already given (argparse takes one run of them), else last.
    given = [k for k, a in enumerate(argv) if "=" in a and not a.startswith("-")]
    at = given[-1] + 1 if given else len(argv)
    return argv[:at] + extra + argv[at:]


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m libshard.specforge train --config CONFIG [...]``: SpecForge's own command line
    (``specforge.cli.main``, the same arguments) after :func:`install`. A launch that would start
    worker processes itself runs them as ``python -m libshard.specforge`` too.
    ``--libshard-batches auto|cpp|trainer`` (taken out before SpecForge sees the arguments):
    how :class:`FeatureDataLoader` batches (default auto: in C++ where provably SpecForge's).
    ``--sp-size N`` / ``--sp-ulysses-size U`` / ``--sp-ring-size R``: SpecForge's USP degree
    (:func:`sp_overrides`: its ``training.sp_*`` overrides and ``attention_backend=usp``); each
    SP rank then reads only its slice of every sample (:class:`FeatureDataLoader`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    batches = common.take_batches_option(argv)
    try:
        argv = sp_overrides(argv)
    except ValueError as e:
        print(str(e), file=sys.stderr)
        return 2
    install(batches)
    import specforge.cli as sf_cli
    import specforge.launch_plan as sf_plan

    native_plan = sf_plan.build_launch_plan

    def build_launch_plan(cfg, **kw):
        kw.setdefault("worker_prefix", (sys.executable, "-m", "libshard.specforge",
                                        f"--libshard-batches={batches}"))
        return native_plan(cfg, **kw)

    sf_plan.build_launch_plan = build_launch_plan
    return int(sf_cli.main(argv) or 0)


if __name__ == "__main__":
    from libshard.specforge import main as _main  # one copy of the module, not this __main__

    sys.exit(_main())
