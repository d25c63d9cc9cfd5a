#!/usr/bin/env python3
"""The exact text of the main user-facing errors (pack, open, Loader options, Writer, merge,
capture and the command line's usage), as a committed golden file, so that a change to a message
is a visible diff in review: tests/python/golden/error_messages.txt, checked by
tests/python/test_error_goldens.py.

    PYTHONPATH=build/python LIBSHARD_CLI=build/converters/libshard \\
        python3 scripts/error_goldens.py            # compare; exit 1 and a diff when they differ
    ... python3 scripts/error_goldens.py --update   # rewrite the golden file after a deliberate change

Each case runs in a fresh temporary directory (written as <TMP> in the text); a Python case
records ``ExceptionType: message``, a command-line case its exit status and stderr.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "python" / "golden" / "error_messages.txt"


def _dataset(tmp: Path) -> Path:
    import torch

    import libshard
    out = tmp / "ds"
    with libshard.Writer(out, fsync=False, attrs={"target_model": "org/model"}) as w:
        for i in range(3):
            w.write({"input_ids": torch.arange(4) + i, "hidden": torch.zeros(4, 2)}, key=f"s{i}")
    return out


def _sources(tmp: Path) -> Path:
    import torch
    src = tmp / "src"
    src.mkdir()
    for i in range(2):
        torch.save({"input_ids": torch.arange(3) + i}, src / f"a{i}.pt")
    return src


def python_cases() -> Dict[str, Callable[[Path], object]]:
    import torch

    import libshard

    def loader(**kw):
        return lambda t: libshard.Loader(_dataset(t), **kw)

    def write_twice(t: Path):
        w = libshard.Writer(t / "w", fsync=False)
        w.write({"input_ids": torch.arange(3)}, key="a")
        w.write({"input_ids": torch.arange(3), "x": torch.ones(2)}, key="b")

    def write_key(t: Path):
        w = libshard.Writer(t / "w", fsync=False)
        w.write({"input_ids": torch.arange(3)}, key="a")
        w.write({"input_ids": torch.arange(3)}, key="a")

    def merge_other(t: Path):
        libshard.pack(_sources(t), t / "p")
        return libshard.merge(t / "m", [_dataset(t), t / "p"])

    def not_a_dataset(t: Path):
        (t / "d").mkdir()
        (t / "d" / "notes.txt").write_text("x")
        return libshard.open(t / "d")

    def damaged_manifest(t: Path):
        ds = _dataset(t)
        (ds / "manifest.json").write_text("{broken")
        return libshard.open(ds)

    def resume_other_dataset(t: Path):
        a = libshard.Loader(_dataset(t), batch_size=1)
        next(iter(a))
        state = a.state_dict()
        with libshard.Writer(t / "b", fsync=False, attrs={"target_model": "org/other"}) as w:
            for i in range(3):
                w.write({"input_ids": torch.arange(4) + i, "hidden": torch.zeros(4, 2)},
                        key=f"s{i}")
        libshard.Loader(t / "b", batch_size=1).load_state_dict(state)

    def resume_other_seed(t: Path):
        ds = _dataset(t)
        a = libshard.Loader(ds, batch_size=1, seed=1)
        next(iter(a))
        libshard.Loader(ds, batch_size=1, seed=2).load_state_dict(a.state_dict())

    return {
        "open: no such directory": lambda t: libshard.open(t / "missing"),
        "open: not a dataset": not_a_dataset,
        "open: damaged manifest": damaged_manifest,
        "open: cache_size": lambda t: libshard.open(_dataset(t), cache_size="lots"),
        "open: follow with read_ahead": lambda t: libshard.open(t / "x", follow=True,
                                                                read_ahead={}),
        "Loader: batch_size": loader(batch_size=0),
        "Loader: collate": loader(collate="zip"),
        "Loader: memory_budget": loader(memory_budget="lots"),
        "Loader: fields empty": loader(fields=[]),
        "Loader: unknown field": loader(fields=["nope"]),
        "Loader: engine": loader(engine="warp"),
        "Loader: on_error": loader(on_error="maybe"),
        "Loader: expect": loader(expect={"target_model": "other/model"}),
        "Loader: sampler and max_tokens": loader(sampler=[0, 1], max_tokens=8),
        "Loader: sampler value": lambda t: list(libshard.Loader(_dataset(t),
                                                                sampler=[0, 1.5])),
        "Loader: resume on another dataset": resume_other_dataset,
        "Loader: resume with another seed": resume_other_seed,
        "Writer: compress": lambda t: libshard.Writer(t / "w", compress="lz9"),
        "Writer: store_dtype": lambda t: libshard.Writer(t / "w", store_dtype="int4"),
        "Writer: shard_size": lambda t: libshard.Writer(t / "w", shard_size="big"),
        "Writer: attrs": lambda t: libshard.Writer(t / "w", attrs={"layers": [1, 2]}),
        "Writer: another schema": write_twice,
        "Writer: a key twice": write_key,
        "pack: no source": lambda t: libshard.pack(t / "missing", t / "out"),
        "pack: not a sample": lambda t: (t / "s").mkdir() or (t / "s" / "a.pt").write_bytes(
            b"not a pickle") and libshard.pack(t / "s", t / "out"),
        "merge: another schema": merge_other,
        "env: a bad variable": lambda t: _with_env("LIBSHARD_S3_CONNECTIONS", "0",
                                                   lambda: libshard.open(_dataset(t))),
    }


def _with_env(name: str, value: str, fn: Callable[[], object]) -> object:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        return fn()
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def cli_cases() -> Dict[str, Callable[[Path], List[str]]]:
    return {
        "cli: no command": lambda t: [],
        "cli: unknown command": lambda t: ["frobnicate"],
        "cli: pack without -o": lambda t: ["pack", str(_sources(t))],
        "cli: pack --shard-size": lambda t: ["pack", str(_sources(t)), "-o", str(t / "o"),
                                             "--shard-size", "big"],
        "cli: pack --compress": lambda t: ["pack", str(_sources(t)), "-o", str(t / "o"),
                                           "--compress", "lz9"],
        "cli: info of nothing": lambda t: ["info", str(t / "missing")],
        "cli: verify with an unknown flag": lambda t: ["verify", str(t), "--fast"],
        "cli: merge of one": lambda t: ["merge", str(t / "m")],
    }


def capture_cases() -> Dict[str, List[str]]:
    return {
        "capture: no generator": ["--out", "DS"],
        "capture: no --under": ["--out", "DS", "--", "gen.py"],
        "capture: --compress": ["--out", "DS", "--under", "OUT", "--compress", "lz9", "--",
                                "gen.py"],
    }


def _clean(text: str, tmp: Path) -> str:
    text = text.replace(os.path.realpath(tmp), "<TMP>").replace(str(tmp), "<TMP>")
    text = re.sub(r"0x[0-9a-f]{6,}", "0x…", text)  # object addresses
    return text.rstrip()


def render() -> str:
    cli = os.environ.get("LIBSHARD_CLI") or shutil.which("libshard")
    blocks: List[Tuple[str, str]] = []
    for name, fn in python_cases().items():
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            try:
                fn(tmp)
                got = "(no error)"
            except Exception as e:  # noqa: BLE001 - the error is what is recorded
                got = f"{type(e).__name__}: {e}"
            blocks.append((name, _clean(got, tmp)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBSHARD_S3")}
    for name, args in cli_cases().items():
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            argv = args(tmp)
            if cli is None:
                got = "(no command-line tool built)"
            else:
                r = subprocess.run([cli, *argv], capture_output=True, text=True, env=env)
                got = f"exit {r.returncode}\n{r.stderr}"
            blocks.append((name, _clean(got, tmp)))
    for name, argv in capture_cases().items():
        r = subprocess.run([sys.executable, "-m", "libshard.capture", *argv],
                           capture_output=True, text=True, env=env)
        blocks.append((name, f"exit {r.returncode}\n{r.stderr}".rstrip()))
    return "".join(f"== {name}\n{text}\n\n" for name, text in blocks)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--update", action="store_true", help="rewrite the golden file")
    args = p.parse_args()
    now = render()
    if args.update:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(now)
        print(f"wrote {GOLDEN.relative_to(ROOT)}")
        return 0
    want = GOLDEN.read_text() if GOLDEN.exists() else ""
    if now == want:
        return 0
    sys.stdout.writelines(difflib.unified_diff(
        want.splitlines(True), now.splitlines(True), str(GOLDEN.relative_to(ROOT)), "now"))
    print("\nthe error messages changed: review the diff, then run "
          "scripts/error_goldens.py --update", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
