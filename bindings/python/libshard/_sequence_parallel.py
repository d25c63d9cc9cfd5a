"""``libshard.SequenceParallel``: sequence-parallel loading as one value.

``Loader(path, sequence_parallel=libshard.SequenceParallel(4, rule="specforge-usp",
ttt_length=7))`` (or ``sequence_parallel=4, sp_rule="even"``) cuts the world into groups of 4
consecutive ranks: every rank of a group gets the same samples in the same order, each only its
own slice of every sequence field, by the trainer's split rule (``libshard/sequence_parallel.h``,
``docs/guide/long-context.md``). The C++ library checks every setting (``LoaderOptionTable``'s
rows ``sequence_parallel``, ``sp_rule``, ``sp_ttt_length``, ``sp_ulysses_size``) and names the
option of a bad one.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from . import _core
from ._tensors import SP_KEY

# SP_KEY ("__sp__"): the key under which a sequence-parallel Loader's sample dicts carry their
# slice: a dict with
# ``rule``, ``sp_size``, ``sp_rank``, ``length`` (the sample's stored length), ``full_length``
# (the rows the group splits: ``length`` clipped to ``max_len``), ``chunk``, ``start`` and
# ``stop`` (the sample rows the tensors hold), ``pad_to`` (the rows of the trainer's tensor:
# zeros after the rows read), ``offset`` (the global index of the rank's first row, where its
# position ids start), ``position_begin``, ``position_count``, ``position_pad_to`` and
# ``batch_pad_to`` (``_core.sequence_parallel_slice``'s keys).


class SequenceParallel:
    """``degree`` ranks per sequence-parallel group (1 or more; 1 is a group of one, which
    applies the rule to the whole sample as the trainer does with sp_size 1: the USP rules pad
    it by ``ttt_length``; ``Loader(sequence_parallel=None)`` is off), split by ``rule``
    (``"even"``, ``"specforge-dspark"``, ``"specforge-usp"``, ``"torchspec-usp"``, or
    ``"speculators"`` with ``collate="speculators-eagle3"``: the rank's part of each packed
    batch), with the USP rules' overlap ``ttt_length`` and torchspec-usp's ``ulysses_size`` (0:
    the whole group). The library checks the values when the Loader is made: a degree below 1
    or one that does not divide ``world_size`` is an error naming ``sequence_parallel``."""

    __slots__ = ("degree", "rule", "ttt_length", "ulysses_size")

    def __init__(self, degree: int, rule: str = "even", *, ttt_length: int = 0,
                 ulysses_size: int = 0) -> None:
        self.degree = degree
        self.rule = rule
        self.ttt_length = ttt_length
        self.ulysses_size = ulysses_size

    def options(self) -> Dict[str, Any]:
        """The loader options (LoaderOptionTable's rows) this value gives."""
        return {"sequence_parallel": self.degree, "sp_rule": self.rule,
                "sp_ttt_length": self.ttt_length, "sp_ulysses_size": self.ulysses_size}

    @staticmethod
    def rules() -> list:
        """The split rules (``_core.sequence_parallel_rules``)."""
        return _core.sequence_parallel_rules()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SequenceParallel) and self.options() == other.options()

    def __repr__(self) -> str:
        extra = "".join(f", {k}={getattr(self, k)}" for k in ("ttt_length", "ulysses_size")
                        if getattr(self, k))
        return f"SequenceParallel({self.degree}, rule={self.rule!r}{extra})"


def sequence_parallel_options(sequence_parallel: Any, sp_rule: str) -> Dict[str, Any]:
    """The loader options of ``Loader(sequence_parallel=..., sp_rule=...)``: an int (or None),
    or a :class:`SequenceParallel` (whose rule wins; an sp_rule besides it is an error)."""
    if isinstance(sequence_parallel, SequenceParallel):
        if sp_rule != "even" and sp_rule != sequence_parallel.rule:
            raise _core.InvalidArgumentError(
                f"Loader option sp_rule={sp_rule!r} and sequence_parallel={sequence_parallel!r} "
                "both give the split rule; give it in one place")
        return sequence_parallel.options()
    out: Dict[str, Any] = {"sequence_parallel": sequence_parallel}
    if sp_rule != "even":
        out["sp_rule"] = sp_rule
    return out


def slice_of(sample: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The slice a sequence-parallel Loader's sample carries (``sample["__sp__"]``), or None."""
    return sample.get(SP_KEY)
