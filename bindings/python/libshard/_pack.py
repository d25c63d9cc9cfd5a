"""``libshard.pack``: the ``libshard pack`` converter as a function."""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Sequence, Union

from . import _core
from ._core import UnsupportedError

PathLike = Union[str, "os.PathLike[str]"]


def pack(src: Optional[PathLike], out: PathLike, *,
         files_from: Optional[PathLike] = None,
         include: Optional[Sequence[str]] = None,
         exclude: Optional[Sequence[str]] = None,
         shard_size: Union[int, str] = "4GiB",
         compress: Optional[str] = None,
         store_dtype: Optional[str] = None,
         fields: Optional[Sequence[str]] = None,
         threads: Optional[int] = None,
         on_error: str = "raise",
         resume: bool = False,
         append: bool = False,
         part: Optional[str] = None,
         allow_varying_dims: bool = False,
         progress: bool = False,
         **options: Any) -> Dict[str, Any]:
    """Packs the ``torch.save`` / ``.safetensors`` files under ``src`` into a dataset at ``out``.

    The same conversion and options as ``libshard pack SRC -o OUT``: files are found recursively
    and ordered by natural sort of their relative paths (``data_2`` before ``data_10``).

    Args:
      src: the source directory (may be None with ``files_from``).
      out: the dataset directory to create.
      files_from: a file listing sources, one a line ("-" for stdin).
      include, exclude: glob filters on relative paths (repeatable on the command line).
      shard_size: roll to a new shard past this size (int bytes or "4GiB", "512M", ...).
      compress: None or "none"; "auto" (field codecs chosen per field: bf16/fp16 planes2,
        lossless, other dtypes zstd per field); "planes2" (bf16/fp16 only, codec 5); "planes"
        (bf16/fp16 only, codec 2, the layout before planes2); or "zstd" / "zstd:LEVEL" (whole
        samples, 2-byte dtypes byte-shuffled first).
      store_dtype: "float8_e4m3fn" stores bf16/fp16 hidden states as fp8 with a scale per token
        (lossy; read back as bf16); with a compress other than "none", as fp8-planes (codec 6:
        the same values, the codes' exponent bits entropy-coded).
      fields: keep only these tensors.
      threads: conversion threads (None or 0: the number of CPUs).
      on_error: "raise" (the first bad file raises; nothing that opens as complete is left) or
        "skip" (bad files are listed in ``OUT/skipped.txt``). "fail" is an alias of "raise".
      resume: continue an interrupted pack of ``out``. On a finished ``out`` nothing is written:
        the summary has ``nothing_to_resume`` when it holds every source, else ValueError says
        how many sources are not in it (add them with ``append``).
      append: add the sources not yet in the dataset ``out``. One writer at a time: a pack into an
        ``out`` another process is writing fails at once, naming that process. ``resume`` and
        ``append`` continue only what has this pack's identity (its ``attrs`` and, for a cache,
        the cache manifest's keys): another is refused, naming the key and both values.
      allow_identity_change: (keyword, in ``**options``) with ``resume`` or ``append``, set what
        ``out`` holds of another identity aside (moved to ``OUT.stale-TIME``, kept, never
        reused; the summary's ``set_aside`` lists it) and pack ``out`` afresh
        (``--allow-identity-change``).
      part: "I/N": convert only the I-th of N contiguous slices (merge the parts afterwards).
      allow_varying_dims: allow dimensions other than the sequence dimension to vary.
      progress: print progress lines to stderr.
      split_layers: (keyword, in ``**options``) the name of a stacked-layer tensor
        ``[tokens, layers, hidden]`` (vLLM / speculators ``hidden_states``) to store as
        ``aux_hidden_state`` ``[1, tokens, (layers-1)*hidden]`` + ``hidden_state``
        ``[1, tokens, hidden]`` (``--split-layers``).
      attrs: (keyword, in ``**options``) ``{key: str|int}`` recorded in the manifest as what
        produced the data (``--attr key=value``); see ``Dataset.attributes``.
      in_flight_bytes, journal_every, commit_interval, fsync: (keywords, in ``**options``) the
        rest of the writer configuration, as :class:`libshard.Writer` takes it (the same option
        table: docs/guide/writing.md#options), with its other spellings (``window_bytes``,
        ``journal_every_bytes``, ...). ``in_flight_bytes`` None or 0: 2 x threads x the largest
        source, at least 64 MiB.
      source_format: (keyword, in ``**options``) what ``src`` holds: "auto" (the default: a
        cache when its manifest says so, else sample files), "files", or a cache whose samples
        are packed in its own order: "deepspec" (DeepSpec's target cache), "automodel" (NeMo
        AutoModel's offline cache), "torchspec" (TorchSpec's offline folder) (``--from``; see
        docs/guide/converting.md, "Caches as sources").

    Returns a summary dict (samples, shards, bytes in and out, seconds, skipped, ...).
    Raises a :class:`libshard.Error`: ``NotFoundError`` (a ``FileNotFoundError``),
    ``InvalidArgumentError`` (a ``ValueError``), ``IoError`` (an ``OSError``), ``CorruptionError``,
    ``ResourceExhaustedError`` (a ``MemoryError``: a source over a size limit) or
    ``AlreadyExistsError`` (a ``FileExistsError``: another writer holds ``out``); the message
    names the source file and what is wrong with it. Releases the GIL.
    """
    if not getattr(_core, "HAVE_PACK", False):
        raise UnsupportedError("this build of libshard was made without the pack pipeline")
    # Read, checked and defaulted by the library's pack option table (PackOptionTable).
    opts: Dict[str, Any] = {
        "src": None if src is None else os.fspath(src),
        "out": os.fspath(out),
        "files_from": None if files_from is None else os.fspath(files_from),
        "include": list(include or []),
        "exclude": list(exclude or []),
        "shard_size": shard_size,
        "compress": compress,
        "store_dtype": store_dtype,
        "fields": list(fields or []),
        "threads": threads,
        "on_error": on_error,
        "resume": resume,
        "append": append,
        "part": part,
        "allow_varying_dims": allow_varying_dims,
        "progress": bool(progress),
    }
    for key, value in options.items():
        opts[key] = value
    return _core.pack(opts)
