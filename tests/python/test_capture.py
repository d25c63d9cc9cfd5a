"""python -m libshard.capture: an unmodified generator's sample files go into a dataset.

The generator is tests/python/capture_generator.py, run as a script under capture (the command a
user types) and without it (the per-file dump a user has today, then packed). Asserted: the
captured dataset equals the pack of the dump (keys, field order, dtypes, shapes, bytes, metadata,
order), for every way of writing a sample the real generators use; files that are not samples
go to disk and sample files do not; the generator's own skip-if-done check sees the captured
samples (every query it may use), so a rerun writes nothing and a run killed with SIGKILL
resumes to the same dataset; ranks write parts joined by key; errors name the file and say what
to do.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

import pytest
import torch

import libshard
from capture_util import assert_same_dataset, clean_env, journaled, sample_files
from conftest import REPO, pack_dir

GEN = str(REPO / "tests" / "python" / "generators" / "toy_generator.py")
NOT_SAMPLES = ["vocab_mapping/**"]  # what a pack of the dump must leave out, as capture does


def run_capture(out: Path, gen_out: Path, *gen_args: str, capture_args: List[str] = (),
                env: Optional[dict] = None, check: bool = True,
                script: str = GEN) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "libshard.capture", "--out", str(out), "--journal-every", "1",
           *capture_args, "--", script, "--output-dir", str(gen_out), *gen_args]
    r = subprocess.run(cmd, env=env or clean_env(), capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return r


def run_plain(gen_out: Path, *gen_args: str) -> None:
    r = subprocess.run([sys.executable, GEN, "--output-dir", str(gen_out), *gen_args],
                       env=clean_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """The per-file dump of each mode, packed (what a user has today)."""
    root = tmp_path_factory.mktemp("dumps")
    out = {}
    for mode in ("torch_path", "open_wb", "gzip", "pathlib", "safetensors", "safetensors_numpy",
                 "bytes", "rename", "move"):
        run_plain(root / mode, "--mode", mode)
        out[mode] = pack_dir(root / mode, root / f"{mode}.packed", exclude=NOT_SAMPLES)
    return out


@pytest.mark.parametrize("mode", ["torch_path", "open_wb", "gzip", "pathlib", "safetensors",
                                  "safetensors_numpy", "bytes", "rename", "move"])
def test_capture_equals_the_packed_dump(tmp_path, dumps, mode):
    gen_out = tmp_path / "gen"
    r = run_capture(tmp_path / "ds", gen_out, "--mode", mode)
    assert "skipped 0" in r.stdout
    assert_same_dataset(tmp_path / "ds", dumps[mode])
    # No sample reached the disk; everything else did, where the generator put it.
    assert sample_files(gen_out) == []
    assert (gen_out / "generation.log").read_text() == "done\n"
    assert (gen_out / "config.json").exists()
    mapping = torch.load(gen_out / "vocab_mapping" / "vocab_mapping.pt", weights_only=True)
    assert mapping["d2t"].tolist() == list(range(8))
    assert "vocab_mapping.pt holds no rank-1 input_ids or token_ids" in r.stderr
    assert not list((tmp_path).glob("gen.staging/*"))  # moved files leave nothing behind
    assert "12 samples captured" in r.stderr


def test_threaded_saves_capture_every_sample(tmp_path, dumps):
    """SpecForge saves from an io thread pool: every sample arrives, whatever the order."""
    run_capture(tmp_path / "ds", tmp_path / "gen", "--mode", "threads")
    assert_same_dataset(tmp_path / "ds", dumps["torch_path"], same_order=False)


@pytest.mark.parametrize("check", ["exists", "path_exists", "isfile", "getsize", "stat",
                                   "listdir", "iterdir", "glob", "rglob", "scandir", "walk"])
def test_the_generators_own_resume_check_sees_captured_samples(tmp_path, check):
    ds, gen_out = tmp_path / "ds", tmp_path / "gen"
    run_capture(ds, gen_out, "--n", "6", "--check", check)
    # A rerun (more samples asked for) skips the 6 it finds and writes the rest.
    r = run_capture(ds, gen_out, "--n", "9", "--check", check)
    assert "skipped 6" in r.stdout, r.stdout
    assert r.stdout.count("wrote ") == 3
    assert "3 samples captured" in r.stderr and "6 from an earlier run" in r.stderr
    assert len(libshard.open(ds)) == 9
    assert sample_files(gen_out) == []


def test_kill_minus_9_then_rerun_resumes_to_the_same_dataset(tmp_path, dumps):
    ds, gen_out = tmp_path / "ds", tmp_path / "gen"
    cmd = [sys.executable, "-m", "libshard.capture", "--out", str(ds), "--journal-every", "1",
           "--", GEN, "--output-dir", str(gen_out), "--sleep", "0.3"]
    p = subprocess.Popen(cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    wrote = 0
    assert p.stdout is not None
    for line in p.stdout:
        wrote += line.startswith("wrote ")
        if wrote == 5:
            time.sleep(0.5)  # the Writer journals it (journal_every 1: every sample)
            p.send_signal(signal.SIGKILL)
            break
    p.wait(timeout=60)
    assert p.returncode == -signal.SIGKILL
    assert not (ds / "manifest.json").exists() and (ds / "_journal.lsj").exists()
    kept = journaled(ds)
    assert 1 <= kept < 12
    r = run_capture(ds, gen_out)
    # Every journaled sample is kept and the generator's own check skips exactly those.
    assert f"skipped {kept}\n" in r.stdout, (kept, r.stdout)
    assert f"{12 - kept} samples captured" in r.stderr
    assert_same_dataset(ds, dumps["torch_path"])


def test_a_failing_generator_leaves_the_journal_for_a_rerun(tmp_path):
    bad = tmp_path / "fails.py"
    bad.write_text(f"import runpy\nrunpy.run_path({GEN!r}, run_name='gen')['main']()\n"
                   "raise SystemExit(3)\n")
    ds = tmp_path / "ds"
    r = run_capture(ds, tmp_path / "gen", "--n", "4", script=str(bad), check=False)
    assert r.returncode == 3
    assert "the generator failed (exit status 3)" in r.stderr and "rerun" in r.stderr
    assert not (ds / "manifest.json").exists()
    r = run_capture(ds, tmp_path / "gen", "--n", "4")
    assert "skipped 4" in r.stdout
    assert len(libshard.open(ds)) == 4


def test_ranks_write_parts_joined_by_key(tmp_path, dumps):
    ds, gen_out = tmp_path / "ds", tmp_path / "gen"
    procs = []
    for rank, idx in enumerate(("0,2,4,6,8,10", "1,3,5,7,9,11")):
        cmd = [sys.executable, "-m", "libshard.capture", "--out", str(ds), "--", GEN,
               "--output-dir", str(gen_out), "--indices", idx]
        procs.append(subprocess.Popen(cmd, env=clean_env(RANK=str(rank), WORLD_SIZE="2"),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    assert (ds / "parts" / "rank-00000-of-00002" / "manifest.json").exists()
    joined = libshard.open(ds)
    keys = [joined.key(i) for i in range(len(joined))]
    assert keys == sorted(keys, key=lambda k: k.encode())  # the join's order: by key
    assert_same_dataset(ds, dumps["torch_path"], same_order=False)


def test_compression_and_fp8_run_as_the_writer_does(tmp_path):
    args = ["--hidden", "256", "--n", "6"]
    run_plain(tmp_path / "dump", *args)
    raw = pack_dir(tmp_path / "dump", tmp_path / "raw", exclude=NOT_SAMPLES)
    packed = pack_dir(tmp_path / "dump", tmp_path / "packed", exclude=NOT_SAMPLES,
                      compress="auto", store_dtype="float8_e4m3fn")
    run_capture(tmp_path / "ds", tmp_path / "gen", *args,
                capture_args=["--compress", "auto", "--store-dtype", "float8_e4m3fn"])
    assert_same_dataset(tmp_path / "ds", packed)
    got = libshard.open(tmp_path / "ds")
    assert got.total_stored_bytes == libshard.open(packed).total_stored_bytes
    assert got.total_stored_bytes < 0.7 * libshard.open(raw).total_stored_bytes


def test_unpack_gives_the_tree_back(tmp_path):
    cli = os.environ.get("LIBSHARD_CLI")
    if not cli:
        pytest.skip("LIBSHARD_CLI (the libshard command) is not set")
    run_capture(tmp_path / "ds", tmp_path / "gen", "--n", "10")
    subprocess.run([cli, "unpack", str(tmp_path / "ds"), "-o", str(tmp_path / "tree")],
                   check=True, capture_output=True)
    got = sorted(str(p.relative_to(tmp_path / "tree")) for p in (tmp_path / "tree").rglob("*")
                 if p.is_file())
    # The generator's tree, each file under unpack's name for a torch.save file (.pt).
    assert got == sorted(f"rows_{i // 8 * 8}-{i // 8 * 8 + 8}/data_{i}.pt" for i in range(10))


def test_readbacks_are_served_and_raw_reads_refused(tmp_path):
    r = run_capture(tmp_path / "ds", tmp_path / "gen", "--n", "3", "--readback")
    assert "skipped 0" in r.stdout
    r = run_capture(tmp_path / "ds2", tmp_path / "gen2", "--n", "3", "--readback", "--mode",
                    "move")
    assert "skipped 0" in r.stdout
    script = tmp_path / "raw.py"
    script.write_text(
        "import sys, torch\n"
        "out = sys.argv[2]\n"
        "torch.save({'input_ids': torch.arange(4)}, out + '/a.pt')\n"
        "open(out + '/a.pt', 'rb').read()\n")
    (tmp_path / "gen3").mkdir()
    r = subprocess.run([sys.executable, "-m", "libshard.capture", "--out", str(tmp_path / "ds3"),
                        "--", str(script), "--output-dir", str(tmp_path / "gen3")],
                       env=clean_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "a.pt is a sample captured into" in r.stderr and "torch.load" in r.stderr


ERROR_CASES = {
    "a tensor, not a dict": (
        "torch.save(torch.arange(4), out + '/a.pt')", ["--include", "*.pt"],
        ["a.pt", "the object saved is a Tensor, not a dict of tensors", "--exclude"]),
    "append to a sample": (
        "open(out + '/a.pt', 'ab').write(b'x')", [],
        ["a.pt", "cannot honour", "--exclude"]),
    "removed": (
        "torch.save({'input_ids': torch.arange(4)}, out + '/a.pt')\nos.remove(out + '/a.pt')", [],
        ["os.remove", "a.pt is a sample captured into", "cannot take a sample out"]),
    "another schema": (
        "torch.save({'input_ids': torch.arange(4)}, out + '/a.pt')\n"
        "torch.save({'input_ids': torch.arange(4), 'x': torch.ones(4)}, out + '/b.pt')", [],
        ["b.pt", "'x' is not in the schema", "--exclude"]),
    "a numpy object": (
        "import numpy as np\n"
        "torch.save({'input_ids': torch.arange(4), 'n': np.ones(2)}, out + '/a.pt')", [],
        ["a.pt", "entry 'n' is a numpy.ndarray", "plain value"]),
    "no directory": (
        "torch.save({'input_ids': torch.arange(4)}, out + '/missing/a.pt')", [],
        ["FileNotFoundError", "missing/a.pt"]),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_errors_name_the_file_and_what_to_do(tmp_path, case):
    code, args, wants = ERROR_CASES[case]
    script = tmp_path / "gen.py"
    script.write_text("import os, sys, torch\nout = sys.argv[2]\n" + code + "\n")
    (tmp_path / "out").mkdir()
    r = subprocess.run([sys.executable, "-m", "libshard.capture", "--out", str(tmp_path / "ds"),
                        *args, "--", str(script), "--output-dir", str(tmp_path / "out")],
                       env=clean_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    for want in wants:
        assert want in r.stderr, (want, r.stderr[-3000:])


def test_a_sample_written_again_keeps_the_first(tmp_path):
    """A generator whose skip-if-done check is bypassed (ModelOpt's HF dumper when `datasets`
    serves its filter from the cache) writes samples again: the first is kept, said once."""
    script = tmp_path / "gen.py"
    script.write_text(
        "import sys, torch\nout = sys.argv[2]\n"
        "for v in (1, 2):\n"
        "    torch.save({'input_ids': torch.full((3,), v)}, out + '/a.pt')\n"
        "    with open(out + '/b.pt', 'wb') as f:\n"
        "        torch.save({'input_ids': torch.full((3,), v)}, f)\n")
    (tmp_path / "out").mkdir()
    cmd = [sys.executable, "-m", "libshard.capture", "--out", str(tmp_path / "ds"), "--",
           str(script), "--output-dir", str(tmp_path / "out")]
    r = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("the sample captured first is kept") == 1
    assert "2 rewrite(s) of captured samples dropped" in r.stderr
    ds = libshard.open(tmp_path / "ds")
    assert [ds[i]["input_ids"].tolist() for i in range(len(ds))] == [[1, 1, 1], [1, 1, 1]]
    r = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "4 rewrite(s)" in r.stderr and "0 samples captured" in r.stderr


def test_usage_errors(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "libshard.capture", *args], env=clean_env(),
                              capture_output=True, text=True, timeout=60)
    r = run("--out", str(tmp_path / "ds"), "--", GEN, "--n", "2")
    assert r.returncode == 2 and "--under OUTPUT_DIR" in r.stderr
    r = run("--out", str(tmp_path / "ds"))
    assert r.returncode == 2 and "no generator to run" in r.stderr
    r = run("--out", str(tmp_path / "ds"), "--compress", "lz9", "--under", str(tmp_path), GEN)
    assert r.returncode == 2 and "'lz9'" in r.stderr
    r = run("--out", str(tmp_path / "ds"), "--store-dtype", "int4", "--under", str(tmp_path), GEN)
    assert r.returncode == 2 and "'int4'" in r.stderr
