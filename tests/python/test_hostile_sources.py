"""Hostile source files given to `libshard pack` / `libshard.pack`: a clear error naming the file
(or, with on_error="skip", the file listed in skipped.txt and the good files packed), quickly and
in bounded memory; never a crash, a hang, an OOM or a dataset that does not open.

Every pack runs in a child process with a liveness timeout and an address-space limit, so a
regression fails the test instead of hanging the session or exhausting the machine; its peak RSS
comes from wait4."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import zlib
from pathlib import Path

import pytest
import torch

import libshard
from conftest import _cli

TIMEOUT = 60  # liveness only: each of these finishes in a few seconds
AS_LIMIT = 4 << 30  # a safety net for regressions: far above what any of these needs
MiB = 1 << 20


def cli() -> str:
    path = _cli()
    if path is None:
        pytest.skip("libshard binary not built (set LIBSHARD_CLI)")
    return path


# Forks and execs the command from a small interpreter and prints the child's wait4 peak RSS to
# the pipe it is given. Not from this process: a child forked from it starts with its pages resident, and the
# kernel keeps that high-water mark across exec, so ru_maxrss would be at least this test
# process's peak (which grows with the suites run before).
_MEASURE = textwrap.dedent("""
    import os, resource, sys
    limit, fd = int(sys.argv[1]), int(sys.argv[2])
    pid = os.fork()
    if pid == 0:
        os.close(fd)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.execvp(sys.argv[3], sys.argv[3:])
    _, status, usage = os.wait4(pid, 0)
    os.write(fd, str(usage.ru_maxrss * 1024).encode())
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # killed by a signal: so is this process, so the caller sees the signal
        import signal
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.kill(os.getpid(), -code)
    sys.exit(code)
""")


def run_measured(args, timeout=TIMEOUT):
    """Runs `args`; returns (returncode, stdout, stderr, peak RSS in bytes of that child)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        r, w = os.pipe()
        proc = subprocess.Popen([sys.executable, "-S", "-c", _MEASURE, str(AS_LIMIT), str(w)] +
                                [str(a) for a in args], stdout=out, stderr=err, pass_fds=(w,),
                                env=os.environ.copy(), start_new_session=True)
        os.close(w)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            os.close(r)
            pytest.fail(f"{args[:2]} did not finish within {timeout} s (a hang?)")
        rss = os.read(r, 64)
        os.close(r)
        out.seek(0)
        err.seek(0)
        return (proc.returncode, out.read().decode(errors="replace"),
                err.read().decode(errors="replace"), int(rss or b"0"))


def pack_cli(src: Path, out: Path, *extra):
    return run_measured([cli(), "pack", src, "-o", out, "-q", "--no-fsync", *extra])


def save_good(path: Path) -> dict:
    sample = {"x": torch.arange(4, dtype=torch.float32)}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(sample, path)
    return sample


def save_bomb(path: Path) -> None:
    """The issue's pickle bomb: 3 MB on disk, 1 TB of metadata once flattened."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"x": torch.zeros(4), "meta": ["a" * (1 << 20)] * 1_000_000}, path)


def write_gzip_bomb(path: Path, member_bytes: int, members: int) -> None:
    """`members` concatenated gzip members, each `member_bytes` of zeros."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    member = z.compress(bytes(member_bytes)) + z.flush()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(member * members)


def write_safetensors(path: Path, header: dict, data: bytes) -> None:
    h = json.dumps(header).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)


# ---- 1. pickle bomb -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bomb_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bomb")
    save_bomb(root / "alone" / "bomb.pt")
    save_good(root / "mixed" / "a_good.pt")
    save_bomb(root / "mixed" / "b_bomb.pt")
    return root


def test_pickle_bomb_fails_fast_naming_the_file(bomb_dirs, tmp_path):
    rc, _, err, rss = pack_cli(bomb_dirs / "alone", tmp_path / "out")
    assert rc == 1, err
    assert "bomb.pt" in err and "FORMAT.md §5" in err, err
    assert "bad_alloc" not in err
    assert rss < 256 * MiB, f"peak RSS {rss / MiB:.0f} MiB"


def test_pickle_bomb_beside_a_good_file_is_skipped(bomb_dirs, tmp_path):
    out = tmp_path / "out"
    rc, _, err, rss = pack_cli(bomb_dirs / "mixed", out, "--on-error", "skip")
    assert rc == 0, err
    assert "terminate" not in err
    report = (out / "skipped.txt").read_text()
    assert report.startswith("b_bomb.pt\t") and "FORMAT.md §5" in report, report
    ds = libshard.open(out)
    assert len(ds) == 1
    assert torch.equal(ds[0]["x"], torch.arange(4, dtype=torch.float32))
    assert rss < 256 * MiB, f"peak RSS {rss / MiB:.0f} MiB"


def test_python_pack_survives_the_bomb(bomb_dirs, tmp_path):
    """libshard.pack(on_error="skip") beside the bomb used to kill the interpreter."""
    out = tmp_path / "out"
    code = textwrap.dedent(f"""
        import json, libshard
        s = libshard.pack({str(bomb_dirs / "mixed")!r}, {str(out)!r}, on_error="skip")
        print(json.dumps([s["samples_added"], [k["path"] for k in s["skipped"]]]))
    """)
    rc, stdout, err, _ = run_measured([sys.executable, "-c", code])
    assert rc == 0, err
    assert json.loads(stdout.strip().splitlines()[-1]) == [1, ["b_bomb.pt"]]
    with pytest.raises(libshard.ResourceExhaustedError, match="b_bomb.pt") as info:
        libshard.pack(bomb_dirs / "mixed", tmp_path / "fail")
    assert isinstance(info.value, MemoryError)


# ---- 2. multi-member gzip bomb ------------------------------------------------------------------

def test_multi_member_gzip_is_refused_at_the_limit_in_bounded_memory(tmp_path):
    src = tmp_path / "src"
    # 20 members of 64 MiB zeros: 1.3 GiB inflated from ~1.3 MB, refused at 256 MiB.
    write_gzip_bomb(src / "b_bomb.pt.gz", 64 * MiB, 20)
    rc, _, err, rss = pack_cli(src, tmp_path / "out", "--max-decompressed", "256MiB")
    assert rc == 1, err
    assert "b_bomb.pt.gz" in err and "--max-decompressed" in err, err
    assert rss < (256 + 64) * MiB, f"peak RSS {rss / MiB:.0f} MiB for a 256 MiB limit"
    # Beside a good file under --on-error skip: listed, and the good file is packed.
    save_good(src / "a_good.pt")
    out = tmp_path / "skip"
    rc, _, err, rss = pack_cli(src, out, "--max-decompressed", "256MiB", "--on-error", "skip")
    assert rc == 0, err
    assert (out / "skipped.txt").read_text().startswith("b_bomb.pt.gz\t")
    assert len(libshard.open(out)) == 1
    assert rss < (256 + 64) * MiB, f"peak RSS {rss / MiB:.0f} MiB for a 256 MiB limit"


def test_multi_member_gzip_of_a_real_file_reads_as_the_concatenation(tmp_path):
    """A .pt split into gzip members (as `cat a.gz b.gz` makes) reads as gzip -d gives it."""
    sample = save_good(tmp_path / "plain.pt")
    raw = (tmp_path / "plain.pt").read_bytes()
    members = b""
    for part in (raw[:100], raw[100:1000], raw[1000:]):
        z = zlib.compressobj(6, zlib.DEFLATED, 31)
        members += z.compress(part) + z.flush()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "s.pt.gz").write_bytes(members)
    rc, _, err, _ = pack_cli(tmp_path / "src", tmp_path / "out")
    assert rc == 0, err
    assert torch.equal(libshard.open(tmp_path / "out")[0]["x"], sample["x"])


def test_max_decompressed_default_is_in_the_help():
    rc, out, err, _ = run_measured([cli(), "pack", "--help"])
    assert rc == 0, err
    assert "physical memory" in out and "--threads" in out, out


def test_expanded_view_bomb_is_refused_in_bounded_memory(tmp_path):
    """2 KB on disk, 8 GiB once materialised: bounded like an inflated gzip."""
    src = tmp_path / "src"
    src.mkdir()
    torch.save({"x": torch.zeros(1).expand(2 ** 31)}, src / "expand.pt")
    assert (src / "expand.pt").stat().st_size < 4096
    rc, _, err, rss = pack_cli(src, tmp_path / "out", "--max-decompressed", "256MiB")
    assert rc == 1, err
    assert "expand.pt" in err and "--max-decompressed" in err, err
    assert rss < 256 * MiB, f"peak RSS {rss / MiB:.0f} MiB"


# ---- 3. non-UTF-8 names and values --------------------------------------------------------------

def test_non_utf8_tensor_key_is_refused_at_pack(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    torch.save({"x\udce9": torch.zeros(4)}, src / "bad.pt")
    rc, _, err, _ = pack_cli(src, tmp_path / "out")
    assert rc == 1, err
    assert "bad.pt" in err and "not valid UTF-8" in err and "x\\xed\\xb3\\xa9" in err, err
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_skip_reason_quoting_non_utf8_bytes_is_a_str(tmp_path):
    """A skip reason that quotes a non-UTF-8 zip entry name made libshard.pack raise
    UnicodeDecodeError after packing; it is escaped now."""
    import zipfile
    src = tmp_path / "src"
    save_good(src / "a.pt")
    with zipfile.ZipFile(src / "b.pt", "w") as z:
        z.writestr("QQQQ.pkl", b"x")
    raw = (src / "b.pt").read_bytes()
    (src / "b.pt").write_bytes(raw.replace(b"QQQQ", b"\xff\xfe\xff\xfe"))
    out = tmp_path / "out"
    code = textwrap.dedent(f"""
        import json, libshard
        s = libshard.pack({str(src)!r}, {str(out)!r}, on_error="skip")
        print(json.dumps([k["reason"] for k in s["skipped"]]))
    """)
    rc, stdout, err, _ = run_measured([sys.executable, "-c", code])
    assert rc == 0, err
    (reason,) = json.loads(stdout.strip().splitlines()[-1])
    assert "b.pt" in reason and "\\xff\\xfe" in reason, reason
    assert "\\xff\\xfe" in (out / "skipped.txt").read_text(encoding="utf-8")


def test_skipped_source_with_a_non_utf8_name_is_reported_as_its_fs_name(tmp_path):
    """A damaged source whose file name is not UTF-8 is skipped and reported under the name
    os.fsdecode gives it (so os.fsencode returns the bytes on disk), never a UnicodeDecodeError."""
    src = tmp_path / "src"
    save_good(src / "a.pt")
    bad = os.path.join(os.fsencode(src), b"bad_\xe9.pt")
    with open(bad, "wb") as f:
        f.write(b"PK\x03\x04 not a zip archive")
    out = tmp_path / "out"
    code = textwrap.dedent(f"""
        import json, os, libshard
        s = libshard.pack({str(src)!r}, {str(out)!r}, on_error="skip")
        print(json.dumps([s["samples_added"], [os.fsencode(k["path"]).hex() for k in s["skipped"]]]))
    """)
    rc, stdout, err, _ = run_measured([sys.executable, "-c", code])
    assert rc == 0, err
    added, skipped = json.loads(stdout.strip().splitlines()[-1])
    assert added == 1
    assert [bytes.fromhex(h) for h in skipped] == [b"bad_\xe9.pt"]


def test_non_utf8_metadata_value_still_packs_and_opens(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    torch.save({"x": torch.arange(3), "s": "caf\udce9"}, src / "m.pt")
    rc, _, err, _ = pack_cli(src, tmp_path / "out")
    assert rc == 0, err
    ds = libshard.open(tmp_path / "out")
    assert torch.equal(ds[0]["x"], torch.arange(3))
    rc, _, err, _ = run_measured([cli(), "verify", tmp_path / "out"])
    assert rc == 0, err
    rc, out, err, _ = run_measured([cli(), "info", tmp_path / "out"])
    assert rc == 0, err


# ---- 4. FIFOs, sockets and symlinks to them -----------------------------------------------------

def test_fifo_in_the_source_directory_is_never_opened_and_never_silently_dropped(tmp_path):
    """A FIFO (or a symlink to one) with a sample name: a clear error naming it, or with
    --on-error skip a line in skipped.txt; never opened (that would block), never left out
    without a word (a sample would go missing)."""
    src = tmp_path / "src"
    save_good(src / "a.pt")
    os.mkfifo(src / "b.pt")
    os.symlink("b.pt", src / "c.pt")
    os.mkfifo(src / "notes.txt")  # not a sample name: not a source at all
    rc, _, err, _ = pack_cli(src, tmp_path / "fail")
    assert rc == 1, err
    assert "b.pt is a FIFO" in err and "not read" in err, err
    out = tmp_path / "out"
    rc, _, err, _ = pack_cli(src, out, "--on-error", "skip")
    assert rc == 0, err
    report = (out / "skipped.txt").read_text()
    assert report.startswith("b.pt\t") and "\nc.pt\t" in report and "FIFO" in report, report
    ds = libshard.open(out)
    assert [ds.source(i) for i in range(len(ds))] == ["a.pt"]
    rc, _, err, _ = pack_cli(src, tmp_path / "excluded", "--exclude", "[bc].pt")
    assert rc == 0, err


def test_fifo_named_in_files_from_is_a_clear_error(tmp_path):
    src = tmp_path / "src"
    save_good(src / "a.pt")
    os.mkfifo(src / "b.pt")
    os.symlink("b.pt", src / "c.pt")
    for name in ("b.pt", "c.pt"):
        listing = tmp_path / f"list_{name}.txt"
        listing.write_text(f"{src / 'a.pt'}\n{src / name}\n")
        rc, _, err, _ = run_measured([cli(), "pack", "--files-from", listing, "-o",
                                      tmp_path / f"out_{name}", "-q"])
        assert rc == 1, err
        assert name in err and "not a regular file" in err, err


# ---- 5. safetensors whose tensors overlap -------------------------------------------------------

def f32(begin: int, end: int) -> dict:
    return {"dtype": "F32", "shape": [(end - begin) // 4], "data_offsets": [begin, end]}


@pytest.mark.parametrize("name, header, size, why", [
    ("overlap", {"a": f32(0, 16), "b": f32(8, 24)}, 24, "overlap"),
    ("gap", {"a": f32(0, 8), "b": f32(16, 24)}, 24, "gap"),
    ("trailing", {"a": f32(0, 8)}, 16, "trailing bytes"),
])
def test_safetensors_offsets_that_safetensors_refuses_are_refused(tmp_path, name, header, size, why):
    safetensors = pytest.importorskip("safetensors.torch")
    path = tmp_path / "src" / f"{name}.safetensors"
    write_safetensors(path, header, bytes(size))
    with pytest.raises(Exception):
        safetensors.load_file(path)
    rc, _, err, _ = pack_cli(tmp_path / "src", tmp_path / "out")
    assert rc == 1, err
    assert f"{name}.safetensors" in err and why in err, err


def test_safetensors_that_safetensors_accepts_still_pack(tmp_path):
    safetensors = pytest.importorskip("safetensors.torch")
    path = tmp_path / "src" / "ok.safetensors"
    data = torch.arange(6, dtype=torch.float32).numpy().tobytes()
    # Out of header order, with a zero-size tensor sharing an offset.
    write_safetensors(path, {"b": f32(8, 24), "a": f32(0, 8), "z": f32(8, 8)}, data)
    want = safetensors.load_file(path)
    rc, _, err, _ = pack_cli(tmp_path / "src", tmp_path / "out")
    assert rc == 0, err
    got = libshard.open(tmp_path / "out")[0]
    for key, tensor in want.items():
        assert torch.equal(got[key], tensor), key


def test_safetensors_header_nested_200000_deep_is_a_clear_error(tmp_path):
    path = tmp_path / "src" / "deep.safetensors"
    h = b'{"x":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    path.parent.mkdir(parents=True)
    path.write_bytes(struct.pack("<Q", len(h)) + h)
    rc, _, err, _ = pack_cli(tmp_path / "src", tmp_path / "out")
    assert rc == 1, err
    assert "deep.safetensors" in err and "nested deeper" in err, err
