"""The dataset a capture writes, and the file tree its generator sees (``libshard.capture``).

One :class:`CaptureStore` per captured process: a :class:`libshard.Writer` (one part per rank,
joined as Writer parts are), the rule that says which written files are samples, and the view of
the captured samples as files under the generator's output directory (``under``): existence,
``stat``, directory listings, and read-backs of samples written by this run.

Which files are samples: a path under ``under`` that ``libshard pack``'s walk of that directory
would take as a source (the library's rule, WalkSelects: no hidden component; ``--include`` /
``--exclude`` globs, default the sample extensions ``.pt .pth .ckpt .bin .safetensors`` and their
``.gz``). With the default selection, a file whose content has no token length (no rank-1
``input_ids`` or ``token_ids``, the library's InferLength) is not a hidden-state sample, e.g.
SpecForge's ``vocab_mapping.pt``: it goes to disk as a file. With ``--include``, every selected
file is a sample.

The key of a sample is its path relative to ``under``, so ``libshard unpack`` gives the tree back
and a pack of a real dump of the same files stores the same keys.

Thread-safe: generators save from thread pools; samples reach the Writer one at a time.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import gc
import os
import stat as stat_mod
import sys
import threading
import time
import weakref
import zlib
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from . import _core
from ._capture_sample import PREFIX, Sample, from_bytes
from ._core import InvalidArgumentError, UnsupportedError
from ._writer import Writer

# Bound before any hook is installed: the store's own file operations bypass the hooks.
_REAL_STAT = os.stat
_REAL_SCANDIR = os.scandir
_REAL_UNLINK = os.unlink
_REAL_OPEN = open

#: Seconds ``close`` waits for a generator thread that is in the middle of a capture (an
#: ``os._exit`` from another thread) before it leaves the journal as it is.
CLOSE_WAIT_SECONDS = 60.0
#: Files ``close`` looks at under ``under`` for sample files that went to disk around the hooks.
SWEEP_LIMIT = 200_000


def _after_fork_in_child(ref: "weakref.ref[CaptureStore]") -> None:
    """In a child the captured process forked: the Writer's threads are the parent's, so its
    C++ writer must never be stopped, flushed or destroyed here (that would wait on threads that
    do not exist in this process, or write the parent's files). It is set aside for good: kept
    alive (one reference more, so no destructor runs) and detached from the Writer."""
    store = ref()
    writer = getattr(store, "writer", None)
    core = getattr(writer, "_core", None)
    if core is None:
        return
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(core))
    writer._core = None
    writer._closed = True


class CaptureStore:
    """See the module docstring. ``readback_bytes``: tensor bytes of the latest samples kept to
    answer read-backs (``torch.load`` of a file just written); 0 keeps none."""

    def __init__(self, out: str, under: str, *, include: List[str], exclude: List[str],
                 writer_options: Dict[str, Any], readback_bytes: int,
                 log: Callable[[str], None]) -> None:
        self.out = os.fspath(out)
        self.under = os.path.normpath(os.path.abspath(under))
        self._prefix = self.under if self.under.endswith("/") else self.under + "/"
        self.include = list(include)
        self.exclude = list(exclude)
        self.content_rule = not self.include
        self._log = log
        self._lock = threading.RLock()
        self.writer = Writer(self.out, **writer_options)
        self._sizes: Dict[str, int] = {}
        core = self.writer._core
        if core is not None:  # an earlier run's samples (journal or committed dataset)
            for key, size in core.existing_sources():
                self._sizes[key] = int(size)
        self.earlier = len(self._sizes)
        self._children: Dict[str, Set[str]] = collections.defaultdict(set)
        for key in self._sizes:
            self._add_to_tree(key)
        self._mtime = time.time()
        self._readback: "collections.OrderedDict[str, Sample]" = collections.OrderedDict()
        self._readback_held = 0
        self.readback_limit = int(readback_bytes)
        self.captured = 0
        self.captured_bytes = 0
        self.rewrites = 0
        self.to_disk: Dict[str, str] = {}  # rel path -> why it went to disk
        self.closed = False
        self.pid = os.getpid()
        self._dataset: Any = None
        self._started_ns = time.time_ns()
        # Files opened on sample paths and not closed yet (CaptureFile), by the generator.
        self._open: "weakref.WeakSet[Any]" = weakref.WeakSet()
        # Sample writes refused in forked children, told to this process through a pipe that
        # every fork inherits (non-blocking: a child never waits on it).
        self._notes_r, self._notes_w = os.pipe()
        os.set_blocking(self._notes_r, False)
        os.set_blocking(self._notes_w, False)
        self.left_open: List[Tuple[str, str]] = []  # (path, what became of it)
        self.around: List[str] = []  # sample files on disk written around the hooks
        self._early: Dict[str, str] = {}  # rel -> the rename that put it there unfinished
        os.register_at_fork(after_in_child=functools.partial(_after_fork_in_child,
                                                             weakref.ref(self)))
        try:
            self._dev = _REAL_STAT(self.under).st_dev
        except OSError:
            self._dev = 0

    # -- paths --------------------------------------------------------------------------------
    def rel(self, path: Any) -> Optional[str]:
        """``path`` relative to ``under`` ('' for ``under`` itself), or None when it is not under
        it (or not a path: a file descriptor, a file object)."""
        if isinstance(path, int):
            return None
        try:
            p = os.fspath(path)
        except TypeError:
            return None
        if isinstance(p, bytes):
            p = os.fsdecode(p)
        if not p:
            return None
        if p[0] != "/":
            p = os.path.join(os.getcwd(), p)
        p = os.path.normpath(p)
        if p == self.under:
            return ""
        if not p.startswith(self._prefix):
            return None
        return p[len(self._prefix):]

    def selects(self, rel: Optional[str]) -> bool:
        """Whether a file at ``rel`` is a sample by path (pack's walk rule)."""
        return bool(rel) and _core.walk_selects(rel, self.include, self.exclude)

    def full(self, rel: str) -> str:
        return os.path.join(self.under, rel) if rel else self.under

    def has(self, rel: Optional[str]) -> bool:
        return rel is not None and rel in self._sizes

    def is_dir(self, rel: Optional[str]) -> bool:
        """A directory holding captured samples (``under`` itself once it holds any)."""
        return rel is not None and rel in self._children

    def children(self, rel: str) -> List[str]:
        with self._lock:
            return sorted(self._children.get(rel, ()))

    def _add_to_tree(self, key: str) -> None:
        parts = key.split("/")
        for i in range(len(parts)):
            self._children["/".join(parts[:i])].add(parts[i])

    # -- what stat says -----------------------------------------------------------------------
    def stat_result(self, rel: str) -> os.stat_result:
        """A regular file (size: the sample's tensor bytes) or a directory."""
        ino = zlib.crc32(rel.encode("utf-8", "surrogateescape")) | (1 << 40)
        t = self._mtime
        ns = int(t * 1e9)
        if rel in self._sizes:
            mode, size, nlink = stat_mod.S_IFREG | 0o644, self._sizes[rel], 1
        else:
            mode, size, nlink = stat_mod.S_IFDIR | 0o755, 4096, 2
        return os.stat_result(
            (mode, ino, self._dev, nlink, os.getuid(), os.getgid(), size, int(t), int(t), int(t)),
            {"st_atime": t, "st_mtime": t, "st_ctime": t,
             "st_atime_ns": ns, "st_mtime_ns": ns, "st_ctime_ns": ns})

    def log(self, message: str) -> None:
        self._log(message)

    def renamed_early(self, rel: str, call: str) -> None:
        """``call`` renamed a file into the sample path ``rel`` that held no readable sample
        yet (its writer not done with it): on disk for now, captured when capture ends."""
        with self._lock:
            self._early[rel] = call

    def _capture_renamed_early(self) -> None:
        for rel, call in sorted(self._early.items()):
            path = self.full(rel)
            if rel in self._sizes:
                continue
            try:
                with _REAL_OPEN(path, "rb") as fh:
                    data = fh.read()
                sample = from_bytes(data, f"{call}: {path!r}")
            except Exception as e:  # noqa: BLE001 - left on disk, and said
                self._log(f"{call} put {path} in place before it was complete, and it is still "
                          f"no readable sample ({e}); it stays on disk, not in {self.out}")
                self.to_disk[rel] = "renamed into place, not a readable sample"
                continue
            if self.is_sample(rel, sample):
                self.capture(rel, sample, call)
                _REAL_UNLINK(path)

    # -- files open on sample paths ---------------------------------------------------------
    def opened(self, f: Any) -> None:
        self._open.add(f)

    def closed_file(self, f: Any) -> None:
        self._open.discard(f)

    def open_files(self, rel: Optional[str]) -> List[Any]:
        """The files open on ``rel`` in this process (not closed yet)."""
        if rel is None:
            return []
        return [f for f in list(self._open) if not f.closed and f.rel == rel]

    def refuse_open_twice(self, rel: str, call: str) -> UnsupportedError:
        return UnsupportedError(
            f"{PREFIX}{call}: {self.full(rel)} is already open for writing in this process and "
            "not closed yet; capture takes a sample file written whole through one file object: "
            "close the first one before writing the file again")

    # -- processes --------------------------------------------------------------------------
    def check_process(self, call: str, rel: str) -> None:
        """UnsupportedError when a forked child writes a sample: its writes cannot reach this
        process's dataset. The captured process is told (it then refuses to commit)."""
        if os.getpid() == self.pid:
            return
        note = f"{os.getpid()}\t{self.full(rel)}\t{call}\n".encode("utf-8", "surrogateescape")
        try:
            os.write(self._notes_w, note[:512])
        except OSError:
            pass  # the pipe is full: the captured process knows of some already
        raise UnsupportedError(
            f"{PREFIX}{call}: {self.full(rel)}: written from process {os.getpid()}, a child "
            f"forked by the captured process {self.pid}; capture writes the samples of the "
            "process it started, so this sample cannot reach the dataset (and the capture will "
            "not commit): save samples in that process, start the workers with the 'spawn' "
            "method and run each writing process under capture (torchrun ... -m "
            "libshard.capture, one part per rank), or leave these files to disk with --exclude")

    def _forked_writes(self) -> List[str]:
        out = b""
        while True:
            try:
                chunk = os.read(self._notes_r, 65536)
            except (BlockingIOError, OSError):
                break
            if not chunk:
                break
            out += chunk
        lines = []
        for line in out.decode("utf-8", "replace").splitlines():
            pid, _, rest = line.partition("\t")
            path, _, call = rest.partition("\t")
            lines.append(f"{path} (process {pid}: {call})")
        return lines

    # -- capturing ----------------------------------------------------------------------------
    def _check_open(self, what: str) -> None:
        if os.getpid() != self.pid:
            raise UnsupportedError(
                f"{PREFIX}{what}: written from process {os.getpid()}, a child forked by the "
                f"captured process {self.pid}; capture writes the samples of the process it "
                "started: save samples in that process, or run each writing process under "
                "capture (torchrun ... -m libshard.capture, one part per rank)")
        if self.closed:
            raise UnsupportedError(f"{PREFIX}{what}: the capture into {self.out} has ended (the "
                                   "generator's main script returned); no sample can be added")

    def is_sample(self, rel: str, sample: Sample) -> bool:
        """Applies the content rule; a file that is not a sample is noted (once) as going to
        disk."""
        if not self.content_rule or sample.length() is not None:
            return True
        why = ("holds no rank-1 input_ids or token_ids, so it is not a hidden-state sample: "
               "written to disk as a file (name it with --include to capture it anyway)")
        if rel not in self.to_disk:
            self.to_disk[rel] = why
            self._log(f"{self.full(rel)} {why}")
        return False

    def capture(self, rel: str, sample: Sample, call: str) -> None:
        """Writes ``sample`` under key ``rel``; ``call`` names the generator's call in errors."""
        path = self.full(rel)
        with self._lock:
            self._check_open(f"{call} of {path}")
            if rel in self._sizes:
                self.rewritten(rel, call)
                return
            try:
                self.writer.write({**sample.tensors, **sample.metadata}, key=rel)
            except InvalidArgumentError as e:
                raise InvalidArgumentError(
                    f"{PREFIX}{call}: {path}: {e}. Every sample of a dataset has the same fields "
                    "(the first one captured set them); leave files of another kind to disk with "
                    "--exclude GLOB") from e
            self._sizes[rel] = sample.nbytes
            self._add_to_tree(rel)
            self.captured += 1
            self.captured_bytes += sample.nbytes
            if self.readback_limit > 0 and not any(t.is_cuda for t in sample.tensors.values()):
                self._readback[rel] = sample
                self._readback_held += sample.nbytes
                while self._readback and self._readback_held > self.readback_limit:
                    _, old = self._readback.popitem(last=False)
                    self._readback_held -= old.nbytes

    def rewritten(self, rel: str, call: str) -> None:
        """The generator wrote a sample it had written before (this run or an earlier one): the
        dataset keeps the first one, since a key occurs once (a deterministic generator writes
        the same bytes again). Said once, counted in the summary."""
        with self._lock:
            self._check_open(f"{call} of {self.full(rel)}")
            self.rewrites += 1
            if self.rewrites == 1:
                self._log(f"{call}: {self.full(rel)} is already a sample of {self.out}: the "
                          "generator wrote it again (its skip-if-done check did not skip it); "
                          "the sample captured first is kept, the new one dropped (said once; "
                          "the summary counts them)")

    def refuse(self, rel: str, call: str, what: str) -> UnsupportedError:
        """The error for an operation on a captured sample that capture cannot honour."""
        return UnsupportedError(f"{PREFIX}{call}: {self.full(rel)} is a sample captured into "
                                f"{self.out}, not a file on disk; {what}")

    # -- read-backs ---------------------------------------------------------------------------
    def readback(self, rel: str, call: str) -> Sample:
        """The captured sample at ``rel``, for a read-back of its file (the hooks shape it as
        ``torch.load`` or ``load_file`` returns it; the caller copies its tensors): from the
        samples this run keeps in memory, else from the committed dataset (samples of an
        earlier, finished run); otherwise an error that says where to read it."""
        with self._lock:
            cached = self._readback.get(rel)
            if cached is not None:
                self._readback.move_to_end(rel)
                return cached
            ds = self._committed()
        if ds is not None:
            try:
                i = ds.find(rel)
            except KeyError:
                i = None
            if i is not None:
                got = ds[i]
                tensors = {k: v for k, v in got.items() if hasattr(v, "dtype")}
                metadata = {k: v for k, v in got.items() if k not in tensors}
                return Sample(tensors, metadata, dict(got), "dataset")
        raise self.refuse(
            rel, call,
            "capture serves read-backs of the samples this run wrote (the latest "
            f"{self.readback_limit} bytes of them, --readback-cache) and of a finished dataset, "
            "and this one is neither (written by an earlier, interrupted run, or evicted); read "
            f"it from the dataset once capture ends: ds = libshard.open({self.out!r}); "
            f"ds[ds.find({rel!r})]")

    def _committed(self) -> Any:
        """The committed dataset this run appends to (samples of an earlier, finished run)."""
        if self._dataset is None:
            from ._dataset import open as open_dataset
            path = self.writer.path
            self._dataset = False
            if os.path.exists(os.path.join(path, "manifest.json")):
                try:
                    self._dataset = open_dataset(path)
                except _core.Error:
                    self._dataset = False
        return self._dataset or None

    # -- the end ------------------------------------------------------------------------------
    def _close_left_open(self) -> None:
        """Closes the sample files the generator left open (an exit without close, a file in a
        reference cycle, an ``os._exit``, a signal): each is captured, or written to disk as it
        is when it holds no readable sample, and listed (:attr:`left_open`)."""
        gc.collect()  # files only a reference cycle still held close (and are captured) now
        for f in sorted(list(self._open), key=lambda f: os.fspath(f.name)):
            what = f.close_left_open()
            if what:
                self.left_open.append((os.fspath(f.name), what))
        if self.left_open:
            self._log(f"{len(self.left_open)} sample file(s) were still open when the generator "
                      "ended (never closed): " + "; ".join(
                          f"{p}: {w}" for p, w in self.left_open[:10]) +
                      ("; ..." if len(self.left_open) > 10 else ""))

    def _sweep(self) -> None:
        """Sample files (by pack's rule) that appeared on disk under ``under`` during the run
        without passing the hooks (os.open/os.write, io.FileIO, mmap, a child process, a C
        extension): on disk, not in the dataset; said, naming them."""
        seen = 0
        stack = [self.under]
        while stack and seen < SWEEP_LIMIT:
            d = stack.pop()
            try:
                it = _REAL_SCANDIR(d)
            except OSError:
                continue
            with it:
                for e in it:
                    seen += 1
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                            continue
                        if not e.is_file(follow_symlinks=False) or \
                                e.stat(follow_symlinks=False).st_mtime_ns < self._started_ns:
                            continue
                    except OSError:
                        continue
                    rel = self.rel(e.path)
                    if rel and rel not in self._sizes and rel not in self.to_disk and \
                            self.selects(rel):
                        self.around.append(e.path)
        if self.around:
            self.around.sort()
            self._log(
                f"{len(self.around)} sample file(s) were written to disk under {self.under} "
                "around capture's hooks (through os.open/os.write, io.FileIO, mmap, a child "
                "process or a C extension), so they are on disk and NOT in "
                f"{self.out}: {', '.join(self.around[:5])}{', ...' if len(self.around) > 5 else ''}"
                f"; write them with open/torch.save/safetensors' save_file, or add them with "
                f"`libshard pack {self.under} -o {self.out} --append` once capture ended")

    def close(self, success: bool) -> Optional[Dict[str, Any]]:
        """Ends the capture: the files the generator left open are closed (captured), then it
        commits (``success``: the generator finished) and joins the parts as a Writer does;
        otherwise leaves what is journaled for a rerun to continue. Returns the Writer's summary
        when committed. Never commits when a forked child's sample writes were refused (they
        are not in the dataset): InvalidArgumentError naming them, the journal kept. In a
        forked child it does nothing (the captured process ends the capture)."""
        if os.getpid() != self.pid:
            return None
        if not self._lock.acquire(timeout=CLOSE_WAIT_SECONDS):
            self._log(f"a generator thread is still writing a sample into {self.out} after "
                      f"{CLOSE_WAIT_SECONDS:.0f} s; the journal keeps what was journaled, "
                      "uncommitted: rerun the same command to continue")
            raise UnsupportedError(f"{PREFIX}{self.out}: not committed (a generator thread was "
                                   "still writing when the process ended)")
        try:
            if self.closed:
                return self.writer.summary
            failure: Optional[BaseException] = None
            try:
                self._close_left_open()
                self._capture_renamed_early()
            except BaseException as e:  # noqa: BLE001 - the journal is kept, then raised
                failure = e
            self.closed = True
            self._readback.clear()
            forked = self._forked_writes()
            if forked:
                failure = failure or InvalidArgumentError(
                    f"{PREFIX}{len(forked)} sample file(s) were written by processes forked from "
                    f"the captured one and refused there, so they are not in {self.out}: "
                    f"{'; '.join(forked[:5])}{'; ...' if len(forked) > 5 else ''}. The dataset "
                    "is left uncommitted (its journal kept): write the samples from the "
                    "captured process, or run each writing process under capture (torchrun ... "
                    "-m libshard.capture), then rerun")
            try:
                self._sweep()
            except OSError:
                pass
            if success and failure is None:
                self.writer.close()
                return self.writer.summary
            try:
                self.writer.flush()
            except _core.Error as e:  # the generator's own failure is what the user needs
                print(f"{PREFIX}{self.out}: {e}", file=sys.stderr)
            self.writer.abort()
            if failure is not None:
                if success:
                    raise failure
                self._log(str(failure).removeprefix(PREFIX))
            return None
        finally:
            self._lock.release()
