"""What a generator saves, as a libshard sample (for ``python -m libshard.capture``).

A sample is what ``libshard pack`` would read from the file the generator meant to write, so that
capture and a pack of a real dump store the same fields, in the same order, with the same bytes
and the same metadata:

* ``torch.save(obj, ...)``: ``obj`` flattened by the rule of pack's ``.pt`` reader
  (converters/readers/source_file.h, torch_pickle.h): a dict (str or int keys), list or tuple at
  the top; nested containers joined with ``.`` (``{"hs": [a, b]}`` gives ``hs.0``, ``hs.1``);
  tensors become fields in dict order; str, int, float and bool values become the sample's
  metadata; ``None`` is dropped; anything else is refused, as pack refuses it.
* ``safetensors`` ``save_file(tensors, path, metadata)`` (torch and numpy flavours): the tensors
  in the order the installed safetensors writes them into the file's header (pack reads the
  header's order), ``metadata`` (``__metadata__``) as string metadata.
* Bytes written to a sample file by other means (``f.write(safetensors.torch.save(d))``,
  ``shutil.copy`` of a file, a file renamed into place): parsed as pack parses files (gzip, a
  ``torch.save`` zip archive, or safetensors).

Tensors a generator hands over are copied (a snapshot, as ``torch.save`` takes one: the generator
may reuse its buffers once the call returns); CUDA tensors are left to the Writer, which copies
them to pinned memory on a side stream ordered after the generator's queued work.
"""

from __future__ import annotations

import collections
import gzip
import io
import json
import struct
from typing import Any, Dict, List, Optional, Tuple

import torch

from . import _core
from ._core import InvalidArgumentError

#: Deepest container nesting pack's reader accepts (torch_pickle.h kMaxNesting).
_MAX_NESTING = 64
_INT64 = (-(1 << 63), (1 << 63) - 1)
_ZIP_MAGIC = b"PK\x03\x04"
_GZIP_MAGIC = b"\x1f\x8b"

PREFIX = "libshard.capture: "


class Sample:
    """One captured sample: ``tensors`` (field order as pack would read the file) and
    ``metadata``; ``readback`` is what ``torch.load`` / ``load_file`` of the file would have
    returned (served to read-backs while the sample is cached); ``nbytes`` its tensor bytes."""

    __slots__ = ("tensors", "metadata", "readback", "kind", "nbytes")

    def __init__(self, tensors: Dict[str, torch.Tensor], metadata: Dict[str, Any],
                 readback: Any, kind: str) -> None:
        self.tensors = tensors
        self.metadata = metadata
        self.readback = readback
        self.kind = kind  # "torch" (torch.save) or "safetensors"
        self.nbytes = sum(t.numel() * t.element_size() for t in tensors.values())

    def length(self) -> Optional[int]:
        """The token length by the library's rule (InferLength: rank-1 ``input_ids``, else
        ``token_ids``), None when the sample has neither: not a hidden-state sample."""
        # InferLength reads these two names only; other tensors may have dtypes libshard does
        # not store, which the Writer refuses with its own message.
        described = [(n, str(t.dtype).replace("torch.", ""), tuple(t.shape))
                     for n, t in self.tensors.items() if n in ("input_ids", "token_ids")]
        try:
            return _core.infer_length(described, "sample")
        except InvalidArgumentError:
            return None


def _snapshot(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t``'s values as they are now, which the generator cannot change later."""
    t = t.detach()
    if t.is_cuda:
        return t  # the Writer's side-stream copy is ordered before any later work of the stream
    if t.device.type != "cpu" or t.layout != torch.strided or t.is_quantized or t.is_nested:
        return t  # refused by the Writer with what to call first
    return t.clone(memory_format=torch.contiguous_format)


class _Flattener:
    """pack's ``.pt`` flattening (torch_pickle.cc Flatten) over a Python object."""

    def __init__(self, where: str, copy: bool) -> None:
        self.where = where
        self.copy = copy
        self.tensors: Dict[str, torch.Tensor] = {}
        self.metadata: Dict[str, Any] = {}

    def _fail(self, what: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{PREFIX}{self.where}: {what}")

    def _leaf(self, name: str) -> None:
        if not name:
            raise self._fail("a tensor or value with an empty name")
        if name in self.tensors or name in self.metadata:
            raise self._fail(f"two entries flatten to the same name {name!r} (clashing keys)")

    def run(self, obj: Any) -> Any:
        if type(obj) not in (dict, collections.OrderedDict, list, tuple):
            raise self._fail(
                f"the object saved is a {type(obj).__name__}, not a dict of tensors; a sample is a "
                "dict (or list/tuple) of tensors and str/int/float/bool values, as libshard pack "
                "reads it: save {'name': tensor, ...}, or leave this file to disk with "
                "--exclude GLOB")
        return self._walk(obj, "", 0)

    def _walk(self, obj: Any, prefix: str, depth: int) -> Any:
        """Flattens ``obj`` under ``prefix``; returns its copy for read-backs."""
        if depth > _MAX_NESTING:
            raise self._fail(f"containers nested deeper than {_MAX_NESTING} under {prefix!r}")
        kind = type(obj)
        if isinstance(obj, torch.Tensor):
            self._leaf(prefix)
            t = _snapshot(obj) if self.copy else obj
            self.tensors[prefix] = t
            return t
        if obj is None:
            return None
        if kind in (bool, float, str):
            self._leaf(prefix)
            self.metadata[prefix] = obj
            return obj
        if kind is int:
            if not _INT64[0] <= obj <= _INT64[1]:
                raise self._fail(f"entry {prefix!r} = {obj} does not fit in int64")
            self._leaf(prefix)
            self.metadata[prefix] = obj
            return obj
        join = (lambda part: f"{prefix}.{part}") if prefix else (lambda part: part)
        if kind in (dict, collections.OrderedDict):
            out = kind()
            for k, v in obj.items():
                if type(k) is str:
                    part = k
                elif type(k) is int:
                    part = str(k)
                else:
                    raise self._fail(f"dict key {k!r} of type {type(k).__name__} under "
                                     f"{prefix!r}; keys must be str or int")
                if not part:
                    raise self._fail(f"empty dict key under {prefix!r}")
                out[k] = self._walk(v, join(part), depth + 1)
            return out
        if kind in (list, tuple):
            items = [self._walk(v, join(str(i)), depth + 1) for i, v in enumerate(obj)]
            return items if kind is list else tuple(items)
        raise self._fail(
            f"entry {prefix!r} is a {kind.__module__}.{kind.__qualname__}, not a tensor or a "
            "str/int/float/bool value (libshard pack cannot read it from a file either); store "
            "it as a tensor or a plain value")


def from_torch_save(obj: Any, where: str, *, copy: bool = True) -> Sample:
    """The sample of ``torch.save(obj, path)``. ``copy``: snapshot the tensors (the generator
    still holds them); False for objects nobody else holds (loaded from bytes)."""
    f = _Flattener(where, copy)
    readback = f.run(obj)
    return Sample(f.tensors, f.metadata, readback, "torch")


def _header(data: bytes, where: str) -> Optional[Dict[str, Any]]:
    """The JSON header of safetensors bytes (keys in file order), or None when ``data`` is not
    safetensors."""
    if len(data) < 8:
        return None
    (n,) = struct.unpack("<Q", data[:8])
    if n == 0 or n > len(data) - 8 or n > (64 << 20):
        return None
    try:
        header = json.loads(bytes(data[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return header if isinstance(header, dict) else None


def _standin_order(tensors: Dict[str, Any], metadata: Optional[Dict[str, str]],
                   numpy: bool) -> Tuple[List[str], List[str]]:
    """The order in which the installed safetensors writes these tensors (and metadata keys)
    into a file's header: found by saving empty stand-ins of the same names and dtypes."""
    if numpy:
        import numpy as np
        from safetensors.numpy import save as st_save
        standins = {k: np.empty((0,), dtype=v.dtype) for k, v in tensors.items()}
    else:
        from safetensors.torch import save as st_save
        standins = {k: torch.empty((0,), dtype=v.dtype) for k, v in tensors.items()}
    header = _header(st_save(standins, metadata=metadata), "stand-in") or {}
    meta = header.get("__metadata__") or {}
    return [k for k in header if k != "__metadata__"], list(meta)


def from_safetensors(tensors: Any, metadata: Optional[Dict[str, str]], where: str, *,
                     numpy: bool = False) -> Sample:
    """The sample of safetensors' ``save_file(tensors, path, metadata)`` (torch or numpy
    flavour), with the fields in the order the file would hold them."""
    if not isinstance(tensors, dict):
        raise InvalidArgumentError(f"{PREFIX}{where}: save_file takes a dict of tensors, got a "
                                   f"{type(tensors).__name__}")
    for k, v in tensors.items():
        if not isinstance(k, str):
            raise InvalidArgumentError(f"{PREFIX}{where}: tensor names must be str, got {k!r}")
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise InvalidArgumentError(f"{PREFIX}{where}: safetensors metadata must be a dict of "
                                   "str -> str")
    order, meta_order = _standin_order(tensors, metadata, numpy)
    out: Dict[str, torch.Tensor] = {}
    for k in order:
        v = tensors[k]
        if numpy:
            import numpy as np
            t = torch.from_numpy(np.ascontiguousarray(v)).clone()
        else:
            if not isinstance(v, torch.Tensor):
                raise InvalidArgumentError(f"{PREFIX}{where}: tensor {k!r} is a "
                                           f"{type(v).__name__}, not a torch.Tensor")
            t = _snapshot(v)
        out[k] = t
    meta = {k: metadata[k] for k in meta_order} if metadata else {}
    return Sample(out, meta, dict(out), "safetensors")


def from_bytes(data: bytes, where: str) -> Sample:
    """The sample held by file bytes, read as pack reads a file: gzip (once), a ``torch.save``
    zip archive (``torch.load(weights_only=True)``), or safetensors."""
    if data[:2] == _GZIP_MAGIC:
        data = gzip.decompress(data)
    if data[:4] == _ZIP_MAGIC:
        try:
            obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - torch raises many kinds
            raise InvalidArgumentError(f"{PREFIX}{where}: the bytes written are a zip archive "
                                       f"that torch.load(weights_only=True) cannot read ({e})") from e
        return from_torch_save(obj, where, copy=False)
    header = _header(data, where)
    if header is not None:
        from safetensors.torch import load as st_load
        loaded = st_load(bytes(data))
        meta = header.get("__metadata__") or {}
        tensors = {k: loaded[k] for k in header if k != "__metadata__"}
        return Sample(tensors, dict(meta), dict(tensors), "safetensors")
    raise InvalidArgumentError(
        f"{PREFIX}{where}: the bytes written are neither a torch.save archive nor a safetensors "
        "file (nor their gzip), so no sample can be read from them (libshard pack could not read "
        "the file either); write it with torch.save or safetensors, or leave it to disk with "
        "--exclude GLOB")


def clone_readback(obj: Any) -> Any:
    """A copy of a cached read-back whose tensors the caller may modify."""
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, dict):
        return type(obj)((k, clone_readback(v)) for k, v in obj.items())
    if isinstance(obj, list):
        return [clone_readback(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(clone_readback(v) for v in obj)
    return obj
