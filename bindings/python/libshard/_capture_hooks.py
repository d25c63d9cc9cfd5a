"""The calls ``python -m libshard.capture`` intercepts in the generator's process.

Writes of a sample file under the output directory (see :mod:`libshard._capture_store` for which
files are samples) go to the dataset instead of the disk:

* ``torch.save(obj, path)``, and ``torch.save(obj, f)`` where ``f`` is a file opened on a sample
  path (``open(path, "wb")``, ``gzip.open(path, "wb")``, ``Path.open``);
* safetensors' ``save_file`` (``safetensors.torch`` and ``safetensors.numpy``);
* bytes written to a file opened on a sample path (``f.write(safetensors.torch.save(d))``,
  ``shutil.copyfile``), parsed when the file is closed;
* ``os.rename`` / ``os.replace`` / ``shutil.move`` / ``Path.rename`` of a file into a sample
  path (a generator staging its files elsewhere, as speculators' datagen moves vLLM's files): the
  file is read, captured, and removed from where it was.

What the generator asks about those paths sees the captured samples: ``os.stat`` / ``lstat`` (so
``os.path.exists``, ``isfile``, ``isdir``, ``getsize``, ``Path.exists``, ``Path.is_file``),
``os.access``, ``os.listdir`` (``Path.iterdir``), ``os.scandir`` (``os.walk``, ``glob``,
``Path.glob``). Read-backs through ``torch.load``, safetensors' ``load_file`` and ``safe_open``
are served (the store says from where); a raw ``open(path, "rb")``, a removal, a rename away or
an append to a captured sample are refused, naming the file and what to do; writing a captured
sample again keeps the first (the store says so once). Everything else (other files, other
directories, file descriptors) goes to the original functions untouched.

How a file can end (docs/guide/capture.md, "How a file can end"): a file opened on a sample
path is held in memory (:class:`CaptureFile`: seekable, truncatable, no file descriptor) and
captured when closed, also when the generator never closes it (capture closes what is still open
when it ends); renaming its path while it is open moves it; opening the same path twice for
writing is refused; ``os.truncate`` applies to it as to a file. ``os._exit`` ends the capture as
a normal exit with that status would; SIGTERM and SIGHUP (at their defaults) stop the generator
as an exception would, so what it wrote is journaled. A forked child's sample writes are
refused there and told to the captured process, which then does not commit.
"""

from __future__ import annotations

import builtins
import errno
import inspect
import gzip
import io
import os
import signal
import stat as stat_mod
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from ._capture_sample import (PREFIX, Sample, clone_readback, from_bytes, from_safetensors,
                              from_torch_save)
from ._capture_store import CaptureStore
from ._core import UnsupportedError

_active: Optional[CaptureStore] = None
_saved: List[Tuple[Any, str, Any]] = []  # (owner, attribute, original) to restore

# The originals, bound once: the hooks call these, never the patched names.
_open = builtins.open
_stat = os.stat
_lstat = os.lstat
_access = os.access
_listdir = os.listdir
_scandir = os.scandir
_remove = os.remove
_unlink = os.unlink
_rename = os.rename
_replace = os.replace
_truncate = os.truncate
_exit = os._exit
_torch_save = torch.save
_torch_load = torch.load


def _where(call: str, path: Any) -> str:
    return f"{call}(..., {os.fspath(path)!r})" if not isinstance(path, int) else call


def _is_dir_on_disk(path: str) -> bool:
    try:
        return stat_mod.S_ISDIR(_stat(path).st_mode)
    except OSError:
        return False


def _parent_exists(s: CaptureStore, rel: str, path: Any) -> None:
    parent = rel.rpartition("/")[0]
    if s.is_dir(parent) or _is_dir_on_disk(os.path.dirname(s.full(rel))):
        return
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), os.fspath(path))


# -- files opened on a sample path ------------------------------------------------------------
class CaptureFile(io.RawIOBase):
    """What ``open(sample_path, "wb")`` returns under capture: it holds what is written (in
    memory, seekable and truncatable as the file would be) and, when closed, captures the sample
    (a ``torch.save`` object handed to it, or the bytes written), or writes the file to disk when
    its content is not a sample. The store knows every one that is open (:meth:`CaptureStore.
    opened`): one the generator never closes (an exit without close, a reference cycle, an
    ``os._exit``, a signal) is closed, and so captured, when capture ends. Renaming its path
    while it is open moves it (:func:`_rename_like`); it has no file descriptor."""

    def __init__(self, store: CaptureStore, rel: Optional[str], name: Any, mode: str) -> None:
        super().__init__()
        self._store = store
        self._rel = rel  # None: renamed out of the captured tree, goes to disk at `name`
        self.name = name
        self.mode = mode
        self._buf = io.BytesIO()
        self._sample: Optional[Sample] = None
        self._obj: Any = None      # the torch.save object the sample came from
        self._framed = False       # a wrapper (gzip) wrote bytes before that object
        self._call = ""
        self._real: Any = None
        store.opened(self)

    @property
    def rel(self) -> Optional[str]:
        return self._rel

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return self._real.seekable() if self._real is not None else True

    def fileno(self) -> int:
        raise io.UnsupportedOperation(
            f"{PREFIX}{os.fspath(self.name)!r}: a sample file being captured is held in memory "
            "and has no file descriptor (os.fsync, os.write, mmap or sendfile of it cannot "
            "work); write it through the file object, or leave it to disk with --exclude GLOB")

    def write(self, b: Any) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        if self._real is not None:
            return self._real.write(b)
        data = memoryview(b).cast("B")
        if self._sample is None:  # after a torch.save object: a wrapper's framing (gzip)
            self._buf.write(data)
        return data.nbytes

    def seek(self, offset: int, whence: int = 0) -> int:
        if self._real is not None:
            return self._real.seek(offset, whence)
        return self._buf.seek(offset, whence)

    def tell(self) -> int:
        return self._real.tell() if self._real is not None else self._buf.tell()

    def truncate(self, size: Optional[int] = None) -> int:
        """As a file's: the bytes past ``size`` are dropped (the position stays); truncating a
        file a ``torch.save`` object went to, to zero bytes, drops that object."""
        if self._real is not None:
            return self._real.truncate(size)
        if self._sample is not None and size is not None:
            if size != 0:
                raise UnsupportedError(
                    f"{PREFIX}truncate({size}) of {os.fspath(self.name)!r}: a torch.save object "
                    "was written to it, which capture holds as a sample, not as bytes; write "
                    "the file whole, or leave it to disk with --exclude GLOB")
            self._sample = None
        return self._buf.truncate(size)

    def retarget(self, name: Any, rel: Optional[str]) -> None:
        """The open file's path was renamed to ``name`` (``rel`` under the captured tree, or None
        when it left it: then it goes to disk there when closed)."""
        self.name, self._rel = name, rel

    def attach(self, obj: Any, call: str) -> bool:
        """``torch.save(obj, self)``: True when ``obj`` is a sample (captured at close); False
        when it is not, after which the file writes through to disk."""
        if self._rel is not None and self._store.has(self._rel):  # a rewrite: keeps the first
            self._sample, self._call = Sample({}, {}, None, "torch"), call
            return True
        sample = from_torch_save(obj, _where(call, self.name))
        if self._rel is not None and self._store.is_sample(self._rel, sample):
            self._sample, self._obj, self._call = sample, obj, call
            self._framed = self._buf.tell() > 0
            self._buf = io.BytesIO()
            return True
        self._to_disk()
        return False

    def _to_disk(self) -> None:
        mode = self.mode if "b" in self.mode else self.mode + "b"
        if self._sample is not None and self._obj is not None and self._framed:
            raise UnsupportedError(
                f"{PREFIX}{os.fspath(self.name)!r}: a torch.save object written through a "
                "wrapper (gzip) to a sample path, then renamed out of the captured directory, "
                "cannot be written to disk as the wrapper would have; rename the finished file "
                "instead, or leave it to disk with --exclude GLOB")
        self._real = _open(self.name, mode.replace("x", "w") if "x" in mode else mode)
        if self._sample is not None and self._obj is not None:  # held as a sample: its bytes
            _torch_save(self._obj, self._real)
            self._sample = self._obj = None
        else:
            self._real.write(self._buf.getbuffer())
        self._buf = io.BytesIO()

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._real is not None:
                self._real.close()
            elif self._rel is None:  # renamed out of the captured tree: an ordinary file
                self._to_disk()
                self._real.close()
            elif self._sample is not None:
                self._store.capture(self._rel, self._sample, self._call)
            elif self._store.has(self._rel):
                self._store.rewritten(self._rel, "write")
            elif self._buf.getbuffer().nbytes:
                data = self._buf.getvalue()
                sample = from_bytes(data, f"bytes written to {os.fspath(self.name)!r}")
                if self._store.is_sample(self._rel, sample):
                    self._buf = io.BytesIO()
                    self._store.capture(self._rel, sample, "write")
                else:
                    self._to_disk()
                    self._real.close()
            else:  # nothing written: an empty file, as asked
                self._to_disk()
                self._real.close()
        finally:
            self._buf = io.BytesIO()
            self._sample = self._obj = None
            self._store.closed_file(self)
            super().close()

    def close_left_open(self) -> str:
        """Closes a file the generator left open when capture ends: captured as ``close`` would,
        or, when its bytes are no sample (cut short: the generator stopped while writing it),
        written to disk as they are, as the file system would have kept them. Returns what
        became of it."""
        if self.closed:
            return ""
        data = self._buf.getvalue()
        try:
            self.close()
            return "captured" if self._rel is not None and self._store.has(self._rel) else \
                "written to disk"
        except Exception as e:  # noqa: BLE001 - reported, and the bytes kept on disk
            try:
                with _open(self.name, "wb") as f:
                    f.write(data)
            except OSError as disk:
                return f"lost: not a sample ({e}) and not writable to disk ({disk})"
            return f"written to disk as it was ({len(data)} bytes): not a readable sample ({e})"


def _capture_file_of(f: Any) -> Optional[CaptureFile]:
    """The CaptureFile behind ``f`` (itself, or under a gzip or text wrapper), or None."""
    for _ in range(3):
        if isinstance(f, CaptureFile):
            return f
        if isinstance(f, gzip.GzipFile):
            f = f.fileobj
        elif isinstance(f, (io.TextIOWrapper, io.BufferedWriter)):
            f = f.buffer if isinstance(f, io.TextIOWrapper) else f.raw
        else:
            return None
    return None


def _open_hook(file: Any, mode: str = "r", buffering: int = -1, encoding: Optional[str] = None,
               errors: Optional[str] = None, newline: Optional[str] = None, closefd: bool = True,
               opener: Any = None) -> Any:
    s = _active
    rel = None if s is None or isinstance(file, int) else s.rel(file)
    if rel is None:
        return _open(file, mode, buffering, encoding, errors, newline, closefd, opener)
    writing = any(c in mode for c in "wxa+")
    call = f"open({os.fspath(file)!r}, {mode!r})"
    if writing and (s.has(rel) or s.selects(rel)):
        s.check_process(call, rel)  # a forked child cannot add to this process's dataset
        if s.open_files(rel):
            raise s.refuse_open_twice(rel, call)
    if s.has(rel):
        if "x" in mode:
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(file))
        if not writing:
            raise s.refuse(rel, call, "its bytes cannot be read: read the sample with torch.load "
                                      "or safetensors' load_file (capture serves those), or from "
                                      "the dataset once capture ends")
        if "a" in mode or "+" in mode:
            raise s.refuse(rel, call, "capture cannot append to it or update it in place")
        return CaptureFile(s, rel, file, mode)  # a rewrite: kept as first captured (the store)
    if not writing or not s.selects(rel):
        return _open(file, mode, buffering, encoding, errors, newline, closefd, opener)
    if "a" in mode or "+" in mode or opener is not None:
        raise UnsupportedError(
            f"{PREFIX}{call}: capture cannot honour this on a sample file: it captures whole "
            "files written at once (open(path, 'wb') or 'xb', torch.save, safetensors' "
            "save_file), not appends or updates in place; write the file whole, or leave it to "
            "disk with --exclude GLOB")
    _parent_exists(s, rel, file)
    raw = CaptureFile(s, rel, file, mode)
    if "b" in mode:
        return raw
    return io.TextIOWrapper(raw, encoding=encoding, errors=errors, newline=newline,
                            write_through=True)


# -- torch ------------------------------------------------------------------------------------
def _save_hook(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
    s = _active
    if s is not None:
        cf = _capture_file_of(f)
        if cf is not None:
            if cf.attach(obj, "torch.save"):
                return None
            return _torch_save(obj, f, *args, **kwargs)
        if isinstance(f, (str, bytes, os.PathLike)):
            rel = s.rel(f)
            if rel is not None and s.selects(rel):
                call = _where("torch.save", f)
                s.check_process(call, rel)
                if s.open_files(rel):
                    raise s.refuse_open_twice(rel, call)
                if s.has(rel):
                    s.rewritten(rel, call)
                    return None
                _parent_exists(s, rel, f)
                sample = from_torch_save(obj, call)
                if s.is_sample(rel, sample):
                    s.capture(rel, sample, "torch.save")
                    return None
    return _torch_save(obj, f, *args, **kwargs)


def _to_device(obj: Any, device: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return type(obj)((k, _to_device(v, device)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_device(v, device) for v in obj)
    return obj


def _load_hook(f: Any, *args: Any, **kwargs: Any) -> Any:
    s = _active
    if s is not None and isinstance(f, (str, bytes, os.PathLike)):
        rel = s.rel(f)
        if s.has(rel):
            sample = s.readback(rel, f"torch.load({os.fspath(f)!r})")
            obj = clone_readback(sample.readback)
            where = args[0] if args else kwargs.get("map_location")
            if isinstance(where, (str, torch.device)):
                obj = _to_device(obj, where)
            return obj
    return _torch_load(f, *args, **kwargs)


# -- safetensors ------------------------------------------------------------------------------
def _safetensors_hooks() -> List[Tuple[Any, str, Callable[..., Any]]]:
    try:
        import safetensors
        import safetensors.numpy as st_numpy
        import safetensors.torch as st_torch
    except ImportError:
        return []
    orig_save_t, orig_save_n = st_torch.save_file, st_numpy.save_file
    orig_load_t, orig_load_n = st_torch.load_file, st_numpy.load_file
    orig_safe_open = safetensors.safe_open

    def saver(orig: Callable[..., Any], numpy: bool, name: str) -> Callable[..., Any]:
        def save_file(*args: Any, **kwargs: Any) -> None:
            s = _active
            filename = args[1] if len(args) > 1 else kwargs.get("filename")
            rel = None if s is None or filename is None else s.rel(filename)
            if s is not None and rel is not None and s.selects(rel):
                tensors = args[0] if args else kwargs.get("tensors", kwargs.get("tensor_dict"))
                metadata = args[2] if len(args) > 2 else kwargs.get("metadata")
                call = _where(name, filename)
                s.check_process(call, rel)
                if s.open_files(rel):
                    raise s.refuse_open_twice(rel, call)
                if s.has(rel):
                    s.rewritten(rel, call)
                    return None
                _parent_exists(s, rel, filename)
                sample = from_safetensors(tensors, metadata, call, numpy=numpy)
                if s.is_sample(rel, sample):
                    s.capture(rel, sample, name)
                    return None
            return orig(*args, **kwargs)
        return save_file

    def loader(orig: Callable[..., Any], numpy: bool, name: str) -> Callable[..., Any]:
        def load_file(*args: Any, **kwargs: Any) -> Any:
            s = _active
            filename = args[0] if args else kwargs.get("filename")
            rel = None if s is None or filename is None else s.rel(filename)
            if s is not None and s.has(rel):
                sample = s.readback(rel, f"{name}({os.fspath(filename)!r})")
                if numpy:
                    return {k: t.numpy().copy() for k, t in sample.tensors.items()}
                device = args[1] if len(args) > 1 else kwargs.get("device", "cpu")
                return {k: t.to(device, copy=True) for k, t in sample.tensors.items()}
            return orig(*args, **kwargs)
        return load_file

    class SafeOpenView:
        """``safe_open`` of a captured sample: the tensors served as a read-back."""

        def __init__(self, tensors: Dict[str, Any], framework: str, metadata: Dict[str, str]):
            self._t, self._framework, self._meta = tensors, framework, metadata

        def __enter__(self) -> "SafeOpenView":
            return self

        def __exit__(self, *exc: Any) -> None:
            return None

        def keys(self) -> List[str]:
            return list(self._t)

        def offset_keys(self) -> List[str]:
            return list(self._t)

        def metadata(self) -> Dict[str, str]:
            return dict(self._meta)

        def get_tensor(self, name: str) -> Any:
            t = self._t[name].clone()
            return t.numpy() if self._framework in ("np", "numpy") else t

        def get_slice(self, name: str) -> Any:
            return self.get_tensor(name)

    def safe_open(filename: Any, framework: str, device: Any = "cpu", *args: Any,
                  **kwargs: Any) -> Any:
        s = _active
        rel = None if s is None else s.rel(filename)
        if s is not None and s.has(rel):
            sample = s.readback(rel, f"safe_open({os.fspath(filename)!r})")
            meta = {k: v for k, v in sample.metadata.items() if isinstance(v, str)}
            return SafeOpenView(sample.tensors, framework, meta)
        return orig_safe_open(filename, framework, device, *args, **kwargs)

    return [
        (st_torch, "save_file", saver(orig_save_t, False, "save_file")),
        (st_numpy, "save_file", saver(orig_save_n, True, "save_file")),
        (st_torch, "load_file", loader(orig_load_t, False, "load_file")),
        (st_numpy, "load_file", loader(orig_load_n, True, "load_file")),
        (safetensors, "safe_open", safe_open),
        (st_torch, "safe_open", safe_open),
    ]


# -- os ---------------------------------------------------------------------------------------
def _captured(path: Any) -> Tuple[Optional[CaptureStore], Optional[str]]:
    """(store, rel) when ``path`` names a captured sample or a directory holding some."""
    s = _active
    if s is None or isinstance(path, int):
        return None, None
    rel = s.rel(path)
    if rel is None or not (s.has(rel) or s.is_dir(rel)):
        return None, None
    return s, rel


def _stat_like(orig: Callable[..., Any]) -> Callable[..., Any]:
    def stat(path: Any, *args: Any, **kwargs: Any) -> Any:
        if not args and kwargs.get("dir_fd") is None:
            s, rel = _captured(path)
            if s is not None:
                if s.has(rel):
                    return s.stat_result(rel)
                try:
                    return orig(path, *args, **kwargs)
                except FileNotFoundError:
                    return s.stat_result(rel)
        return orig(path, *args, **kwargs)
    return stat


def _access_hook(path: Any, mode: int, *args: Any, **kwargs: Any) -> bool:
    if not args and kwargs.get("dir_fd") is None:
        s, rel = _captured(path)
        if s is not None and s.has(rel):
            return not mode & os.X_OK
        if s is not None and not _access(path, os.F_OK):
            return True
    return _access(path, mode, *args, **kwargs)


def _listdir_hook(path: Any = None) -> List[Any]:
    s, rel = _captured("." if path is None else path)
    if s is None:
        return _listdir(path) if path is not None else _listdir()
    try:
        real = _listdir(path if path is not None else ".")
    except FileNotFoundError:
        real = []
    have = set(real)
    extra = [n for n in s.children(rel) if n not in have and os.fsencode(n) not in have]
    if isinstance(path, bytes):
        extra = [os.fsencode(n) for n in extra]  # type: ignore[misc]
    return real + extra


class _Entry:
    """An ``os.DirEntry`` for a captured sample or a directory that only holds captured ones."""

    def __init__(self, store: CaptureStore, rel: str, name: Any, path: Any) -> None:
        self._s, self._rel, self.name, self.path = store, rel, name, path

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return not self._s.has(self._rel)

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return self._s.has(self._rel)

    def is_symlink(self) -> bool:
        return False

    def is_junction(self) -> bool:
        return False

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        return self._s.stat_result(self._rel)

    def inode(self) -> int:
        return self.stat().st_ino

    def __fspath__(self) -> Any:
        return self.path

    def __repr__(self) -> str:
        return f"<DirEntry {self.name!r}>"


class _ScandirView:
    """``os.scandir`` of a directory holding captured samples: the real entries (a real file
    shadowed by a captured one of the same name is given as the captured one), then the captured
    entries the disk does not have."""

    def __init__(self, store: CaptureStore, rel: str, path: Any) -> None:
        self._s, self._rel, self._path = store, rel, path
        try:
            self._it: Any = _scandir(path)
        except FileNotFoundError:
            self._it = None
        self._gen = self._entries()

    def _entries(self) -> Any:
        names = self._s.children(self._rel)
        wanted = set(names)
        as_bytes = isinstance(self._path, bytes)
        base = os.fspath(self._path)
        seen = set()
        if self._it is not None:
            for e in self._it:
                name = os.fsdecode(e.name)
                seen.add(name)
                if name in wanted:
                    yield self._fake(name, base, as_bytes)
                else:
                    yield e
        for name in names:
            if name not in seen:
                yield self._fake(name, base, as_bytes)

    def _fake(self, name: str, base: Any, as_bytes: bool) -> _Entry:
        rel = f"{self._rel}/{name}" if self._rel else name
        if as_bytes:
            return _Entry(self._s, rel, os.fsencode(name), os.path.join(base, os.fsencode(name)))
        return _Entry(self._s, rel, name, os.path.join(base, name))

    def __iter__(self) -> "_ScandirView":
        return self

    def __next__(self) -> Any:
        return next(self._gen)

    def __enter__(self) -> "_ScandirView":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._it is not None:
            self._it.close()


def _scandir_hook(path: Any = None) -> Any:
    s, rel = _captured("." if path is None else path)
    if s is None:
        return _scandir(path) if path is not None else _scandir()
    return _ScandirView(s, rel, "." if path is None else path)


def _remove_like(orig: Callable[..., Any], name: str) -> Callable[..., Any]:
    def remove(path: Any, *args: Any, **kwargs: Any) -> None:
        s = _active
        if s is not None and not args and kwargs.get("dir_fd") is None:
            rel = s.rel(path)
            if s.has(rel):
                raise s.refuse(rel, f"os.{name}({os.fspath(path)!r})",
                               "capture cannot take a sample out of the dataset; leave files the "
                               "generator removes again to disk with --exclude GLOB")
        return orig(path, *args, **kwargs)
    return remove


def _rename_like(orig: Callable[..., Any], name: str) -> Callable[..., Any]:
    def rename(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        s = _active
        if s is None or args or kwargs.get("src_dir_fd") is not None or \
                kwargs.get("dst_dir_fd") is not None:
            return orig(src, dst, *args, **kwargs)
        call = f"os.{name}({os.fspath(src)!r}, {os.fspath(dst)!r})"
        srel, drel = s.rel(src), s.rel(dst)
        moving = s.open_files(srel)
        if moving:
            # A file still open under a sample path, renamed into place (a write to a temporary
            # name, then a rename, before the close): it moves; what it holds is captured (or
            # written to disk, outside the captured tree) when it is closed.
            to = drel if drel is not None and s.selects(drel) else None
            if to is not None:
                s.check_process(call, to)
                if s.has(to) or s.open_files(to):
                    raise s.refuse_open_twice(to, call)
            for cf in moving:
                cf.retarget(dst, to)
            return None
        if s.has(srel) or s.is_dir(srel):
            raise s.refuse(srel or "", call, "capture cannot move a captured sample (its key is "
                                             "its path)")
        if drel is not None and s.selects(drel) and not _is_dir_on_disk(os.fspath(src)):
            s.check_process(call, drel)
            _parent_exists(s, drel, dst)
            with _open(src, "rb") as fh:  # FileNotFoundError for a missing source, as the OS
                data = fh.read()
            try:
                sample = from_bytes(data, f"{call}: {os.fspath(src)!r}")
            except Exception:  # noqa: BLE001 - not (yet) a sample: renamed on disk, see below
                sample = None
            if sample is None:
                # A file renamed into place before it is complete (still open and buffered, its
                # writer not done): renamed on disk as asked; capture reads it again when it
                # ends, and captures it then, or says it is on disk (CaptureStore.close).
                orig(src, dst, *args, **kwargs)
                s.renamed_early(drel, call)
                return None
            if s.is_sample(drel, sample):
                s.capture(drel, sample, f"os.{name}")
                _remove(src)
                return None
        return orig(src, dst, *args, **kwargs)
    return rename


def _truncate_hook(path: Any, length: int) -> None:
    s = _active
    rel = None if s is None or isinstance(path, int) else s.rel(path)
    if rel is not None:
        files = s.open_files(rel)
        if files:  # a sample file still being written: truncated as the file would be
            for cf in files:
                cf.truncate(length)
            return None
        if s.has(rel):
            raise s.refuse(rel, f"os.truncate({os.fspath(path)!r}, {length})",
                           "capture cannot change a captured sample in place; write the file "
                           "whole, or leave it to disk with --exclude GLOB")
    return _truncate(path, length)


# -- how the process ends -----------------------------------------------------------------------
_on_exit: Optional[Callable[[int], None]] = None
_exiting = False
_signals: List[Tuple[int, Any]] = []  # (signal, the handler before ours)


def _exit_hook(code: int) -> None:
    """``os._exit(code)`` in the captured process: the ending capture would have had at a
    normal exit (its files left open closed and captured; committed on status 0, the journal
    kept otherwise), then the exit. In a forked child, or re-entered, the plain ``os._exit``."""
    global _exiting
    s = _active
    if s is not None and not _exiting and os.getpid() == s.pid and _on_exit is not None:
        _exiting = True
        try:
            _on_exit(int(code) if isinstance(code, int) else 1)
        except BaseException:  # noqa: BLE001 - the exit must happen
            pass
    _exit(code)


def _signal_handler(signum: int, frame: Any) -> None:
    """SIGTERM / SIGHUP (whose default would end the process at once, leaving what is written
    but not yet journaled nowhere): the generator stops as at an exception, its files are
    captured and journaled, the dataset is left uncommitted for a rerun, and the status says
    the signal (128 + its number). A second signal ends the process at once."""
    signal.signal(signum, signal.SIG_DFL)
    name = signal.Signals(signum).name
    s = _active
    if s is not None and os.getpid() == s.pid:
        s.log(f"{name}: stopping the generator; the samples it wrote are journaled for a "
              "rerun to continue (a second signal ends the process at once)")
    raise SystemExit(128 + signum)


def _install_signals() -> None:
    import threading
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            if signal.getsignal(sig) is signal.SIG_DFL:
                _signals.append((sig, signal.signal(sig, _signal_handler)))
        except (ValueError, OSError):
            pass


# -- installing -------------------------------------------------------------------------------
def _patch(owner: Any, attr: str, value: Any) -> None:
    original = getattr(owner, attr)
    _saved.append((owner, attr, original))
    # Code that scans a module's members for texts (inspect.getmembers + getdoc, as the example
    # generator picks its prompts) must see the same texts under capture as without it: a hook
    # carries the documentation of a Python function it replaces (torch.save), and none where
    # it replaces a builtin (os._exit), which such a scan passes over as a non-function.
    if callable(value) and not isinstance(value, type):
        try:
            value.__doc__ = original.__doc__ if inspect.isfunction(original) else None
        except (AttributeError, TypeError):
            pass
    setattr(owner, attr, value)


def install(store: CaptureStore, on_exit: Optional[Callable[[int], None]] = None) -> None:
    """Routes the generator's sample writes and queries to ``store`` (one store a process).
    ``on_exit(status)``: how capture ends, called by ``os._exit`` in this process (a normal
    exit runs it from ``atexit``); SIGTERM and SIGHUP, left at their defaults by then, end the
    generator as an exception would."""
    global _active, _on_exit, _exiting
    if _active is not None:
        raise RuntimeError("libshard.capture is already installed in this process")
    _active = store
    _on_exit, _exiting = on_exit, False
    _patch(os, "_exit", _exit_hook)
    _patch(os, "truncate", _truncate_hook)
    _install_signals()
    import torch.serialization as ts
    _patch(builtins, "open", _open_hook)
    _patch(io, "open", _open_hook)
    _patch(torch, "save", _save_hook)
    _patch(ts, "save", _save_hook)
    _patch(torch, "load", _load_hook)
    _patch(ts, "load", _load_hook)
    _patch(os, "stat", _stat_like(_stat))
    _patch(os, "lstat", _stat_like(_lstat))
    _patch(os, "access", _access_hook)
    _patch(os, "listdir", _listdir_hook)
    _patch(os, "scandir", _scandir_hook)
    _patch(os, "remove", _remove_like(_remove, "remove"))
    _patch(os, "unlink", _remove_like(_unlink, "unlink"))
    _patch(os, "rename", _rename_like(_rename, "rename"))
    _patch(os, "replace", _rename_like(_replace, "replace"))
    for owner, attr, value in _safetensors_hooks():
        _patch(owner, attr, value)


def uninstall() -> None:
    """Restores every original (tests; the command keeps them until the process ends)."""
    global _active, _on_exit
    while _saved:
        owner, attr, value = _saved.pop()
        setattr(owner, attr, value)
    while _signals:
        sig, before = _signals.pop()
        if signal.getsignal(sig) is _signal_handler:
            signal.signal(sig, before)
    _active, _on_exit = None, None
