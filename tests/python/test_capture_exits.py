"""Every way a generator can leave a sample file under ``python -m libshard.capture`` ends in the
dataset, on disk, or in a clear error (docs/guide/capture.md, "How a file can end"): never
"committed" while the sample is in neither the dataset nor on disk.

Each case is a generator script run under capture (a real process, as a user runs it); asserted:
its exit status, what the dataset holds (or that it was left uncommitted with its journal), what
is on disk, and the message that says what happened.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List, Optional, Sequence

import pytest
import torch

import libshard
from capture_util import clean_env, journaled

PRELUDE = textwrap.dedent("""
    import gc, io, os, signal, sys, threading, time
    import torch
    import safetensors.torch as st
    out = sys.argv[2]
    def sample(i):
        return {"input_ids": torch.arange(i, i + 4), "hidden": torch.full((4, 2), float(i))}
""")


class Run:
    def __init__(self, tmp: Path, code: str, args: Sequence[str] = ()) -> None:
        self.out = tmp / "ds"
        self.gen_out = tmp / "out"
        self.gen_out.mkdir(exist_ok=True)
        script = tmp / "gen.py"
        script.write_text(PRELUDE + textwrap.dedent(code))
        cmd = [sys.executable, "-m", "libshard.capture", "--out", str(self.out),
               "--commit-interval", "0.05", *args, "--", str(script), "--output-dir",
               str(self.gen_out)]
        r = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=300)
        self.rc, self.stdout, self.stderr = r.returncode, r.stdout, r.stderr

    def keys(self) -> Optional[List[str]]:
        """The committed dataset's keys, or None when it is not committed."""
        if not (self.out / "manifest.json").exists():
            return None
        ds = libshard.open(self.out)
        return sorted(ds.key(i) for i in range(len(ds)))

    def sample(self, key: str):
        ds = libshard.open(self.out)
        return ds[ds.find(key)]

    def on_disk(self) -> List[str]:
        return sorted(str(p.relative_to(self.gen_out)) for p in self.gen_out.rglob("*")
                      if p.is_file())

    def __repr__(self) -> str:
        return f"rc={self.rc}\nstdout:\n{self.stdout[-2000:]}\nstderr:\n{self.stderr[-4000:]}"


def _ok(run: Run, keys: List[str]) -> None:
    assert run.rc == 0, run
    assert run.keys() == sorted(keys), run
    assert "committed" in run.stderr, run


# -- files never closed -----------------------------------------------------------------------
def test_exit_without_close(tmp_path):
    run = Run(tmp_path, """
        f = open(out + "/a.safetensors", "wb")
        f.write(st.save(sample(1)))
        g = open(out + "/b.pt", "wb")
        torch.save(sample(2), g)
        keep = [open(out + "/c.pt", "wb")]
        torch.save(sample(3), keep[0])
    """)
    _ok(run, ["a.safetensors", "b.pt", "c.pt"])
    assert int(run.sample("c.pt")["input_ids"][0]) == 3
    assert run.on_disk() == []


def test_a_file_only_a_reference_cycle_holds(tmp_path):
    run = Run(tmp_path, """
        class Holder: pass
        h = Holder(); h.me = h
        h.f = open(out + "/c.pt", "wb")
        torch.save(sample(5), h.f)
        del h
    """)
    _ok(run, ["c.pt"])
    assert int(run.sample("c.pt")["input_ids"][0]) == 5


def test_a_file_a_thread_left_open(tmp_path):
    run = Run(tmp_path, """
        held = []
        def work():
            f = open(out + "/t.pt", "wb")
            torch.save(sample(7), f)
            held.append(f)
        t = threading.Thread(target=work); t.start(); t.join()
    """)
    _ok(run, ["t.pt"])


def test_closed_by_the_garbage_collector(tmp_path):
    run = Run(tmp_path, """
        def write():
            f = open(out + "/g.pt", "wb")
            torch.save(sample(8), f)   # f dies with the frame: closed by its finalizer
        write()
        gc.collect()
        assert os.path.exists(out + "/g.pt")  # the generator's own check sees it at once
    """)
    _ok(run, ["g.pt"])


# -- how the process ends ---------------------------------------------------------------------
def test_os_exit_zero_commits(tmp_path):
    run = Run(tmp_path, """
        torch.save(sample(1), out + "/a.pt")
        f = open(out + "/b.pt", "wb")
        torch.save(sample(2), f)
        sys.stderr.flush()
        os._exit(0)
    """)
    _ok(run, ["a.pt", "b.pt"])
    assert "still open when the generator ended" in run.stderr and "b.pt: captured" in run.stderr


def test_os_exit_nonzero_keeps_the_journal(tmp_path):
    run = Run(tmp_path, """
        torch.save(sample(1), out + "/a.pt")
        f = open(out + "/b.pt", "wb")
        torch.save(sample(2), f)
        os._exit(3)
    """)
    assert run.rc == 3, run
    assert run.keys() is None and "uncommitted" in run.stderr, run
    assert journaled(run.out) == 2


def test_an_exception_keeps_every_file_in_the_journal(tmp_path):
    run = Run(tmp_path, """
        torch.save(sample(1), out + "/a.pt")
        f = open(out + "/b.pt", "wb")
        torch.save(sample(2), f)
        raise RuntimeError("the generator broke")
    """)
    assert run.rc == 1 and "the generator broke" in run.stderr, run
    assert run.keys() is None and journaled(run.out) == 2


def test_sigterm_stops_the_generator_and_keeps_the_journal(tmp_path):
    run = Run(tmp_path, """
        torch.save(sample(1), out + "/a.pt")
        f = open(out + "/b.pt", "wb")
        torch.save(sample(2), f)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
        torch.save(sample(3), out + "/never.pt")
    """)
    assert run.rc == 128 + signal.SIGTERM, run
    assert "SIGTERM" in run.stderr and "uncommitted" in run.stderr, run
    assert run.keys() is None and journaled(run.out) == 2


def test_a_generator_handling_sigterm_itself_keeps_its_handler(tmp_path):
    run = Run(tmp_path, """
        got = []
        signal.signal(signal.SIGTERM, lambda *a: got.append(1))
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
        assert got == [1]
        torch.save(sample(1), out + "/a.pt")
    """)
    _ok(run, ["a.pt"])


# -- other processes --------------------------------------------------------------------------
def test_a_forked_child_writing_a_sample_is_refused_and_nothing_commits(tmp_path):
    run = Run(tmp_path, """
        torch.save(sample(1), out + "/a.pt")
        pid = os.fork()
        if pid == 0:
            try:
                torch.save(sample(2), out + "/child.pt")
                os._exit(0)
            except Exception as e:
                sys.stderr.write(f"child: {e}\\n"); sys.stderr.flush()
                os._exit(0)   # a child that hides its error: the parent still knows
        os.waitpid(pid, 0)
    """)
    assert run.rc == 1, run
    assert "child.pt" in run.stderr and "forked" in run.stderr, run
    assert run.keys() is None and journaled(run.out) == 1


def test_a_forked_child_that_writes_no_sample_changes_nothing(tmp_path):
    run = Run(tmp_path, """
        torch.save(sample(1), out + "/a.pt")
        pid = os.fork()
        if pid == 0:
            assert os.path.exists(out + "/a.pt")
            sys.exit(0)   # the child runs the inherited atexit: it must not end the capture
        _, status = os.waitpid(pid, 0)
        assert status == 0
        torch.save(sample(2), out + "/b.pt")
    """)
    _ok(run, ["a.pt", "b.pt"])
    assert run.stderr.count("committed") == 1, run


def test_a_multiprocessing_pool_of_forks_writing_samples(tmp_path):
    run = Run(tmp_path, """
        import multiprocessing as mp
        def work(i):
            torch.save(sample(i), f"{out}/p{i}.pt")
        if __name__ == "__main__":
            with mp.get_context("fork").Pool(2) as pool:
                pool.map(work, range(3))
    """)
    assert run.rc == 1 and "forked" in run.stderr, run
    assert run.keys() is None


def test_a_spawned_process_writes_to_disk_and_is_named(tmp_path):
    run = Run(tmp_path, """
        import subprocess
        torch.save(sample(1), out + "/a.pt")
        code = ("import sys, torch; torch.save({'input_ids': torch.arange(3)}, sys.argv[1])")
        subprocess.run([sys.executable, "-c", code, out + "/spawned.pt"], check=True)
    """)
    _ok(run, ["a.pt"])
    assert run.on_disk() == ["spawned.pt"]
    assert "spawned.pt" in run.stderr and "NOT in" in run.stderr, run


# -- files handled in other ways --------------------------------------------------------------
def test_a_file_opened_twice_is_refused(tmp_path):
    run = Run(tmp_path, """
        f = open(out + "/a.pt", "wb")
        g = open(out + "/a.pt", "wb")
    """)
    assert run.rc == 1 and "a.pt is already open for writing" in run.stderr, run


def test_a_file_renamed_while_open(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = Run(tmp_path, f"""
        f = open(out + "/part.pt", "wb")
        torch.save(sample(4), f)
        os.rename(out + "/part.pt", out + "/final.pt")
        f.close()
        g = open(out + "/gone.pt", "wb")
        torch.save(sample(6), g)
        os.replace(out + "/gone.pt", {str(elsewhere / "gone.pt")!r})
        g.close()
        assert os.path.exists(out + "/final.pt") and not os.path.exists(out + "/part.pt")
    """)
    _ok(run, ["final.pt"])
    assert int(run.sample("final.pt")["input_ids"][0]) == 4
    assert int(torch.load(elsewhere / "gone.pt")["input_ids"][0]) == 6


def test_a_file_truncated_and_rewritten(tmp_path):
    run = Run(tmp_path, """
        f = open(out + "/a.safetensors", "wb")
        f.write(b"not yet a sample")
        f.seek(0); f.truncate()
        f.write(st.save(sample(9)))
        f.close()
        g = open(out + "/b.pt", "wb")
        torch.save(sample(1), g)
        os.truncate(out + "/b.pt", 0)    # the generator changed its mind: an empty file
        g.close()
        torch.save(sample(2), out + "/c.pt")
        try:
            os.truncate(out + "/c.pt", 3)
        except Exception as e:
            print("truncate refused:", e)
    """)
    _ok(run, ["a.safetensors", "c.pt"])
    assert int(run.sample("a.safetensors")["input_ids"][0]) == 9
    assert run.on_disk() == ["b.pt"] and (run.gen_out / "b.pt").stat().st_size == 0
    assert "truncate refused" in run.stdout and "c.pt is a sample captured into" in run.stdout


@pytest.mark.parametrize("how", ["os.write", "io.FileIO", "mmap"])
def test_written_around_the_hooks_is_on_disk_and_named(tmp_path, how):
    write = {
        "os.write": """
            fd = os.open(out + "/raw.safetensors", os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, st.save(sample(1))); os.close(fd)
        """,
        "io.FileIO": """
            with io.FileIO(out + "/raw.safetensors", "wb") as f:
                f.write(st.save(sample(1)))
        """,
        "mmap": """
            import mmap
            data = st.save(sample(1))
            fd = os.open(out + "/raw.safetensors", os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(fd, len(data))
            m = mmap.mmap(fd, len(data)); m[:] = data; m.close(); os.close(fd)
        """}[how]
    run = Run(tmp_path, "torch.save(sample(0), out + '/a.pt')\n" + textwrap.dedent(write))
    _ok(run, ["a.pt"])
    assert run.on_disk() == ["raw.safetensors"]
    assert "raw.safetensors" in run.stderr and "around capture's hooks" in run.stderr, run


def test_mmap_of_a_file_opened_for_update_is_refused(tmp_path):
    run = Run(tmp_path, """
        f = open(out + "/a.safetensors", "w+b")
    """)
    assert run.rc == 1 and "a.safetensors" in run.stderr and "cannot honour" in run.stderr, run


def test_fsync_of_a_captured_file_is_a_clear_error(tmp_path):
    run = Run(tmp_path, """
        f = open(out + "/a.pt", "wb")
        torch.save(sample(1), f)
        f.flush()
        os.fsync(f.fileno())
    """)
    assert run.rc == 1 and "a.pt" in run.stderr and "no file descriptor" in run.stderr, run


def test_np_save_of_a_selected_path_is_a_clear_error(tmp_path):
    run = Run(tmp_path, """
        import numpy as np
        np.save(out + "/a.npy", np.arange(4))
    """, args=["--include", "*.npy"])
    assert run.rc == 1 and "a.npy" in run.stderr and "neither a torch.save" in run.stderr, run


def test_np_save_of_an_unselected_path_goes_to_disk(tmp_path):
    run = Run(tmp_path, """
        import numpy as np
        torch.save(sample(0), out + "/a.pt")
        np.save(out + "/stats.npy", np.arange(4))
    """)
    _ok(run, ["a.pt"])
    assert run.on_disk() == ["stats.npy"]


def test_pathlib_and_shutil_and_gzip_are_captured(tmp_path):
    src = tmp_path / "src.safetensors"
    from safetensors.torch import save_file
    save_file({"input_ids": torch.arange(4), "hidden": torch.ones(4, 2)}, str(src))
    run = Run(tmp_path, f"""
        import gzip, pathlib, shutil
        pathlib.Path(out, "p.safetensors").write_bytes(st.save(sample(1)))
        shutil.copyfile({str(src)!r}, out + "/copied.safetensors")
        with gzip.open(out + "/z.pt.gz", "wb") as f:
            torch.save(sample(2), f)
    """)
    _ok(run, ["copied.safetensors", "p.safetensors", "z.pt.gz"])
    assert run.on_disk() == []


def test_a_file_renamed_into_place_before_it_is_complete(tmp_path):
    stage = tmp_path / "stage"
    stage.mkdir()
    run = Run(tmp_path, f"""
        f = open({str(stage / "x.tmp")!r}, "wb")   # outside the captured tree: a real file
        f.write(st.save(sample(3))[:30])            # buffered, not complete
        os.rename({str(stage / "x.tmp")!r}, out + "/x.safetensors")
        f.write(st.save(sample(3))[30:])
        f.close()
    """)
    _ok(run, ["x.safetensors"])
    assert int(run.sample("x.safetensors")["input_ids"][0]) == 3
    assert run.on_disk() == []


def test_a_partial_file_left_open_goes_to_disk_as_it_was(tmp_path):
    run = Run(tmp_path, """
        torch.save(sample(0), out + "/a.pt")
        f = open(out + "/cut.safetensors", "wb")
        f.write(st.save(sample(1))[:40])   # the generator died half way through the file
        os._exit(0)
    """)
    assert run.rc == 0, run
    assert run.keys() == ["a.pt"], run
    assert run.on_disk() == ["cut.safetensors"]
    assert (run.gen_out / "cut.safetensors").stat().st_size == 40
    assert "cut.safetensors: written to disk as it was (40 bytes)" in run.stderr, run
