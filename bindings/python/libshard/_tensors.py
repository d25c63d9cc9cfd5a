"""Zero-copy conversion of samples from the C++ core into ``torch.Tensor`` dicts.

The core hands out each tensor's bytes as a ``_core.TensorMemory`` (a 1-D uint8 buffer that keeps
the sample's arena slot or read buffer alive). ``torch.frombuffer`` wraps it without copying and
holds a reference to it for as long as the tensor's storage lives, so tensors stay valid after the
Loader or Dataset that produced them is gone. No LibTorch is linked into the extension.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from ._core import UnsupportedError

#: libshard dtype names (the PyTorch spelling without ``torch.``) to torch dtypes.
TORCH_DTYPES: Dict[str, torch.dtype] = {
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
}

#: Reserved key under which ``return_index=True`` stores a sample's dataset index.
INDEX_KEY = "__index__"
#: Reserved key under which a sequence-parallel Loader's samples carry their slice
#: (libshard/_sequence_parallel.py).
SP_KEY = "__sp__"

RawField = Tuple[str, str, Tuple[int, ...], Any]
# (index, fields, metadata), and a sequence-parallel loader's slice dict as a 4th entry.
RawSample = Tuple[Any, ...]


def torch_dtype(name: str) -> torch.dtype:
    try:
        return TORCH_DTYPES[name]
    except KeyError:
        raise UnsupportedError(f"libshard dtype {name!r} has no torch equivalent in this torch "
                               f"version ({torch.__version__})") from None


def make_tensor(dtype_name: str, shape: Sequence[int], memory: Optional[Any]) -> torch.Tensor:
    """A tensor of ``shape`` viewing ``memory`` (no copy); an empty tensor when ``memory`` is None."""
    dtype = torch_dtype(dtype_name)
    if memory is None:  # zero-size tensor: torch.frombuffer refuses empty buffers
        return torch.empty(tuple(shape), dtype=dtype)
    return torch.frombuffer(memory, dtype=dtype).view(tuple(shape))


def sample_to_dict(raw: RawSample, *, metadata: bool = True,
                   return_index: bool = False) -> Dict[str, Any]:
    """``{name: tensor}`` in schema order, then metadata entries, then ``__sp__`` (a
    sequence-parallel slice), then ``__index__`` if asked."""
    index, fields, meta = raw[0], raw[1], raw[2]
    out: Dict[str, Any] = {name: make_tensor(dtype, shape, mem)
                           for name, dtype, shape, mem in fields}
    if metadata and meta:
        for key, value in meta.items():
            out.setdefault(key, value)
    if len(raw) > 3:  # a sequence-parallel loader's slice (libshard/_sequence_parallel.py)
        out[SP_KEY] = raw[3]
    if return_index:
        out[INDEX_KEY] = index
    return out
