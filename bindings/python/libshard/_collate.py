"""Batching helpers for variable-length hidden states: padding and packing.

Both take a list of sample dicts (as ``Dataset.__getitem__`` or ``Loader`` give them) and return
one dict. Outputs are allocated in pinned (page-locked) memory when CUDA is available, so a
following ``.to("cuda", non_blocking=True)`` is asynchronous.

Sequence dimensions: pass ``seq_dims={name: dim_or_None}`` (``Loader`` passes the dataset schema's
``seq_dim`` automatically when ``collate="pad"`` / ``"pack"`` or these functions are given). When
omitted, a field's sequence dimension is the one dimension whose size differs between the samples;
when no dimension differs it is dim 0 for rank-1 tensors, dim 1 for tensors of rank >= 2 whose
dim 0 has size 1 (the EAGLE-3 ``[1, L, H]`` layout), and dim 0 otherwise. Rank-0 tensors have none.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import torch

from ._core import InvalidArgumentError
from ._tensors import INDEX_KEY

Sample = Mapping[str, Any]


def _pin() -> bool:
    return torch.cuda.is_available()


def _empty(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(tuple(shape), dtype=dtype, pin_memory=_pin())


def _infer_seq_dim(tensors: Sequence[torch.Tensor]) -> Optional[int]:
    first = tensors[0]
    if first.dim() == 0:
        return None
    differing = [d for d in range(first.dim()) if any(t.shape[d] != first.shape[d] for t in tensors)]
    if len(differing) == 1:
        return differing[0]
    if len(differing) > 1:
        raise InvalidArgumentError(f"cannot infer the sequence dimension: dims {differing} differ "
                                   "between samples; pass seq_dims={name: dim}")
    if first.dim() >= 2 and first.shape[0] == 1:
        return 1
    return 0


def _check_same_rank(name: str, tensors: Sequence[torch.Tensor]) -> None:
    for t in tensors:
        if t.dim() != tensors[0].dim() or t.dtype != tensors[0].dtype:
            raise InvalidArgumentError(f"field {name!r}: samples disagree in rank or dtype "
                                       f"({tuple(tensors[0].shape)} {tensors[0].dtype} vs "
                                       f"{tuple(t.shape)} {t.dtype})")


def _check_other_dims(name: str, tensors: Sequence[torch.Tensor], dim: Optional[int]) -> None:
    """Every dimension but the sequence one must agree, or the batch cannot be formed."""
    first = tensors[0]
    for t in tensors:
        for d in range(first.dim()):
            if d != dim and t.shape[d] != first.shape[d]:
                raise InvalidArgumentError(
                    f"field {name!r}: dim {d} differs between samples ({tuple(first.shape)} "
                    f"vs {tuple(t.shape)}) and is not the sequence dimension ({dim})")


def _seq_dim_for(name: str, tensors: Sequence[torch.Tensor],
                 seq_dims: Optional[Mapping[str, Optional[int]]]) -> Optional[int]:
    if seq_dims is not None and name in seq_dims:
        return seq_dims[name]
    return _infer_seq_dim(tensors)


def _lengths(samples: Sequence[Sample], names: List[str], dims: Dict[str, Optional[int]],
             length_field: Optional[str]) -> torch.Tensor:
    key = length_field if length_field in dims and dims.get(length_field) is not None else next(
        (n for n in names if dims[n] is not None), None)
    if key is None:
        return torch.ones(len(samples), dtype=torch.int64)
    return torch.tensor([s[key].shape[dims[key]] for s in samples], dtype=torch.int64)


def _split(samples: Sequence[Sample]) -> List[str]:
    if not samples:
        raise InvalidArgumentError("cannot collate an empty batch")
    return [k for k, v in samples[0].items() if isinstance(v, torch.Tensor)]


def _others(samples: Sequence[Sample], out: Dict[str, Any], tensor_names: List[str]) -> None:
    for key in samples[0]:
        if key in tensor_names:
            continue
        values = [s[key] for s in samples]
        if key == INDEX_KEY:
            out[key] = torch.tensor(values, dtype=torch.int64)
        else:
            out[key] = values


def pad_collate(samples: Sequence[Sample], *,
                seq_dims: Optional[Mapping[str, Optional[int]]] = None,
                padding_value: float = 0, padding_values: Optional[Mapping[str, float]] = None,
                length_field: Optional[str] = None) -> Dict[str, Any]:
    """Pads every field to the batch's longest sequence and batches the samples.

    Tensors are padded at the end of their sequence dimension with ``padding_values[name]`` (else
    ``padding_value``). Tensors whose dim 0 has size 1 in every sample and is not their sequence
    dimension (``[1, L, H]``) are concatenated along dim 0 (``[B, L_max, H]``); all others are
    stacked along a new dim 0 (``input_ids [L] -> [B, L_max]``). Adds ``"lengths"`` (int64 ``[B]``,
    each sample's length before padding, from ``length_field`` or the first field with a sequence
    dimension). Non-tensor entries become lists; ``__index__`` becomes an int64 tensor.
    """
    names = _split(samples)
    out: Dict[str, Any] = {}
    dims: Dict[str, Optional[int]] = {}
    for name in names:
        tensors = [s[name] for s in samples]
        _check_same_rank(name, tensors)
        dim = _seq_dim_for(name, tensors, seq_dims)
        dims[name] = dim
        first = tensors[0]
        concat = first.dim() >= 1 and dim != 0 and all(t.shape[0] == 1 for t in tensors)
        shape = list(first.shape)
        if dim is not None:
            shape[dim] = max(t.shape[dim] for t in tensors)
        _check_other_dims(name, tensors, dim)
        batch_shape = [len(tensors)] + (shape[1:] if concat else shape)
        result = _empty(batch_shape, first.dtype)
        pad = (padding_values or {}).get(name, padding_value)
        for i, t in enumerate(tensors):
            dst = result[i] if not concat else result[i:i + 1]
            if dim is not None and t.shape[dim] < shape[dim]:
                dst.fill_(pad)
                dst.narrow(dim, 0, t.shape[dim]).copy_(t)
            else:
                dst.copy_(t)
        out[name] = result
    out["lengths"] = _lengths(samples, names, dims, length_field)
    _others(samples, out, names)
    return out


def pack_collate(samples: Sequence[Sample], *,
                 seq_dims: Optional[Mapping[str, Optional[int]]] = None,
                 length_field: Optional[str] = None) -> Dict[str, Any]:
    """Packs the samples into one flat sequence with offsets (varlen attention).

    Every field with a sequence dimension is concatenated along it (``input_ids [L_i] ->
    [sum L_i]``, ``hidden_state [1, L_i, H] -> [1, sum L_i, H]``); fields without one are stacked
    along a new dim 0. Adds ``"cu_seqlens"`` (int32 ``[B + 1]``, cumulative lengths starting at 0,
    as flash-attention's varlen kernels take it), ``"lengths"`` (int64 ``[B]``) and
    ``"max_seqlen"`` (int). Non-tensor entries become lists; ``__index__`` an int64 tensor.
    """
    names = _split(samples)
    out: Dict[str, Any] = {}
    dims: Dict[str, Optional[int]] = {}
    for name in names:
        tensors = [s[name] for s in samples]
        _check_same_rank(name, tensors)
        dim = _seq_dim_for(name, tensors, seq_dims)
        dims[name] = dim
        first = tensors[0]
        _check_other_dims(name, tensors, dim)
        if dim is None:
            result = _empty([len(tensors)] + list(first.shape), first.dtype)
            torch.stack(tensors, out=result)
        else:
            shape = list(first.shape)
            shape[dim] = sum(t.shape[dim] for t in tensors)
            result = _empty(shape, first.dtype)
            torch.cat(tensors, dim=dim, out=result)
        out[name] = result
    lengths = _lengths(samples, names, dims, length_field)
    cu = torch.zeros(len(samples) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(lengths, 0).to(torch.int32)
    out["cu_seqlens"] = cu.pin_memory() if _pin() else cu
    out["lengths"] = lengths
    out["max_seqlen"] = int(lengths.max()) if len(samples) else 0
    _others(samples, out, names)
    return out
