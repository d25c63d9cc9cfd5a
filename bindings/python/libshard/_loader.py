"""``libshard.Loader``: the streaming loader as a Python iterable."""

from __future__ import annotations

import json
import operator
import os
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from . import _core
from ._core import InvalidArgumentError
from ._collate import pack_collate, pad_collate
from ._cuda_release import DeferredRelease
from ._dataset import Dataset, PathLike
from ._order import Order
from ._sampler_order import SamplerOrder, warn_unsplit
from ._sequence_parallel import SequenceParallel, sequence_parallel_options
from ._tensors import INDEX_KEY, make_tensor, sample_to_dict
from ._world import resolve_world

Collate = Union[str, Callable[[List[Dict[str, Any]]], Any], None]


def resolve_rank(rank: Optional[int], world_size: Optional[int]) -> Tuple[int, int]:
    """(rank, world_size) by the one rule of :mod:`libshard._world`: explicit values, else
    torch.distributed when initialised, else RANK/WORLD_SIZE (torchrun), a Slurm array,
    SLURM_PROCID/SLURM_NTASKS, else (0, 1)."""
    rank, world_size, _ = resolve_world(rank, world_size)
    return rank, world_size


def _plain(value: Any) -> int:
    """An integer-like value of a state (a numpy or 0-dim torch integer) as an int, for json."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{type(value).__name__} {value!r} is not a value of a loader state "
                        "(ints, lists, dicts and None)") from None


def _state_text(state: Any) -> str:
    """A state as the library decodes it: the JSON text of what state_dict() returned (or of a
    state dict saved by an earlier libshard). The library checks and names what is wrong."""
    if isinstance(state, str):
        return state
    try:
        return json.dumps(state, default=_plain)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(
            f"load_state_dict needs the dict from state_dict(): {e}") from None


def _map_tensors(obj: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_tensors(v, fn) for v in obj)
    return obj


class Loader:
    """Streams a packed dataset: shuffled, split across ranks, batched, resumable.

    Reads run on C++ threads with io_uring (or a pread pool) and O_DIRECT into one pinned arena of
    ``memory_budget`` bytes; tensors are zero-copy views of it and stay valid after the loader is
    deleted (their arena memory is reused only once every tensor viewing it is gone, so holding
    many batches blocks the loader when the budget is spent).

    Iteration yields, per step:
      * one sample dict when neither ``batch_size`` nor ``max_tokens`` is set;
      * a list of sample dicts per batch otherwise (``batch_size`` samples, or as many as fit in
        ``max_tokens`` tokens);
      * ``collate(list_of_samples)`` when ``collate`` is a callable (also in single-sample mode,
        with a list of one);
      * with ``collate="pad"`` / ``"pack"``, one dict per step, the batch assembled in C++ into one
        region of pinned memory (README, "Batches built in C++"): the same keys, dtypes and shapes
        as :func:`pad_collate` / :func:`pack_collate` with the schema's sequence dimensions give,
        one zero-copy tensor per field plus ``"lengths"`` (and for ``"pack"`` ``"cu_seqlens"``,
        ``"max_seqlen"``), metadata as lists, ``"__index__"`` with ``return_index``.

    Epochs: iterating the loader runs one epoch (``len(loader)`` steps on this rank). The next
    ``iter()`` continues with the next epoch, unless ``set_epoch(e)`` was called in between, which
    selects epoch ``e`` (like ``DistributedSampler.set_epoch``). An iteration left early (``break``)
    is continued by the next ``iter()`` from where it stopped.

    Order: one value, ``order=libshard.Order...`` (:class:`libshard.Order`; the contract of every
    kind is ``docs/ORDER.md``); by default a global permutation per (seed, epoch, order version),
    independent of the world size; rank ``r`` takes global positions r, r+W, ... Every rank gets
    the same number of steps (wrap-around padding, or the tail dropped with ``drop_last``).
    ``state_dict()`` is the library's encoding of the state as plain data (ints, lists, None and
    small dicts); ``load_state_dict`` continues exactly after the last step returned, also with
    another world size, and reads the state dicts of earlier releases.

    Args:
      data: a dataset directory or a :class:`libshard.Dataset`.
      batch_size: samples per step (None: single samples).
      order: the order as one value: ``Order.shuffled(seed=0, version=2)`` (default),
        ``Order.unshuffled()``, ``Order.node_local(nodes=..., node_rank=..., seed=...)``,
        ``Order.sampler(s)``, ``Order.batch_sampler(b)``, ``Order.follow(shuffle_window=...)``.
        The flat keywords below (``shuffle``, ``seed``, ``locality``, ``nodes``, ``node_rank``,
        ``sampler``, ``batch_sampler``, ``follow``, ``shuffle_window``, and ``order`` as an
        integer, the order version) spell the same orders; the library makes one order of both
        and names any keyword given twice or asking for another kind of order.
      shuffle, seed: the order; ``shuffle=False`` reads in dataset order (None: the library's
        default, True and 0).
      sampler, batch_sampler: stream in the order of a torch ``Sampler`` (grouped by
        ``batch_size``, ``drop_last``) or batch sampler (one step per batch) instead of the
        loader's own (``docs/ORDER.md`` §6). Each epoch the loader calls the sampler's
        ``set_epoch(epoch)`` when it has one (for a batch sampler without one, its inner
        ``sampler``'s), then streams its indices through the same engine: memory_budget,
        checks, ``collate``, ``fields`` and the rest apply. The sampler's order is this rank's:
        it is not split across ranks again (a ``DistributedSampler`` already splits it).
        ``shuffle``, ``seed`` and ``order`` do not apply (shuffle in the sampler), and
        ``max_tokens`` is an error. ``state_dict()`` counts the steps of the
        epoch consumed and a digest of its order: ``load_state_dict`` continues with the same
        remaining batches when the sampler gives the same order for the same epoch (seeded, with
        ``set_epoch``), and raises ``InvalidArgumentError`` when it does not.
      order=1|2 (an integer): the shuffle's order version (``docs/ORDER.md``). 2 (default):
        evaluated per position in O(1), so a rank of a large world starts at once; 1: the
        Fisher-Yates order of libshard before order versions (O(n) per epoch), to reproduce an
        earlier run. A state dict carries its order version, and one without ``"order"`` (saved
        by an earlier libshard) resumes onto order 1 exactly.
      rank, world_size: default to torch.distributed when initialised, else torchrun's
        RANK/WORLD_SIZE, else a Slurm array or SLURM_PROCID/SLURM_NTASKS, else 0/1 (the one rule
        of ``libshard/world.h``, shared with the Writer and ``pack --part auto``).
      locality: ``"global"`` (None, the default): each epoch's order is spread over all ranks.
        ``"node"``: the node-local order (order version 3, ``docs/ORDER.md`` §5): the dataset is
        split among the nodes once (by dataset, seed and node count) and each node's ranks read
        only their node's share, shuffled within it every epoch, so a node's cache of an
        ``s3://`` dataset downloads its share once instead of a new random share every epoch.
        Every sample is still served once per epoch across all ranks, and every rank takes the
        same number of steps. A state saved on one node count resumes on another (the rest of
        that epoch is then spread over all ranks; the next epoch is split anew).
      nodes, node_rank: ``locality="node"``: the number of nodes and this process's node.
        None (default): from the launcher (torchrun's GROUP_WORLD_SIZE/GROUP_RANK or
        WORLD_SIZE/LOCAL_WORLD_SIZE, Slurm's SLURM_JOB_NUM_NODES/SLURM_NODEID), else one node.
        Ranks must be numbered node by node (rank = node_rank x ranks per node + local rank),
        as torchrun and srun number them.
      drop_last: drop the tail instead of padding by wrap-around (and drop a last partial batch).
      fields: read only these tensors (less I/O); None reads every field, and an empty list is
        an error (it would select nothing).
      max_len: read only the first ``max_len`` positions along each field's sequence dimension.
      max_tokens: token-budget batches (from the index lengths; no I/O to plan them). The
        budget bounds what a batch occupies: with ``collate="pad"`` the batch's sample count x
        its longest length (the padded tensor), otherwise the summed lengths (``token_budget``
        overrides: ``"sum"`` or ``"padded"``). A sample longer than ``max_tokens`` (after
        ``max_len``) is a batch of its own, the one batch over the budget, unless
        ``oversized="error"``, which refuses such a dataset at once naming the sample (or clip
        with ``max_len``).
      collate: see above.
      bucket_window: length-aware batching: samples of similar length are batched together
        inside consecutive windows of this many samples of the shuffled order, and each
        window's batches are shuffled (``docs/ORDER.md`` §2a). Exact-once,
        equal steps per rank and resume on another world size hold as without it. ``"auto"``
        (default): on (4096 samples) with ``collate="pad"`` and batches, where padding costs GPU
        work, off otherwise; ``None`` or 0: off. Padding shows in ``stats()["padding_share"]``
        and, from the index alone, in ``libshard info --batches``.
      recipe_len: with a batch recipe (``collate="specforge-eagle3"``, ``"modelopt-eagle"``,
        ``"speculators-eagle3"``: a trainer's own batch built in C++, docs/guide/trainers.md),
        the trainer's length setting (SpecForge ``max_len``, ModelOpt ``train_len``,
        speculators ``total_seq_len``). The trainer modules set it for you.
      padding_value, padding_values: with ``collate="pad"``, the value of padded positions, and
        per field name overrides (e.g. ``{"loss_mask": 0, "input_ids": pad_id}``), cast to each
        field's dtype as ``Tensor.fill_`` does (a value the dtype cannot hold is an error).
      memory_budget: bytes of the arena (int or a string such as "2GiB"): reserved at once but
        touched, pinned and registered 64 MiB at a time as the loader first uses it, so any
        budget starts as fast and only what is used becomes resident.
      pin_memory: True (default): page-lock the arena for CUDA, chunk by chunk as it is first
        used, when torch can use it (a CUDA build of torch, a GPU visible); False, or a torch
        without CUDA: never, and no CUDA call is made at all.
      expect: attributes the dataset must have been written with, e.g.
        ``{"target_model": "meta-llama/Llama-3.1-8B-Instruct"}`` (``Dataset.attributes``); a
        dataset made for another model raises ``InvalidArgumentError`` at once.
      cache, cache_size: for an ``s3://`` or ``gs://`` dataset, the node-local cache directory
        (shared by the node's ranks and workers) and its bound (e.g. ``"500GiB"``); see
        :class:`libshard.Dataset`.
      verify: check every byte served (xxh3-64, on worker threads) before handing it out.
        ``True``/``None`` (default): a sample read whole against its checksum; with
        ``fields``/``max_len``, each field served against its own checksum, the field then read
        whole (docs/FORMAT.md §3.9; a dataset written before field checksums reads such samples
        whole instead: ``libshard upgrade DIR`` adds them). ``False``: nothing is checked and
        only the bytes served are read. Shards of another dataset are refused when the dataset
        opens either way.
      on_error: "raise" (default) or "skip" (corrupt samples are skipped and counted in stats).
        A batch that lost every sample (with single samples: each skip) is replaced by a repeat
        of the previous batch's first sample (``stats()["samples_repeated"]``), so every rank
        keeps its step count and DDP ranks stay in step.
      follow: train while the dataset is being written (by a ``libshard.Writer``, ``libshard
        pack`` or the ranks of a multi-rank write; ``data`` is then its directory, which need
        not exist yet): the first epoch serves samples as the writer commits them (every
        ``commit_interval`` seconds of the Writer), each exactly once across ranks, shuffled
        within windows of arrivals growing to ``shuffle_window`` (docs/ORDER.md §7), resumable
        from ``state_dict()``; it ends when the writer closes the dataset, and later epochs
        shuffle the whole dataset. While nothing new arrives, iteration waits, with a warning
        every ``slow_wait_warning_seconds`` (doubling) saying what it waits for. ``len()`` is a
        ``TypeError`` until the dataset is complete. Needs single samples or ``batch_size``
        (not ``max_tokens``); ``bucket_window`` applies from the second epoch.
      shuffle_window: follow mode: arrivals shuffled together, at most (None: 4096).
      sequence_parallel, sp_rule: sequence-parallel loading (docs/guide/long-context.md, "The
        loader"): ``sequence_parallel=N`` cuts the world into groups of N consecutive ranks
        (``world_size`` a multiple of N); every rank of a group gets the same samples in the
        same order (exactly once per group across the groups, resumable and elastic as
        without it), each only its own slice of every field with a sequence dimension, by the
        split rule ``sp_rule`` of the trainer it feeds (``"even"``, ``"specforge-dspark"``,
        ``"specforge-usp"``, ``"torchspec-usp"``). Or one value,
        ``sequence_parallel=libshard.SequenceParallel(N, rule=..., ttt_length=...,
        ulysses_size=...)``. Each sample dict then carries its slice under ``"__sp__"``
        (``libshard.SP_KEY``): ``{"length", "full_length", "start", "stop", "offset",
        "pad_to", "sp_rank", "sp_size", ...}``; the tensors hold rows ``start..stop`` of the
        sample, ``pad_to`` is the row count the trainer pads them to and ``offset`` where its
        position ids start. The arena holds slices: a sample larger than ``memory_budget``
        loads once split. Needs ``collate=None`` (lists of samples).
      return_index: add each sample's dataset index under the key ``"__index__"``.
      device: ``"cuda:N"`` (or a torch.device) to receive tensors on that GPU, copied on a side
        stream one step ahead. Needs CUDA (InvalidArgumentError otherwise).
      metadata: add the sample's non-tensor source entries to the dicts.
      queue_depth, read_size, engine ("auto"/"uring"/"pread"), io_mode ("auto"/"direct"/
        "buffered"), worker_threads, slow_wait_warning_seconds,
        stats_interval_seconds: tuning, see ``libshard/loader.h``.

    Every option is checked, and every ``"auto"`` decided, by the C++ library
    (``LoaderOptionTable`` and ``ResolveLoaderOptions`` in ``libshard/loader.h``), so a C++
    caller with the same options gets the same batches.

    Raises a ``libshard.Error``: ``NotFoundError`` (a ``FileNotFoundError``) for a missing dataset,
    ``InvalidArgumentError`` (a ``ValueError``) for bad options (the message names the option),
    ``ResourceExhaustedError`` (a ``MemoryError``) for a sample larger than ``memory_budget``,
    ``CorruptionError`` / ``IoError`` (an ``OSError``) while iterating.
    """

    def __init__(self, data: Union[PathLike, Dataset], *,
                 batch_size: Optional[int] = None,
                 order: Union[Order, int, None] = None,
                 shuffle: Optional[bool] = None,
                 seed: Optional[int] = None,
                 rank: Optional[int] = None,
                 world_size: Optional[int] = None,
                 drop_last: bool = False,
                 sequence_parallel: Union[int, SequenceParallel, None] = None,
                 sp_rule: str = "even",
                 locality: Optional[str] = None,
                 nodes: Optional[int] = None,
                 node_rank: Optional[int] = None,
                 fields: Optional[Sequence[str]] = None,
                 max_len: Optional[int] = None,
                 max_tokens: Optional[int] = None,
                 collate: Collate = None,
                 bucket_window: Union[int, str, None] = "auto",
                 token_budget: str = "auto",
                 oversized: str = "batch",
                 padding_value: float = 0,
                 padding_values: Optional[Mapping[str, float]] = None,
                 recipe_len: Optional[int] = None,
                 memory_budget: Union[int, str] = "2GiB",
                 verify: Optional[bool] = None,
                 on_error: str = "raise",
                 return_index: bool = False,
                 device: Union[str, torch.device, None] = None,
                 metadata: bool = True,
                 queue_depth: int = 64,
                 read_size: Union[int, str] = "4MiB",
                 engine: str = "auto",
                 io_mode: str = "auto",
                 pin_memory: bool = True,
                 worker_threads: int = 0,
                 slow_wait_warning_seconds: float = 10.0,
                 stats_interval_seconds: float = 0.0,
                 expect: Optional[Dict[str, Union[str, int]]] = None,
                 follow: bool = False,
                 shuffle_window: Optional[int] = None,
                 # -- s3:// datasets (docs/guide/object-storage.md); kept apart for the option table
                 cache: Optional[PathLike] = None,
                 cache_size: Union[int, str, None] = None,
                 # -- a torch Sampler's order (docs/ORDER.md §6)
                 sampler: Any = None,
                 batch_sampler: Any = None) -> None:
        self._cache, self._cache_size = cache, cache_size
        self._rank, self._world_size = resolve_rank(rank, world_size)
        # The order: the group (order=Order...) and the flat keywords of earlier releases, each
        # as given; the library makes them one order (LoaderOptionTable's group "order") and
        # names any keyword that conflicts.
        order_options: Dict[str, Any] = {}
        if isinstance(order, Order):
            order_options["order"] = order.option()
            if order.kind == "caller":
                if sampler is not None or batch_sampler is not None:
                    raise InvalidArgumentError(
                        f"Loader: order={order!r} and sampler=/batch_sampler= both give the "
                        "order; give one")
                sampler, batch_sampler = order._sampler, order._batch_sampler
                if sampler is None and batch_sampler is None:
                    raise InvalidArgumentError(
                        "Loader: a caller's order needs its sampler: use Order.sampler(s) or "
                        "Order.batch_sampler(b)")
        elif order is not None:
            order_options["order"] = order  # the order version of earlier releases
        for name, value in (("shuffle", shuffle), ("seed", seed), ("locality", locality),
                            ("nodes", nodes), ("node_rank", node_rank),
                            ("shuffle_window", shuffle_window)):
            if value is not None:
                order_options[name] = value
        if follow:
            order_options["follow"] = True
        # sampler= / batch_sampler=: the C++ loader takes each epoch's steps from Python.
        self._order: Optional[SamplerOrder] = None
        batched = False
        if sampler is not None or batch_sampler is not None:
            self._order = SamplerOrder(sampler, batch_sampler, batch_size, drop_last)
            # The ranks of a sequence-parallel group share their samples by design: only the
            # data-parallel groups (world_size / degree) need the sampler to split.
            degree = sequence_parallel.degree if isinstance(sequence_parallel, SequenceParallel) \
                else sequence_parallel
            groups = self._world_size // degree if isinstance(degree, int) and degree > 1 \
                and self._world_size % degree == 0 else self._world_size
            warn_unsplit(self._order, groups)
            batched = batch_size is not None or batch_sampler is not None
            batch_size, drop_last = None, False  # the steps are the batches
            if not (isinstance(order, Order) and order.kind == "caller"):
                order_options["caller_order"] = True
        # "pad" / "pack" or a batch recipe: collated in C++; a callable: in Python on the list of
        # samples. The library checks the name (LoaderOptionTable).
        native = not callable(collate)
        self._native = collate if native and isinstance(collate, str) and collate != "none" \
            else None
        self._batched = (batched if self._order is not None
                         else batch_size is not None or max_tokens is not None)
        self._return_index = bool(return_index)
        self._metadata = bool(metadata)
        self._device = self._check_device(device)
        # The user's values, untouched: the library checks them and decides every "auto"
        # (LoaderOptionTable, ResolveLoaderOptions), in the same words for every front end.
        self._options: Dict[str, Any] = {
            **order_options,
            "rank": self._rank, "world_size": self._world_size, "drop_last": drop_last,
            **sequence_parallel_options(sequence_parallel, sp_rule),
            "fields": fields, "max_len": max_len,
            "batch_size": batch_size, "max_tokens": max_tokens,
            "token_budget": token_budget, "oversized": oversized, "bucket_window": bucket_window,
            "collate": collate if native else None,
            "padding_value": padding_value, "padding_values": padding_values,
            "recipe_len": recipe_len,
            "memory_budget": memory_budget, "queue_depth": queue_depth, "read_size": read_size,
            "engine": engine, "io_mode": io_mode, "pin_memory": self._pin_mode(pin_memory),
            "worker_threads": worker_threads, "verify": verify, "on_error": on_error,
            "slow_wait_warning_seconds": slow_wait_warning_seconds,
            "stats_interval_seconds": stats_interval_seconds,
        }
        if collate is pad_collate:
            # Python pads these batches: the "auto" budget and bucket window follow collate="pad".
            self._options["consumer_pads"] = True
        # Which kind of order the options spell, as the library reads them (checked here, before
        # any dataset is opened): follow mode reads a directory being written.
        self._follow = _core.resolve_loader_order(self._options) == "follow"
        self._open_dataset(data)
        self._dataset.check(expect)
        self._collate = None if native else self._make_collate(collate)
        self._core: Optional[_core.Loader] = None
        self._release: Optional[DeferredRelease] = None
        self._core = self._new_core(self._options)
        self._guard_async_copies(self._core)
        # True once this epoch's last step was returned: the next iter() starts the next epoch.
        self._exhausted = False
        if self._order is not None:
            self._give_epoch(self._core.epoch())

    def _open_dataset(self, data: Union[PathLike, Dataset]) -> None:
        cache, cache_size = self._cache, self._cache_size
        if self._follow:
            # The dataset is read by the core's follower; this one gives the schema to Python
            # collates and `loader.dataset`, as the write goes on.
            from ._follow import FollowedDataset
            if isinstance(data, Dataset):
                data = data.path
            if not isinstance(data, (str, os.PathLike)):
                raise InvalidArgumentError(f"Loader(follow=True) needs the dataset's directory, "
                                           f"got {type(data).__name__}")
            self._path = os.fspath(data)
            self._dataset = FollowedDataset(self._path, verify=False, cache=cache,
                                            cache_size=cache_size)
        elif isinstance(data, Dataset):
            self._dataset = data
        elif isinstance(data, (str, os.PathLike)):
            self._dataset = Dataset(data, verify=False, cache=cache, cache_size=cache_size)
        else:
            raise InvalidArgumentError(f"Loader needs a dataset directory or a libshard.Dataset, "
                                       f"got {type(data).__name__}")

    # -- configuration ---------------------------------------------------------------------
    #: Samples per window of length-aware batching when ``bucket_window="auto"`` turns it on
    #: (decided in C++: libshard/loader.h kAutoBucketWindowSize).
    AUTO_BUCKET_WINDOW = 4096

    def _new_core(self, options: Dict[str, Any]) -> "_core.Loader":
        if self._order is not None and options.get("resume"):
            # The position within the chunk of the sampler's epoch that holds it.
            resume = json.loads(_state_text(options["resume"]))
            resume["position"], _ = self._order.begin(int(resume["epoch"]),
                                                      int(resume["position"]))
            options = {**options, "resume": json.dumps(resume)}
        if self._follow:
            from ._follow import dataset_settings
            cache_dir, cache_size = dataset_settings(self._cache, self._cache_size)
            core = _core.Loader.follow(self._path, options, False, cache_dir, cache_size)
        else:
            core = _core.Loader(self._dataset._core, options)
        core.set_metadata(self._metadata)
        return core

    def _make_collate(self, collate: Callable[[List[Dict[str, Any]]], Any]
                      ) -> Callable[[List[Dict[str, Any]]], Any]:
        """A Python collate: the library's pad/pack functions get the schema's sequence
        dimensions; any other callable is used as given."""
        dataset = self._dataset  # followed: its schema exists once the first sample does
        if collate is pad_collate:
            return lambda s: pad_collate(s, seq_dims=dataset.schema.seq_dims,
                                         length_field=dataset.schema.length_field)
        if collate is pack_collate:
            return lambda s: pack_collate(s, seq_dims=dataset.schema.seq_dims,
                                          length_field=dataset.schema.length_field)
        return collate

    @staticmethod
    def _check_device(device: Union[str, torch.device, None]) -> Optional[torch.device]:
        if device is None:
            return None
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise InvalidArgumentError(
                f"device {device!r} is not a valid torch device: {e}") from None
        if dev.type == "cpu":
            return None
        if dev.type != "cuda":
            raise InvalidArgumentError(f"device must be 'cpu' or 'cuda:N', got {device!r}")
        if not torch.cuda.is_available():
            raise InvalidArgumentError(
                f"device={str(device)!r} needs CUDA, but torch.cuda.is_available() is False "
                "(CPU-only torch build or no GPU visible); pass device=None and keep the tensors "
                "on the CPU")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        if dev.index >= torch.cuda.device_count():
            raise InvalidArgumentError(f"device {str(device)!r} does not exist: "
                                       f"{torch.cuda.device_count()} CUDA device(s) visible")
        return dev

    @staticmethod
    def _pin_mode(pin_memory: bool) -> str:
        """"on" where torch can use pinned memory (a CUDA build of torch, a GPU visible), else
        "off": the arena is then never pinned and the C++ side makes no CUDA call at all (not
        even loading the CUDA runtime to learn that it has no driver)."""
        if not pin_memory or torch.version.cuda is None:
            return "off"
        return "on" if torch.cuda.is_available() else "off"

    def _guard_async_copies(self, core: "_core.Loader") -> None:
        """With a pinned arena, memory a tensor leaves behind is reused only once the GPU work
        queued at that moment completed (libshard/_cuda_release.py). The arena is pinned chunk
        by chunk as it is first used, so the guard goes wherever pinning was asked for."""
        if self._options["pin_memory"] == "on":
            self._release = DeferredRelease()
            core.set_release_hook(self._release)

    def _require_core(self) -> "_core.Loader":
        if self._core is None:
            raise InvalidArgumentError("the Loader is closed")
        return self._core

    # -- iteration -------------------------------------------------------------------------
    @property
    def dataset(self) -> Dataset:
        return self._dataset

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def epoch(self) -> int:
        """The epoch the next step comes from."""
        return int(self.state_dict()["epoch"])

    def __len__(self) -> int:
        """Steps (samples or batches) this rank gets per epoch. Follow mode: a ``TypeError``
        while the dataset is being written (the first epoch's length is not known yet)."""
        core = self._require_core()
        if self._order is not None:  # a sampler's epoch is streamed
            return self._order.steps_per_epoch(int(core.batches_per_epoch()))
        if not core.batches_per_epoch_known():
            raise TypeError(
                f"len() of Loader({self._dataset.path!r}, follow=True) is not known while the "
                f"dataset is being written ({core.batches_per_epoch()} steps known so far); it "
                "is known once the writer closes the dataset")
        return int(core.batches_per_epoch())

    def __iter__(self) -> Iterator[Any]:
        core = self._require_core()
        if self._exhausted:
            if self._order is not None:
                self._give_epoch(core.epoch() + 1)
            else:
                core.set_epoch(core.epoch() + 1)
            self._exhausted = False
        steps = self._steps(core)
        if self._device is not None:
            return self._to_device(steps, self._device)
        return steps

    def _steps(self, core: "_core.Loader") -> Iterator[Any]:
        if self._native:
            yield from self._native_steps(core)
            return
        convert = sample_to_dict
        metadata, return_index = self._metadata, self._return_index
        release = self._release
        while True:
            if release is not None:
                release.step()
            raw = self._next_raw(core)
            if raw is None:
                self._exhausted = True
                return
            samples = [convert(s, metadata=metadata, return_index=return_index) for s in raw]
            del raw
            if self._collate is not None:
                step = self._collate(samples)
            elif self._batched:
                step = samples
            else:
                step = samples[0]
            del samples
            yield step
            # Drop this frame's reference before waiting for the next step: the consumer alone
            # decides how long the step's arena memory stays in use.
            del step

    def _next_raw(self, core: "_core.Loader") -> Any:
        """The core's next step; with a sampler, the next chunk of its epoch is given to the core
        when the current one is served (libshard/_sampler_order.py)."""
        raw = core.next()
        while raw is None and self._order is not None:
            chunk = self._order.next_chunk(json.loads(core.state()).get("skipped", []))
            if chunk is None:
                break
            core.set_epoch_steps(self._order.epoch, *chunk)
            raw = core.next()
        return raw

    def _native_steps(self, core: "_core.Loader") -> Iterator[Dict[str, Any]]:
        """Batches collated in C++: one dict per step, keyed as pad_collate / pack_collate."""
        if self._native not in ("pad", "pack"):
            yield from self._recipe_steps(core)
            return
        pack = self._native == "pack"
        return_index = self._return_index
        release = self._release
        pin = torch.cuda.is_available()
        while True:
            if release is not None:
                release.step()
            raw = self._next_raw(core)
            if raw is None:
                self._exhausted = True
                return
            fields, indices, meta, lengths, cu_seqlens, max_seqlen = raw
            del raw
            step: Dict[str, Any] = {name: make_tensor(dtype, shape, mem)
                                    for name, dtype, shape, mem in fields}
            del fields
            lengths_t = torch.tensor(lengths, dtype=torch.int64)
            if pack:
                cu = torch.tensor(cu_seqlens, dtype=torch.int32)
                step["cu_seqlens"] = cu.pin_memory() if pin else cu
                step["lengths"] = lengths_t
                step["max_seqlen"] = int(max_seqlen)
            else:
                step["lengths"] = lengths_t
            for key, values in meta.items():
                if key not in step or key in ("lengths", "cu_seqlens", "max_seqlen"):
                    step[key] = values
            if return_index:
                step[INDEX_KEY] = torch.tensor(indices, dtype=torch.int64)
            yield step
            del step

    def _recipe_steps(self, core: "_core.Loader") -> Iterator[Dict[str, Any]]:
        """Batch recipes (a trainer's own batch, built in C++): one tensor per recipe key, in the
        recipe's order (the trainer modules, e.g. libshard.specforge, nest "a/b" keys and add
        what their trainer adds), then the samples' metadata as lists (``metadata=True``) and
        ``"__index__"`` with ``return_index``."""
        return_index = self._return_index
        release = self._release
        while True:
            if release is not None:
                release.step()
            raw = self._next_raw(core)
            if raw is None:
                self._exhausted = True
                return
            fields, indices, meta = raw[0], raw[1], raw[2]
            del raw
            step: Dict[str, Any] = {name: make_tensor(dtype, shape, mem)
                                    for name, dtype, shape, mem in fields}
            del fields
            for key, values in meta.items():  # empty unless metadata=True
                step.setdefault(key, values)
            if return_index:
                step[INDEX_KEY] = torch.tensor(indices, dtype=torch.int64)
            yield step
            del step

    @staticmethod
    def _to_device(steps: Iterator[Any], device: torch.device) -> Iterator[Any]:
        """Copies step k+1 to ``device`` on a side stream while step k is consumed."""
        stream = torch.cuda.Stream(device=device)

        def stage(step: Any) -> Tuple[Any, Any, Any]:
            with torch.cuda.stream(stream):
                moved = _map_tensors(step, lambda t: t.to(device, non_blocking=True))
                event = torch.cuda.Event()
                event.record(stream)
            return moved, step, event  # keep the CPU step alive until its copy completed

        pending: Optional[Tuple[Any, Any, Any]] = None
        for step in steps:
            staged = stage(step)
            del step
            if pending is not None:
                yield Loader._deliver(pending, device)
            pending = staged
        if pending is not None:
            yield Loader._deliver(pending, device)

    @staticmethod
    def _deliver(staged: Tuple[Any, Any, Any], device: torch.device) -> Any:
        moved, _cpu_step, event = staged
        current = torch.cuda.current_stream(device)
        current.wait_event(event)
        _map_tensors(moved, lambda t: t.record_stream(current))
        event.synchronize()  # the copy is done; the CPU tensors (arena memory) may be released
        return moved

    # -- epochs and checkpoints ------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Makes the next ``iter()`` run epoch ``epoch`` from its beginning."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidArgumentError(f"epoch must be a non-negative integer, got {epoch!r}")
        if self._order is not None:
            self._give_epoch(epoch)
        else:
            self._require_core().set_epoch(epoch)
        self._exhausted = False

    def _give_epoch(self, epoch: int) -> None:
        """With a sampler: ``set_epoch(epoch)`` on it, then its order as epoch ``epoch``'s steps
        (a pending resume of that epoch continues after its position)."""
        core = self._require_core()
        assert self._order is not None
        samples, bounds = self._order.first_chunk(epoch)
        core.set_epoch_steps(epoch, samples, bounds)

    def state_dict(self) -> Dict[str, Any]:
        """Where the stream stands, after the last step returned: the library's encoding of the
        state (``docs/ORDER.md`` §8) as a dict of ints, a list of ints, and ``None`` or small
        dicts; safe to ``torch.save`` in a checkpoint. It holds ``state_version``, ``order`` (the
        order version: 1 or 2 for the shuffled order, 3 node-local, 0 a sampler's), ``epoch``,
        ``position``, ``skipped`` and the fields of its kind of order: ``seed`` and
        ``bucketing`` (how length-aware batching cut the epoch, which a resume inside the epoch
        keeps); ``locality`` (the nodes, ranks per node and steps of a node-local epoch);
        ``steps_digest`` (a sampler's order); ``follow_window`` (the follow epoch); and what the
        stream was made from, which a resume checks: ``identity`` (the dataset's identity
        digest, None when it records none), ``samples`` (its sample count) and ``shuffle``.
        After a completed epoch it points at the start of the next one. The same on every rank
        after the same number of steps."""
        state = json.loads(self._require_core().state(self._exhausted))
        if self._order is not None and not self._exhausted:
            # A sampler's epoch is streamed in chunks (libshard/_sampler_order.py): the position
            # and the skipped samples counted from the epoch's start.
            state = self._order.epoch_state(state)
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues from ``state`` (from ``state_dict()``, possibly of a run with another world
        size): the next step is the one after the last step the saved loader returned. The
        state's order version and seed are this loader's (a ``seed``, ``order`` version or
        ``shuffle_window`` given that differs raises). ``InvalidArgumentError`` (a
        ``ValueError``) naming what differs, with both values, for a state saved from another
        dataset (its ``identity``), one inside an epoch of a dataset whose sample count changed
        since, or one of another ``shuffle`` (``docs/ORDER.md`` §8). A state dict saved by an
        earlier libshard (``state_version`` 1, or none) resumes exactly as it did there: one
        without ``"order"`` onto order 1, the only order it could have used."""
        options = dict(self._options)
        options["resume"] = _state_text(state)
        new_core = self._new_core(options)
        self.close()
        self._core = new_core
        self._guard_async_copies(new_core)
        self._exhausted = False
        if self._order is not None:
            self._give_epoch(new_core.epoch())

    def stats(self) -> Dict[str, Any]:
        """Loader statistics: samples/bytes delivered and read, throughput (GB/s), the consumer's
        wait time and share, reads in flight, engine and direct-I/O status, pinning, arena budget /
        in use / peak, checksum failures and skipped samples."""
        return self._require_core().stats()

    # -- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        """Stops reads in flight and releases the loader. Tensors already returned stay valid."""
        core, self._core = self._core, None
        release, self._release = self._release, None
        if release is not None:
            release.flush()
        if core is not None:
            core.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __repr__(self) -> str:
        if self._core is None:
            steps = "closed"
        elif not self._core.batches_per_epoch_known():
            steps = "unknown (following a write)"
        else:
            steps = str(len(self))
        return (f"libshard.Loader({self._dataset.path!r}, rank={self._rank}, "
                f"world_size={self._world_size}, steps_per_epoch={steps})")
