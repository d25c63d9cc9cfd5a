"""The Python package's `libshard` command against the CMake build's executable.

A wheel's `libshard` is a console script (_libshard_cli.main, [project.scripts] in pyproject.toml)
that runs the C++ command line inside the extension (libshard._core.cli_main), so the wheel holds
one native module. It must behave as the executable: same stdout, stderr and exit codes, the same
bytes for arguments that are not UTF-8, and the same signals (Python's SIGINT handler and its
ignored SIGPIPE would otherwise make Ctrl-C wait and `libshard info | head` fail differently).
scripts/test_wheel.sh runs the installed console script of a repaired wheel.
"""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import libshard
from conftest import _cli, assert_sample_equal

EXE = _cli()
if not getattr(libshard._core, "HAVE_CLI", False):
    pytest.skip("this extension has no command line (LIBSHARD_BUILD_TOOLS=OFF)", allow_module_level=True)
if EXE is None or not os.path.exists(EXE) or os.path.basename(EXE) != "libshard" or \
        open(EXE, "rb").read(4) != b"\x7fELF":
    pytest.skip("the CMake build's libshard executable is needed to compare against "
                "(set LIBSHARD_CLI)", allow_module_level=True)
ENTRY = [sys.executable, "-c", "from _libshard_cli import main; main()"]


def both(*args, **kw):
    """(executable, console script) results of `libshard ARGS`, as bytes."""
    args = [os.fsencode(a) if isinstance(a, Path) else a for a in args]
    return (subprocess.run([EXE, *args], capture_output=True, **kw),
            subprocess.run([*ENTRY, *args], capture_output=True, **kw))


@pytest.mark.parametrize("args", [
    ["--version"], ["--help"], ["pack", "--help"], [], ["no-such-command"], ["pack"],
    ["info", "/nonexistent/dataset"], ["pack", "/nonexistent/src", "-o", "/nonexistent/out"],
])
def test_same_output_and_exit_code(args):
    exe, entry = both(*args)
    assert (entry.returncode, entry.stdout, entry.stderr) == (exe.returncode, exe.stdout, exe.stderr)
    assert exe.returncode in (0, 1, 2)


def test_same_output_on_a_dataset(eagle_dataset):
    for args in (["info", eagle_dataset], ["info", eagle_dataset, "--json"],
                 ["verify", eagle_dataset]):
        exe, entry = both(*args)
        assert exe.returncode == 0, exe.stderr
        assert (entry.returncode, entry.stdout, entry.stderr) == (0, exe.stdout, exe.stderr)


def test_pack_through_the_console_script_is_bit_exact(eagle_src, eagle_sources, tmp_path):
    out = tmp_path / "ds"
    r = subprocess.run([*ENTRY, "pack", str(eagle_src), "-o", str(out), "--shard-size", "64KiB"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"packed {len(eagle_sources)} samples into {out}")
    ds = libshard.open(out)
    assert len(ds) == len(eagle_sources)
    for i, src in enumerate(eagle_sources):
        assert_sample_equal(ds[i], torch.load(src, weights_only=True), f"sample {i}")


def test_the_console_script_does_not_import_torch():
    """The command line is C++: no seconds of `import torch`, and it runs where torch is missing."""
    code = ("import sys, _libshard_cli; core = _libshard_cli.load_core(); "
            "assert core.HAVE_CLI; print(sorted(m for m in ('torch', 'libshard', 'numpy') "
            "if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_argument_bytes_that_are_not_utf8_reach_the_command(tmp_path):
    missing = os.fsencode(tmp_path) + b"/caf\xe9-\xff"
    exe, entry = both("info", missing)
    assert exe.returncode == 1 and b"caf\xe9-\xff" in exe.stderr
    assert (entry.returncode, entry.stderr) == (1, exe.stderr)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(") ", 1)[1][0]


def _catches_sigint(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    raise AssertionError(f"no SigCgt for {pid}")


@pytest.mark.parametrize("cmd", ["executable", "console script"])
def test_sigint_stops_a_running_command_at_once(cmd, eagle_src, tmp_path):
    """`pack --files-from -` blocks reading stdin: SIGINT must end it by the signal, as Ctrl-C."""
    argv = [EXE] if cmd == "executable" else ENTRY
    # SIGINT at its default in the child, as in a terminal: a test run started in the background
    # by a shell without job control inherits SIGINT ignored, which a command rightly keeps. A
    # handled signal (unlike an ignored one) is reset to the default across exec.
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        p = subprocess.Popen([*argv, "pack", str(eagle_src), "--files-from", "-", "-o",
                              str(tmp_path / "ds")], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        # The console script is ready once it no longer catches SIGINT (Python's handler gone)
        # and it is asleep (in the command line's read of stdin).
        deadline = time.monotonic() + 60
        while _catches_sigint(p.pid) or _state(p.pid) != "S":
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline, f"{cmd} still catches SIGINT after 60 s"
            time.sleep(0.05)
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdin.close(); p.stdout.close(); p.stderr.close()
    assert p.returncode == -signal.SIGINT


@pytest.mark.parametrize("cmd", ["executable", "console script"])
def test_a_closed_stdout_pipe_ends_the_command_by_sigpipe(cmd, eagle_dataset):
    """`libshard info ... | head`-like: the reader is gone, the write raises SIGPIPE."""
    argv = [EXE] if cmd == "executable" else ENTRY
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([*argv, "info", str(eagle_dataset)], stdout=w, stderr=subprocess.PIPE)
    finally:
        os.close(w)
    assert p.returncode == -signal.SIGPIPE, p.stderr
