"""libshard: packed, aligned shards of PyTorch hidden-state dumps, streamed with io_uring.

Two lines in a training script::

    import libshard
    loader = libshard.Loader("/data/packed", batch_size=8, collate="pad")   # or libshard.open(...)

* :func:`pack` converts a directory of ``torch.save`` / ``.safetensors`` files (once).
* :func:`open` gives a map-style :class:`Dataset` (``ds[i]`` -> dict of tensors, as torch.load).
* :class:`Loader` streams it: shuffled, split across ranks, batched, resumable; or in the order
  of a torch ``Sampler`` (``sampler=`` / ``batch_sampler=``).
* :meth:`Dataset.prefetch` reads ahead in an announced order; :class:`ReadAheadSampler` tells
  each DataLoader worker its indices ahead.
* :class:`Writer` writes a dataset straight from a generator (keys, resume, many ranks).
* :func:`pad_collate`, :func:`pack_collate` batch variable-length samples.

Errors: every exception derives from :class:`Error` and from the built-in Python users expect,
each with the library's message (file, sample, offset):
:class:`InvalidArgumentError` and :class:`UnsupportedError` (``ValueError``),
:class:`NotFoundError` (``FileNotFoundError``), :class:`IoError` (``OSError``, with errno),
:class:`ResourceExhaustedError` (``MemoryError``: a memory budget or size limit),
:class:`AlreadyExistsError` (``FileExistsError``: e.g. a dataset another writer holds),
:class:`InternalError` (``RuntimeError``), :class:`CorruptionError` and :class:`AbortedError`.
"""

from __future__ import annotations

try:
    from . import _core
except ImportError as e:  # pragma: no cover - depends on how the package was installed
    raise ImportError(
        "libshard's C++ extension (libshard._core) is missing or does not load: install the "
        "package with `pip install .` from the repository root, or build it with CMake "
        "(-DLIBSHARD_BUILD_PYTHON=ON) and put <build>/python on PYTHONPATH. "
        f"Cause: {e}") from e

# PyTorch is not a pip dependency (installing libshard must never replace a training environment's
# torch build), so say what to do when it is missing rather than fail on the first `import torch`.
try:
    import torch as _torch
except ImportError as e:
    raise ImportError(
        "libshard needs PyTorch >= 2.3, which it does not install so that it never replaces the "
        "torch build of a training environment: install the torch build for your machine first "
        "(https://pytorch.org/get-started/locally/), or `pip install libshard[torch]` for the "
        f"default one. Cause: {e}") from e
del _torch

from ._collate import pack_collate, pad_collate
from ._dataset import Dataset, Field, Schema, open, upgrade
from ._follow import FollowedDataset
from ._loader import Loader
from ._order import Order
from ._pack import pack
from ._read_ahead import ReadAheadSampler
from ._sequence_parallel import SequenceParallel
from ._tensors import INDEX_KEY, SP_KEY
from ._writer import Writer, join_parts, merge

# One exception class per libshard status code (created by the C++ extension).
Error = _core.Error
InvalidArgumentError = _core.InvalidArgumentError
UnsupportedError = _core.UnsupportedError
NotFoundError = _core.NotFoundError
IoError = _core.IoError
#: Raised when dataset bytes violate the format or fail a checksum.
CorruptionError = _core.CorruptionError
ResourceExhaustedError = _core.ResourceExhaustedError
AlreadyExistsError = _core.AlreadyExistsError
AbortedError = _core.AbortedError
InternalError = _core.InternalError

# From project(VERSION) in CMakeLists.txt, compiled into the extension (libshard/version.h).
__version__: str = _core.__version__

__all__ = [
    "AbortedError",
    "AlreadyExistsError",
    "CorruptionError",
    "Dataset",
    "Error",
    "Field",
    "FollowedDataset",
    "INDEX_KEY",
    "InternalError",
    "InvalidArgumentError",
    "IoError",
    "Loader",
    "Order",
    "Writer",
    "NotFoundError",
    "ReadAheadSampler",
    "ResourceExhaustedError",
    "SP_KEY",
    "Schema",
    "SequenceParallel",
    "join_parts",
    "merge",
    "open",
    "pack",
    "pack_collate",
    "pad_collate",
    "UnsupportedError",
    "upgrade",
]
