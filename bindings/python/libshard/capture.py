"""``python -m libshard.capture``: run an unmodified hidden-state generator so that the sample
files it writes under its output directory go into a libshard dataset instead.

::

    python -m libshard.capture --out DATASET [--under OUTPUT_DIR] [--compress auto]
        [--store-dtype float8_e4m3fn] [--include GLOB] [--exclude GLOB] -- script.py ARGS...
    python -m libshard.capture --out DATASET ... -- -m package.module ARGS...
    torchrun --nproc-per-node 8 -m libshard.capture --out DATASET ... -- script.py ARGS...

The writer's flags (``--compress`` ... ``--attr``) are those of ``libshard pack``: both are made
from the library's Writer option table, so they have the same names, bounds and defaults.

The generator runs in this process, as ``python script.py ARGS`` would run it (``sys.argv``,
``sys.path[0]``, ``__main__``). Each sample file it writes under ``OUTPUT_DIR`` (by
``torch.save``, safetensors' ``save_file``, ``open(..., "wb")``, a rename into place: see
:mod:`libshard._capture_hooks`) becomes a sample of ``DATASET`` through :class:`libshard.Writer`,
keyed by its path relative to ``OUTPUT_DIR``: ``libshard unpack DATASET -o DIR`` gives the tree
back, and ``libshard pack`` of a real dump stores the same keys and bytes. What the generator
checks before writing (``os.path.exists``, ``Path.exists``, ``os.listdir``, ``glob``,
``os.scandir``, ``os.stat``) sees the captured samples, so its own skip-if-done logic resumes a
killed run: rerun the same command and the Writer continues from its journal (a kill -9 loses no
journaled sample; the generator redoes the rest). A rerun continues only a write of its own
identity (``--attr``, docs/guide/writing.md#identity): other attributes are refused, naming the
key and both values, and ``--allow-identity-change`` sets the earlier write aside instead. A trainer may read the dataset while it is
written: ``libshard.Loader(DATASET, follow=True)`` serves each sample once it is journaled (within
``--commit-interval`` seconds). Every other file (logs, configs, checkpoints,
files outside ``OUTPUT_DIR``, files that are not samples) goes to disk as usual.

Under torchrun (or a Slurm job array, ``RANK``/``WORLD_SIZE``) each rank writes its own part,
joined into ``DATASET`` by key when the last rank finishes, as Writer parts are; each rank sees its
own part's samples.

The dataset is committed when the generator's script returns or exits with status 0 (after the
interpreter has joined the generator's threads); a failure (an exception, a non-zero exit) leaves
what is journaled for a rerun to continue, uncommitted. Encoding (``--compress``,
``--store-dtype``), checksums and writes run on the Writer's threads, not the generator's.
"""

from __future__ import annotations

import argparse
import atexit
import os
import runpy
import sys
import traceback
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _core
from ._capture_hooks import install
from ._capture_sample import PREFIX
from ._capture_store import CaptureStore
from ._units import parse_bytes

#: Where generators name their output directory, in the order --under's default looks for them.
OUTPUT_FLAGS = ("--output-dir", "--output_dir", "--output-path", "--output_path", "--output",
                "--out-dir", "--out_dir", "--save-dir", "--save_dir")

USAGE = ("python -m libshard.capture --out DATASET [--under OUTPUT_DIR] [options] "
         "-- (script.py | -m module) ARGS...")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m libshard.capture", usage=USAGE,
        description="Run a hidden-state generator so that the sample files it writes under its "
                    "output directory go into a libshard dataset instead (see the module's "
                    "documentation, or docs/guide/capture.md).")
    p.add_argument("--out", required=True, metavar="DATASET",
                   help="the dataset to write (a libshard.Writer output; one part per rank)")
    p.add_argument("--under", metavar="OUTPUT_DIR",
                   help="the generator's output directory, whose sample files are captured "
                        "(default: the value of the script's " + ", ".join(OUTPUT_FLAGS[:5]) +
                        " ... argument)")
    p.add_argument("--include", action="append", default=[], metavar="GLOB",
                   help="capture only files matching GLOB (pack's --include rules; repeatable); "
                        "default: .pt .pth .ckpt .bin .safetensors [.gz] files that hold a "
                        "rank-1 input_ids or token_ids")
    p.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                   help="leave files matching GLOB to disk (pack's --exclude rules; repeatable)")
    _writer_flags(p)
    p.add_argument("--readback-cache", default="1GiB", metavar="SIZE",
                   help="tensor bytes of the latest samples kept to serve torch.load / "
                        "load_file of a file just written (0: none)")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary on stderr")
    return p


#: argparse's type and metavar for a row of the writer's option table, by the row's type; other
#: values go to the table as text (sizes, choices), which it reads as `libshard pack`'s flags.
_ARG_TYPES = {"count": int, "number": float}
_METAVARS = {"count": "N", "number": "SECONDS", "bytes": "SIZE", "choice": "SPEC"}


def _writer_flags(p: argparse.ArgumentParser) -> None:
    """The writer's flags, made from the library's Writer option table (the one ``libshard pack``
    makes its flags from, CommandLineSpellingOf): every row with a flag, its help and its default
    as the table says. A flag not given is not passed on (the Writer's default is the table's)."""
    group = p.add_argument_group(
        "writer options",
        "how the dataset is written: libshard.Writer's options (docs/guide/writing.md#options), "
        "spelled as libshard pack spells them")
    for row in _core.writer_option_table():
        name, flags, helptext = row["name"], row["flags"], row["help"]
        if name == "attrs":
            group.add_argument(*flags, dest=name, action="append", default=argparse.SUPPRESS,
                               metavar="KEY=VALUE", help=helptext + " (repeatable)")
        elif row["negation"]:
            group.add_argument(row["negation"], dest=name, action="store_const", const=False,
                               default=argparse.SUPPRESS, help=helptext)
        elif flags and row["type"] == "bool":
            group.add_argument(*flags, dest=name, action="store_const", const=True,
                               default=argparse.SUPPRESS, help=helptext)
        elif flags:
            group.add_argument(*flags, dest=name, type=_ARG_TYPES.get(row["type"], str),
                               default=argparse.SUPPRESS,
                               metavar=_METAVARS.get(row["type"], "VALUE"), help=helptext)


def writer_options(ns: argparse.Namespace) -> Dict[str, Any]:
    """The libshard.Writer keywords of the writer flags given in ``ns`` (``--attr`` read by the
    library's ParseAttribute, as ``libshard pack --attr``)."""
    out = {row["name"]: getattr(ns, row["name"]) for row in _core.writer_option_table()
           if hasattr(ns, row["name"])}
    if "attrs" in out:
        out["attrs"] = _core.parse_attributes(out["attrs"])
    return out


def _split(argv: Sequence[str]) -> Tuple[List[str], List[str]]:
    """(capture's options, the generator's command) split at ``--``; without ``--``, at the
    first argument that is not an option or an option's value."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    takes_value = {flag for action in _parser()._actions if action.nargs != 0
                   for flag in action.option_strings}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "-m" or not a.startswith("-"):
            break
        i += 2 if a in takes_value else 1
    return argv[:i], argv[i:]


def under_from_args(args: Sequence[str]) -> Optional[str]:
    """The generator's output directory as its arguments name it (OUTPUT_FLAGS), or None."""
    for flag in OUTPUT_FLAGS:
        for i, a in enumerate(args):
            if a == flag and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(flag + "="):
                return a[len(flag) + 1:]
    return None


def _log(message: str) -> None:
    print(PREFIX + message, file=sys.stderr, flush=True)


def _finish(store: CaptureStore, state: Dict[str, Any]) -> None:
    """Run at exit, after the interpreter joined the generator's threads (atexit runs after
    threading's shutdown): commit on success, else keep the journal. Nothing in a child the
    generator forked (the captured process ends the capture)."""
    if os.getpid() != store.pid:
        return
    success = state["exit"] == 0
    try:
        summary = store.close(success)
    except BaseException as e:  # noqa: BLE001 - the exit status must say it
        _log(f"committing {store.out} failed: {e}")
        sys.stderr.flush()
        os._exit(1)
    if state["quiet"]:
        return
    rank = f" (rank {store.writer.rank} of {store.writer.world_size})" \
        if store.writer.world_size > 1 else ""
    earlier = f", {store.earlier} from an earlier run" if store.earlier else ""
    disk = f"; {len(store.to_disk)} file(s) written to disk as not samples" \
        if store.to_disk else ""
    if store.rewrites:
        disk += f"; {store.rewrites} rewrite(s) of captured samples dropped"
    if success:
        joined = " and joined the parts" if getattr(store.writer, "joined", False) else ""
        _log(f"{store.captured} samples captured into {store.out}{rank}{earlier}{disk}; "
             f"committed{joined}")
    else:
        _log(f"the generator failed (exit status {state['exit']}); {store.out}{rank} keeps the "
             f"journaled samples of the {store.captured} captured{earlier}, uncommitted: rerun "
             "the same command to continue")


def main(argv: Optional[Sequence[str]] = None) -> int:
    opts, command = _split(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    ns = parser.parse_args(opts)
    if not command or (command[0] == "-m" and len(command) < 2):
        parser.error("no generator to run: give `-- script.py ARGS...` or `-- -m module ARGS...`")
    module = command[1] if command[0] == "-m" else None
    script_args = command[2:] if module else command[1:]
    under = ns.under or under_from_args(script_args)
    if under is None:
        parser.error("say which directory the generator writes its sample files under: "
                     f"--under OUTPUT_DIR (its arguments name none of {', '.join(OUTPUT_FLAGS)})")
    try:
        readback = parse_bytes(ns.readback_cache, "--readback-cache")
        _core.walk_selects("x.pt", ns.include, ns.exclude)  # a build without pack says so here
        store = CaptureStore(ns.out, under, include=ns.include, exclude=ns.exclude,
                             writer_options=writer_options(ns), readback_bytes=readback, log=_log)
    except (ValueError, _core.Error) as e:
        parser.exit(2, f"{PREFIX}{e}\n")
    for aside in store.writer.set_aside:  # --allow-identity-change, or another world size
        _log(f"set aside {aside}: what {store.out} held of another identity or world size (kept, "
             "not reused)")
    state: Dict[str, Any] = {"exit": 1, "quiet": ns.quiet}
    # os._exit(status) ends the capture as a normal exit with that status would.
    install(store, on_exit=lambda code: _finish(store, {**state, "exit": code}))
    atexit.register(_finish, store, state)
    if module:
        sys.argv = [module, *script_args]
        sys.path.insert(0, os.getcwd())
        run = lambda: runpy.run_module(module, run_name="__main__", alter_sys=True)  # noqa: E731
    else:
        script = command[0]
        sys.argv = [script, *script_args]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        run = lambda: runpy.run_path(script, run_name="__main__")  # noqa: E731
    try:
        run()
        state["exit"] = 0
    except SystemExit as e:
        code = e.code
        if code is None:
            state["exit"] = 0
        elif isinstance(code, int):
            state["exit"] = code
        else:
            print(code, file=sys.stderr)
            state["exit"] = 1
    except BaseException:  # noqa: BLE001 - reported as python would, then the exit status
        traceback.print_exc()
        state["exit"] = 1
    return state["exit"]


if __name__ == "__main__":
    sys.exit(main())
