"""``libshard.Order``: the order a :class:`libshard.Loader` serves samples in, as one value.

``Loader(path, order=libshard.Order.node_local(nodes=4))`` says in one argument what the flat
keywords of earlier releases say in several (``shuffle``, ``seed``, ``order=1|2``,
``locality``, ``nodes``, ``node_rank``, ``follow``, ``shuffle_window``, ``sampler``,
``batch_sampler``), which still work. The C++ library makes the order of either spelling
(``LoaderOptionTable``'s group ``"order"``, ``libshard/order.h``): it checks every setting, fills
in the defaults and names the keyword of any spelling that has no order. ``docs/ORDER.md`` is the
contract of each kind.
"""

from __future__ import annotations

from typing import Any, Dict, Optional


class Order:
    """One kind of order and its settings; made by the factories below, e.g.
    ``Order.shuffled(seed=3)``, ``Order.node_local(nodes=4)``, ``Order.sampler(my_sampler)``.

    A setting left at ``None`` takes the library's default (seed 0, order version 2, nodes and
    node rank from the launcher, a shuffle window of 4096).
    """

    __slots__ = ("kind", "settings", "_sampler", "_batch_sampler")

    def __init__(self, kind: str, settings: Optional[Dict[str, Any]] = None, *,
                 sampler: Any = None, batch_sampler: Any = None) -> None:
        self.kind = kind
        self.settings = {k: v for k, v in (settings or {}).items() if v is not None}
        self._sampler = sampler
        self._batch_sampler = batch_sampler

    @staticmethod
    def shuffled(seed: Optional[int] = None, version: Optional[int] = None) -> "Order":
        """Every epoch a permutation of the whole dataset by (seed, epoch), spread over all ranks
        (``docs/ORDER.md`` §1-§4); the default. ``version`` 2 (default): evaluated per position in
        O(1); 1: the order of libshard before order versions, to reproduce an earlier run."""
        return Order("shuffled", {"seed": seed, "version": version})

    @staticmethod
    def unshuffled() -> "Order":
        """The dataset's own order, spread over all ranks."""
        return Order("unshuffled")

    @staticmethod
    def node_local(nodes: Optional[int] = None, node_rank: Optional[int] = None,
                   seed: Optional[int] = None, shuffle: Optional[bool] = None) -> "Order":
        """Order version 3 (``docs/ORDER.md`` §5): the dataset is split among the nodes once (by
        dataset, seed and node count) and each node's ranks read only their node's share,
        shuffled within it every epoch, so a node's cache of an ``s3://`` dataset downloads its
        share once. ``nodes``, ``node_rank``: None (default) from the launcher (torchrun's
        GROUP_WORLD_SIZE/GROUP_RANK or WORLD_SIZE/LOCAL_WORLD_SIZE, Slurm's
        SLURM_JOB_NUM_NODES/SLURM_NODEID), else one node."""
        return Order("node_local", {"nodes": nodes, "node_rank": node_rank, "seed": seed,
                                    "shuffle": shuffle})

    @staticmethod
    def sampler(sampler: Any) -> "Order":
        """The order of a torch ``Sampler`` (grouped by the Loader's ``batch_size`` and
        ``drop_last``): this rank's, not split across ranks again (``docs/ORDER.md`` §6)."""
        return Order("caller", sampler=sampler)

    @staticmethod
    def batch_sampler(batch_sampler: Any) -> "Order":
        """The order of a torch batch sampler, one step per batch it yields (§6)."""
        return Order("caller", batch_sampler=batch_sampler)

    @staticmethod
    def follow(shuffle_window: Optional[int] = None, seed: Optional[int] = None,
               shuffle: Optional[bool] = None, version: Optional[int] = None) -> "Order":
        """Train while the dataset is being written (``docs/ORDER.md`` §7): the first epoch serves
        samples as the writer commits them, shuffled within windows of arrivals growing to
        ``shuffle_window`` (default 4096); later epochs are the shuffled order (``version``) of
        the complete dataset. The Loader's ``data`` is then the dataset's directory."""
        return Order("follow", {"shuffle_window": shuffle_window, "seed": seed,
                                "shuffle": shuffle, "version": version})

    def option(self) -> Dict[str, Any]:
        """The loader option group ``"order"`` as the C++ library takes it."""
        return {"kind": self.kind, **self.settings}

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Order) and self.kind == other.kind
                and self.settings == other.settings and self._sampler is other._sampler
                and self._batch_sampler is other._batch_sampler)

    def __hash__(self) -> int:
        return hash((self.kind, tuple(sorted(self.settings.items()))))

    def __repr__(self) -> str:
        if self.kind == "caller":
            which = "sampler" if self._sampler is not None else "batch_sampler"
            held = self._sampler if self._sampler is not None else self._batch_sampler
            return f"Order.{which}({held!r})"
        args = ", ".join(f"{k}={v!r}" for k, v in self.settings.items())
        return f"Order.{self.kind}({args})"
