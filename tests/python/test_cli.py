"""End-to-end tests of the `libshard` command-line tool on real torch.save files (torch 2.13).

Every test packs directories written by torch.save, reads the result back through
`libshard unpack` + torch.load(weights_only=True) and compares every tensor bit for bit with
torch.load of the source. Self-contained (no libshard Python package needed): runs with
`pytest tests/python/test_cli.py` or with `--noconftest`.

The binary: $LIBSHARD_CLI, else the newest <repo>/build*/converters/libshard.
"""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import glob
import gzip
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
H = 8  # hidden size: small, tests stay fast


def _find_cli() -> str:
    env = os.environ.get("LIBSHARD_CLI")
    if env:
        return env
    default = REPO / "build" / "converters" / "libshard"
    if default.exists():
        return str(default)
    candidates = glob.glob(str(REPO / "build*" / "converters" / "libshard"))
    if not candidates:
        pytest.skip("libshard binary not built (set LIBSHARD_CLI)", allow_module_level=True)
    return max(candidates, key=os.path.getmtime)


CLI = _find_cli()


def run(*args, check: bool = True, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"libshard {' '.join(map(str, args))} -> {p.returncode}\n"
                             f"stdout: {p.stdout}\nstderr: {p.stderr}")
    return p


def eagle_sample(gen: torch.Generator, length: int, hidden: int = H) -> Dict[str, torch.Tensor]:
    return {
        "input_ids": torch.randint(0, 32000, (length,), generator=gen, dtype=torch.int64),
        "loss_mask": torch.randint(0, 2, (length,), generator=gen, dtype=torch.int64),
        "hidden_state": torch.randn(1, length, hidden, generator=gen).to(torch.bfloat16),
        "aux_hidden_state": torch.randn(1, length, 3 * hidden, generator=gen).to(torch.bfloat16),
    }


def write_eagle(root: Path, indices, seed: int = 0, max_len: int = 48) -> List[Path]:
    """SpecForge layout rows_{g}-{g+10}/data_{i}.ckpt; natural order != lexical order."""
    paths = []
    for i in indices:
        gen = torch.Generator().manual_seed(seed * 100003 + i)
        length = 1 + (i * 7919 + seed) % max_len
        g = (i // 10) * 10
        path = root / f"rows_{g}-{g + 10}" / f"data_{i}.ckpt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(eagle_sample(gen, length), path)
        paths.append(path)
    return paths


def natural_key(rel: str):
    return [[(0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", c)]
            for c in rel.split("/")]


def tbytes(t: torch.Tensor) -> bytes:
    if t.dim() == 0:
        t = t.reshape(1)
    return t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""


def assert_same(got: Dict[str, object], want: Dict[str, object], where: str) -> None:
    assert sorted(got.keys()) == sorted(want.keys()), where
    for k, w in want.items():
        g = got[k]
        if isinstance(w, torch.Tensor):
            assert isinstance(g, torch.Tensor), f"{where}: {k}"
            assert g.dtype == w.dtype, f"{where}: {k} {g.dtype} != {w.dtype}"
            assert g.shape == w.shape, f"{where}: {k} {tuple(g.shape)} != {tuple(w.shape)}"
            assert tbytes(g) == tbytes(w), f"{where}: {k} bytes differ"
        else:
            assert g == w and type(g) is type(w), f"{where}: {k} {g!r} != {w!r}"


def load(path: Path) -> Dict[str, object]:
    """torch.load; weights_only=True for what libshard wrote. Our own sources use pickle protocols
    3-5, which torch's weights-only unpickler refuses (FRAME), so they load unrestricted."""
    trusted_source = "unpacked" not in str(path)
    if str(path).endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return torch.load(f, weights_only=not trusted_source)
    return torch.load(path, weights_only=not trusted_source)


def unpacked_equals_sources(dataset: Path, src_root: Path, rels: List[str], tmp: Path) -> None:
    """unpack (index naming, so order is checked too) and compare with torch.load of sources."""
    out = tmp / f"unpacked_{dataset.name}_{len(list(tmp.iterdir()))}"
    run("unpack", dataset, "-o", out, "--naming", "index")
    files = sorted(out.iterdir())
    assert len(files) == len(rels)
    for i, rel in enumerate(rels):
        assert_same(load(out / f"sample_{i:08d}.pt"), load(src_root / rel), f"sample {i} ({rel})")


def info(dataset: Path) -> dict:
    return json.loads(run("info", dataset, "--json").stdout)


def unpack_bytes(dataset: Path, out: Path) -> List[bytes]:
    run("unpack", dataset, "-o", out, "--naming", "index", "-q")
    return [p.read_bytes() for p in sorted(out.iterdir())]


@pytest.fixture(scope="module")
def eagle(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("eagle")
    write_eagle(root, range(23))
    return root


def rels_of(root: Path) -> List[str]:
    rels = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
    return sorted(rels, key=natural_key)


# --- round trips ----------------------------------------------------------------------------

@pytest.mark.parametrize("compress", ["none", "zstd", "zstd:1"])
def test_pack_unpack_bit_exact_eagle(eagle, tmp_path, compress):
    out = tmp_path / "ds"
    p = run("pack", eagle, "-o", out, "--shard-size", "16K", "--compress", compress,
            "--threads", "2", "--progress", "lines")
    assert "packed 23 samples" in p.stdout
    assert "peak RSS" in p.stdout
    rels = rels_of(eagle)
    assert rels[:3] == ["rows_0-10/data_0.ckpt", "rows_0-10/data_1.ckpt", "rows_0-10/data_2.ckpt"]
    assert rels.index("rows_0-10/data_9.ckpt") < rels.index("rows_10-20/data_10.ckpt")
    unpacked_equals_sources(out, eagle, rels, tmp_path)
    j = info(out)
    assert j["samples"] == 23
    assert len(j["shards"]) > 1
    assert j["schema"]["length_field"] == "input_ids"
    fields = {f["name"]: f for f in j["schema"]["fields"]}
    assert fields["hidden_state"]["seq_dim"] == 1 and fields["input_ids"]["seq_dim"] == 0
    assert j["lengths"]["total"] == sum(load(eagle / r)["input_ids"].shape[0] for r in rels)
    assert j["provenance"]["first"] == rels[0] and j["provenance"]["last"] == rels[-1]
    assert j["totals"]["source_bytes"] == sum((eagle / r).stat().st_size for r in rels)
    run("verify", out, "--against", eagle)
    # Source-named unpack mirrors the tree with .pt names.
    named = tmp_path / "named"
    run("unpack", out, "-o", named, "--samples", "3:5")
    assert sorted(p.relative_to(named).as_posix() for p in named.rglob("*.pt")) == \
        ["rows_0-10/data_3.pt", "rows_0-10/data_4.pt"]


ALL_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.uint16, torch.uint32, torch.uint64, torch.float16, torch.bfloat16,
              torch.float32, torch.float64, torch.float8_e4m3fn, torch.float8_e5m2]


def random_tensor(gen, shape, dtype):
    n = 1
    for s in shape:
        n *= s
    if dtype == torch.bool:
        return torch.randint(0, 2, tuple(shape), generator=gen).bool()
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * size,), generator=gen, dtype=torch.uint8)
    return raw.view(dtype).reshape(tuple(shape))


def test_every_dtype_views_scalars_metadata_gzip(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    gen = torch.Generator().manual_seed(5)
    for i in range(4):
        L = 2 + i
        d: Dict[str, object] = {"input_ids": torch.arange(L, dtype=torch.int64)}
        for dt in ALL_DTYPES:
            d["t_" + str(dt).replace("torch.", "")] = random_tensor(gen, (L, 3), dt)
        d["scalar"] = random_tensor(gen, (), torch.float32)
        d["empty"] = torch.empty(0, 5, dtype=torch.float16)
        base = random_tensor(gen, (3, L), torch.float16)
        d["transposed"] = base.t()                     # strided view
        shared = random_tensor(gen, (L + 4,), torch.int32)
        d["slice"] = shared[2:2 + L]                   # storage offset, shared storage
        d["conv_id"] = 1000 + i                        # metadata
        d["score"] = 0.25 * i
        d["tag"] = f"s{i}"
        d["flag"] = bool(i % 2)
        name = src / f"s_{i}.pt"
        if i == 3:  # a gzip source, as SpecForge --compress writes
            with gzip.open(str(name) + ".gz", "wb") as f:
                torch.save(d, f)
        else:
            torch.save(d, name, pickle_protocol=2 + i)
    out = tmp_path / "ds"
    run("pack", src, "-o", out, "--compress", "zstd", "--progress", "none")
    rels = rels_of(src)
    assert rels[-1] == "s_3.pt.gz"
    unpacked_equals_sources(out, src, rels, tmp_path)
    run("verify", out, "--against", src)


def test_fields_and_include_exclude(eagle, tmp_path):
    out = tmp_path / "ds"
    run("pack", eagle, "-o", out, "--fields", "input_ids,hidden_state", "--include", "rows_0-10/*",
        "--exclude", "data_[5-9].ckpt", "-q")
    j = info(out)
    assert [f["name"] for f in j["schema"]["fields"]] == ["input_ids", "hidden_state"]
    assert j["samples"] == 5
    un = tmp_path / "un"
    run("unpack", out, "-o", un, "--naming", "index", "-q")
    for i in range(5):
        want = load(eagle / f"rows_0-10/data_{i}.ckpt")
        assert_same(load(un / f"sample_{i:08d}.pt"),
                    {k: want[k] for k in ("input_ids", "hidden_state")}, f"sample {i}")


def test_files_from_stdin(eagle, tmp_path):
    listing = "\n".join(["rows_10-20/data_10.ckpt", "rows_0-10/data_2.ckpt", "# comment", ""])
    out = tmp_path / "ds"
    subprocess.run([CLI, "pack", str(eagle), "--files-from", "-", "-o", str(out), "-q"],
                   input=listing, text=True, check=True, capture_output=True)
    unpacked_equals_sources(out, eagle, ["rows_0-10/data_2.ckpt", "rows_10-20/data_10.ckpt"], tmp_path)


# --- errors ---------------------------------------------------------------------------------

def corrupt_copy(eagle: Path, dst: Path) -> str:
    shutil.copytree(eagle, dst)
    bad = dst / "rows_10-20" / "data_13.ckpt"
    data = bytearray(bad.read_bytes())
    bad.write_bytes(bytes(data[: len(data) // 2]))  # truncated: no central directory
    return "rows_10-20/data_13.ckpt"


def test_on_error_skip_writes_report(eagle, tmp_path):
    src = tmp_path / "src"
    bad = corrupt_copy(eagle, src)
    out = tmp_path / "ds"
    p = run("pack", src, "-o", out, "--on-error", "skip", "--progress", "none")
    assert "skipped  1 sources" in p.stdout
    report = (out / "skipped.txt").read_text().splitlines()
    assert len(report) == 1
    path, reason = report[0].split("\t", 1)
    assert path == bad and "data_13.ckpt" in reason
    rels = [r for r in rels_of(src) if r != bad]
    unpacked_equals_sources(out, src, rels, tmp_path)


@pytest.mark.parametrize("on_error", [None, "raise", "fail"])  # default, canonical, alias
def test_on_error_fail_names_file_and_leaves_nothing_complete(eagle, tmp_path, on_error):
    src = tmp_path / "src"
    bad = corrupt_copy(eagle, src)
    out = tmp_path / "ds"
    flags = [] if on_error is None else ["--on-error", on_error]
    p = run("pack", src, "-o", out, "--progress", "none", *flags, check=False)
    assert p.returncode == 1
    assert "data_13.ckpt" in p.stderr and "sample" in p.stderr, p.stderr
    assert run("info", out, check=False).returncode == 1  # does not open as a dataset
    assert not (out / "manifest.json").exists()


def test_schema_mismatch_names_file_and_difference(eagle, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(eagle, src)
    target = src / "rows_20-30" / "data_21.ckpt"
    d = torch.load(target, weights_only=True)
    d["hidden_state"] = d["hidden_state"].to(torch.float16)
    torch.save(d, target)
    p = run("pack", src, "-o", tmp_path / "a", "-q", check=False)
    assert p.returncode == 1
    assert "rows_20-30/data_21.ckpt" in p.stderr and "hidden_state" in p.stderr
    assert "float16" in p.stderr and "bfloat16" in p.stderr, p.stderr

    d["hidden_state"] = torch.zeros(1, d["input_ids"].shape[0], H + 1, dtype=torch.bfloat16)
    torch.save(d, target)
    p = run("pack", src, "-o", tmp_path / "b", "-q", check=False)
    assert p.returncode == 1 and "data_21.ckpt" in p.stderr and "dim 2" in p.stderr, p.stderr
    run("pack", src, "-o", tmp_path / "c", "-q", "--allow-varying-dims")

    del d["loss_mask"]
    torch.save(d, target)
    p = run("pack", src, "-o", tmp_path / "d", "-q", check=False)
    assert p.returncode == 1 and "data_21.ckpt" in p.stderr and "'loss_mask' is missing" in p.stderr


def test_malicious_pickle_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    src = tmp_path / "src"
    src.mkdir()
    torch.save({"input_ids": torch.arange(3), "x": Evil()}, src / "evil.pt")
    p = run("pack", src, "-o", tmp_path / "ds", "-q", check=False)
    assert p.returncode == 1 and "evil.pt" in p.stderr, p.stderr
    assert not marker.exists()


@pytest.mark.parametrize("args", [
    [],
    ["pack"],
    ["pack", "SRC"],                                   # no -o
    ["pack", "SRC", "-o", "OUT", "--shard-size", "12X"],
    ["pack", "SRC", "-o", "OUT", "--part", "4/4"],
    ["pack", "SRC", "-o", "OUT", "--resume", "--append"],
    ["pack", "SRC", "-o", "OUT", "--compress", "lz4"],
    ["pack", "SRC", "-o", "OUT", "--on-error", "ignore"],
    ["pack", "SRC", "-o", "OUT", "--no-such-flag"],
    ["frobnicate"],
    ["unpack", "DS"],
])
def test_usage_errors_exit_2(tmp_path, args):
    args = [str(tmp_path / a) if a in ("SRC", "OUT", "DS") else a for a in args]
    p = run(*args, check=False)
    assert p.returncode == 2, (args, p.returncode, p.stderr)
    assert p.stderr.strip(), "a usage error says what is wrong"


def test_on_error_names_raise_and_skip(tmp_path):
    p = run("pack", tmp_path / "src", "-o", tmp_path / "ds", "--on-error", "ignore", check=False)
    assert p.returncode == 2
    assert "'ignore'" in p.stderr and "raise" in p.stderr and "skip" in p.stderr, p.stderr
    help_text = run("pack", "--help").stdout
    assert "raise: stop at the first bad source" in help_text, help_text


def test_help_exits_0():
    for cmd in (["--help"], ["pack", "--help"], ["info", "--help"], ["verify", "--help"],
                ["unpack", "--help"], ["merge", "--help"], ["bench", "--help"]):
        p = run(*cmd)
        assert "Usage" in p.stdout or "usage" in p.stdout.lower()


def test_verify_detects_corruption_and_changed_sources(eagle, tmp_path):
    out = tmp_path / "ds"
    run("pack", eagle, "-o", out, "-q", "--shard-size", "16K")
    src = tmp_path / "src"
    shutil.copytree(eagle, src)
    target = src / "rows_0-10" / "data_4.ckpt"
    d = torch.load(target, weights_only=True)
    d["aux_hidden_state"][0, 0, 5] += 1
    torch.save(d, target)
    p = run("verify", out, "--against", src, check=False)
    assert p.returncode == 1
    assert "sample 4" in p.stderr and "aux_hidden_state" in p.stderr and "byte" in p.stderr, p.stderr
    # Flip a byte inside a sample: the checksum catches it.
    shard = sorted(out.glob("shard-*.lss"))[1]
    data = bytearray(shard.read_bytes())
    data[4096 + 100] ^= 1
    shard.write_bytes(bytes(data))
    p = run("verify", out, check=False)
    assert p.returncode == 1 and "sample" in p.stderr, p.stderr


# --- resume, part + merge, append -----------------------------------------------------------

def comparable(j: dict) -> dict:
    t = j["totals"]
    return {"samples": t["samples"], "raw_bytes": t["raw_bytes"], "source_bytes": t["source_bytes"],
            "lengths": j["lengths"], "schema": j["schema"], "first": j["provenance"]["first"],
            "last": j["provenance"]["last"]}


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("many")
    write_eagle(root, range(60), seed=3, max_len=200)
    return root


@pytest.fixture(scope="module")
def reference(many, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "ds"
    run("pack", many, "-o", out, "-q", "--shard-size", "64K")
    return comparable(info(out)), unpack_bytes(out, out.parent / "un")


def size_or_zero(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:  # not created yet, or removed by the commit
        return 0


def test_resume_after_sigkill_equals_uninterrupted(many, reference, tmp_path):
    ref_info, ref_bytes = reference
    rnd = random.Random(1234)
    # Time an uninterrupted run with the same (slow: small journal interval, fsync) settings.
    args = ["pack", str(many), "--shard-size", "64K", "--journal-every", "8K", "--threads", "2",
            "--progress", "none"]
    t0 = time.monotonic()
    run(*args, "-o", tmp_path / "timing")
    full = time.monotonic() - t0
    resumed_samples = 0  # samples a --resume kept instead of redoing
    for trial in range(3):
        out = tmp_path / f"ds{trial}"
        kills = 0
        for attempt in range(6):
            extra = ["--resume"] if attempt else []
            proc = subprocess.Popen([CLI, *args, "-o", str(out), *extra], text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            if attempt < 3:
                # Kill after this run has made a checkpoint of its own (its journal grew), at a
                # random point after that: a kill timed against the clock alone lands before the
                # first checkpoint or after the commit too often to test resuming.
                # A fresh run's journal starts as its header alone: a checkpoint is growth past it.
                # The first trial kills right at a checkpoint, so that at least one resume keeps
                # samples however the machine's load stretches the run (CI: 3 random kills on a
                # loaded machine all landed where no resume kept any).
                journal = out / "_journal.lsj"
                start_size = size_or_zero(journal)
                while proc.poll() is None and start_size == 0:
                    time.sleep(0.001)
                    start_size = size_or_zero(journal)
                while proc.poll() is None and size_or_zero(journal) <= start_size:
                    time.sleep(0.001)
                time.sleep(rnd.uniform(0, full * 0.3) if trial else 0)
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    kills += 1
            stdout, err = proc.communicate(timeout=120)
            if proc.returncode == 0:
                m = re.search(r"\((\d+) already there\)", stdout)
                resumed_samples += int(m.group(1)) if m else 0
                break
            assert proc.returncode == -signal.SIGKILL, err
            # A kill is either before the commit (the manifest's rename: the dataset reads as
            # incomplete, exit 1) or after it, while the process prints its summary and exits (the
            # dataset is complete and must then equal the reference, checked below).
            rc = run("info", out, check=False).returncode
            assert rc in (0, 1), f"trial {trial}: info exited {rc} after a kill"
            if rc == 0:
                break
        else:
            pytest.fail(f"trial {trial}: no run finished")
        assert comparable(info(out)) == ref_info, f"trial {trial}, {kills} kills"
        assert unpack_bytes(out, tmp_path / f"un{trial}") == ref_bytes, f"trial {trial}"
        # Resuming a finished dataset changes nothing.
        run(*args, "-o", out, "--resume")
        assert comparable(info(out)) == ref_info
    assert resumed_samples > 0, "no kill landed after the first journal checkpoint"


def test_part_and_merge_equals_one_pack(many, reference, tmp_path):
    ref_info, ref_bytes = reference
    parts = []
    for i in range(3):
        part = tmp_path / f"part{i}"
        run("pack", many, "-o", part, "--part", f"{i}/3", "-q", "--shard-size", "64K")
        assert info(part)["samples"] == 20
        parts.append(part)
    merged = tmp_path / "merged"
    run("merge", merged, *parts)
    assert comparable(info(merged)) == ref_info
    assert unpack_bytes(merged, tmp_path / "un") == ref_bytes
    run("verify", merged, "--against", many)


def test_append_adds_only_new_sources(tmp_path):
    src = tmp_path / "src"
    write_eagle(src, range(0, 6), seed=9)
    out = tmp_path / "ds"
    run("pack", src, "-o", out, "-q")
    write_eagle(src, range(6, 10), seed=9)
    p = run("pack", src, "-o", out, "--append", "--progress", "none")
    assert "packed 4 samples" in p.stdout and "6 already there" in p.stdout, p.stdout
    assert info(out)["samples"] == 10
    unpacked_equals_sources(out, src, rels_of(src), tmp_path)
    p = run("pack", src, "-o", out, "--append", "--progress", "none")
    assert "packed 0 samples" in p.stdout and info(out)["samples"] == 10
    # A plain pack into an existing dataset refuses and says what to do.
    p = run("pack", src, "-o", out, "-q", check=False)
    assert p.returncode == 1 and "--append" in p.stderr


# --- one writer per dataset; a truthful --resume --------------------------------------------

def write_named(root: Path, prefix: str, n: int, seed: int) -> List[str]:
    """n small torch.save files PREFIX_i.pt (the prefix names which run a sample came from)."""
    root.mkdir(parents=True, exist_ok=True)
    rels = []
    for i in range(n):
        gen = torch.Generator().manual_seed(seed * 1009 + i)
        torch.save(eagle_sample(gen, 3 + (i * 13 + seed) % 40), root / f"{prefix}_{i}.pt")
        rels.append(f"{prefix}_{i}.pt")
    return rels


def assert_samples_match_their_sources(out: Path, roots: Dict[str, Path], tmp: Path) -> int:
    """verify passes, and every sample unpacked under the name its provenance gives equals
    torch.load of that source file (roots: file-name prefix -> source directory)."""
    run("verify", out)
    un = tmp / f"by_source_{len(list(tmp.iterdir()))}"
    run("unpack", out, "-o", un, "--naming", "source", "-q")
    files = sorted(p for p in un.rglob("*") if p.is_file())
    assert len(files) == info(out)["samples"]
    for f in files:
        rel = f.relative_to(un).as_posix()
        root = roots[rel.split("_")[0]]
        assert_same(load(f), load(root / rel), f"sample named {rel}")
    return len(files)


def hold_lock(out: Path, note: str):
    """Takes OUT/.libshard.lock as a writer would, from this process; returns the open file."""
    import fcntl
    out.mkdir(parents=True, exist_ok=True)
    f = open(out / ".libshard.lock", "a+")
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    f.truncate(0)
    f.write(note)
    f.flush()
    return f


def test_a_held_dataset_refuses_every_other_writer_at_once(tmp_path):
    src = tmp_path / "src"
    write_named(src, "base", 4, seed=1)
    out = tmp_path / "ds"
    run("pack", src, "-o", out, "-q")
    before = unpack_bytes(out, tmp_path / "before")
    extra = tmp_path / "extra"
    write_named(extra, "a", 3, seed=2)
    note = f"pid=4242\nhost=elsewhere\nsince=2026-01-02T03:04:05Z\n"
    fresh = tmp_path / "fresh"
    with hold_lock(out, note), hold_lock(fresh, note):
        for args in (["pack", extra, "-o", out, "--append"],
                     ["pack", src, "-o", out, "--resume"],
                     ["pack", src, "-o", fresh],
                     ["merge", fresh, out]):
            p = run(*args, "--progress" if args[0] == "pack" else "-q",
                    *(["none"] if args[0] == "pack" else []), check=False)
            assert p.returncode == 1, (args, p.stderr)
            assert ("is being written by another process (pid 4242, host elsewhere, since "
                    "2026-01-02T03:04:05Z); wait for it") in p.stderr, (args, p.stderr)
        assert not (fresh / "manifest.json").exists() and not (fresh / "_journal.lsj").exists()
    assert unpack_bytes(out, tmp_path / "after") == before
    # Released: the same commands now work.
    run("pack", extra, "-o", out, "--append", "-q")
    assert assert_samples_match_their_sources(out, {"base": src, "a": extra}, tmp_path) == 7


def test_two_appends_at_once_one_is_refused_while_the_other_holds_the_dataset(tmp_path):
    """The first --append is stopped (SIGSTOP) while it holds OUT; the second must be refused at
    once, and the first then completes a dataset whose every sample is its own source's."""
    base, a, b = tmp_path / "base", tmp_path / "a", tmp_path / "b"
    write_named(base, "base", 3, seed=3)
    write_named(a, "a", 40, seed=4)
    write_named(b, "b", 5, seed=5)
    for attempt in range(10):
        out = tmp_path / f"ds{attempt}"
        run("pack", base, "-o", out, "-q")
        first = subprocess.Popen([CLI, "pack", str(a), "-o", str(out), "--append", "--threads", "1",
                                  "--progress", "none"], text=True, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
        lock = out / ".libshard.lock"
        deadline = time.monotonic() + 60
        caught = False
        while first.poll() is None and time.monotonic() < deadline:
            try:
                if f"pid={first.pid}\n" in lock.read_text():
                    first.send_signal(signal.SIGSTOP)
                    caught = True
                    break
            except FileNotFoundError:
                pass
            time.sleep(0.0005)
        if not caught:  # it finished before we saw it holding the lock: a faster machine
            first.communicate(timeout=120)
            continue
        try:
            second = run("pack", b, "-o", out, "--append", "--progress", "none", check=False,
                         timeout=120)
        finally:
            first.send_signal(signal.SIGCONT)
        assert second.returncode == 1, second.stdout + second.stderr
        assert f"is being written by another process (pid {first.pid}, host " in second.stderr
        _, err = first.communicate(timeout=120)
        assert first.returncode == 0, err
        assert assert_samples_match_their_sources(out, {"base": base, "a": a}, tmp_path) == 43
        # Once the first is done the second goes through.
        run("pack", b, "-o", out, "--append", "-q")
        assert assert_samples_match_their_sources(out, {"base": base, "a": a, "b": b},
                                                  tmp_path) == 48
        return
    pytest.skip("every first --append finished before it could be stopped while holding OUT")


def test_concurrent_packs_never_make_a_wrong_dataset(tmp_path):
    """The race of the issue, unsynchronised: two --append (and two fresh packs) started
    together. Whatever the interleaving, each run either succeeds or is refused with the lock
    message, and the dataset verifies with every sample equal to the file its name says."""
    base, a, b = tmp_path / "base", tmp_path / "a", tmp_path / "b"
    write_named(base, "base", 2, seed=6)
    write_named(a, "a", 6, seed=7)
    write_named(b, "b", 6, seed=8)
    roots = {"base": base, "a": a, "b": b}
    for trial in range(6):
        out = tmp_path / f"ds{trial}"
        append = trial % 2 == 0
        if append:
            run("pack", base, "-o", out, "-q")
        procs = [subprocess.Popen([CLI, "pack", str(src), "-o", str(out), "--threads", "1",
                                   "--progress", "none", *(["--append"] if append else [])],
                                  text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for src in (a, b)]
        results = [(p.wait(timeout=120), p.communicate()[1]) for p in procs]
        for rc, err in results:
            assert rc == 0 or (rc == 1 and ("is being written by another process" in err or
                                            "already holds a dataset" in err)), err
        assert any(rc == 0 for rc, _ in results)
        expect = (2 if append else 0) + 6 * sum(rc == 0 for rc, _ in results)
        assert assert_samples_match_their_sources(out, roots, tmp_path) == expect


def test_resume_of_a_finished_dataset_tells_the_truth(tmp_path):
    src = tmp_path / "src"
    write_named(src, "s", 8, seed=10)
    out = tmp_path / "ds"
    run("pack", src, "-o", out, "-q")
    before = unpack_bytes(out, tmp_path / "before")
    p = run("pack", src, "-o", out, "--resume", "--progress", "none")
    assert f"nothing to resume: {out} is complete with all 8 sources" in p.stdout, p.stdout
    write_named(src, "t", 5, seed=11)
    p = run("pack", src, "-o", out, "--resume", "--progress", "none", check=False)
    assert p.returncode == 1, p.stdout + p.stderr
    assert (f"{out} is complete (8 samples); nothing to resume. 5 of the 13 sources selected "
            f"(first: t_0.pt) are not in it: use --append to add them") in p.stderr, p.stderr
    assert unpack_bytes(out, tmp_path / "after") == before
    run("pack", src, "-o", out, "--append", "-q")
    p = run("pack", src, "-o", out, "--resume", "--progress", "none")
    assert f"nothing to resume: {out} is complete with all 13 sources" in p.stdout, p.stdout
    assert info(out)["samples"] == 13


def test_resume_counts_sources_the_finished_job_skipped(tmp_path):
    src = tmp_path / "src"
    write_named(src, "s", 4, seed=12)
    (src / "s_9.pt").write_bytes(b"not a torch file")
    out = tmp_path / "ds"
    run("pack", src, "-o", out, "-q", "--on-error", "skip")
    assert info(out)["samples"] == 4
    p = run("pack", src, "-o", out, "--resume", "--on-error", "skip", "--progress", "none")
    assert "nothing to resume" in p.stdout and "all 5 sources" in p.stdout, p.stdout


def test_upgrade_rewrites_a_version_1_index_and_keeps_the_shards(tmp_path):
    """`libshard upgrade` (FORMAT.md §3.8.8, §3.9): same samples, shard files untouched,
    idempotent, field checksums added."""
    golden = REPO / "tests" / "data" / "golden_v1_uids"
    ds = tmp_path / "ds"
    shutil.copytree(golden, ds)
    run("unpack", ds, "-o", tmp_path / "before")
    p = run("upgrade", ds)
    assert "rewritten as version 4 with field checksums" in p.stdout
    assert json.loads((ds / "manifest.json").read_text())["version"] == 4
    assert not (ds / "index.lsi").exists() and (ds / "index.a.lsi").exists()
    assert "sample and field checksums" in run("verify", ds).stdout
    run("unpack", ds, "-o", tmp_path / "after")
    before = sorted(p.relative_to(tmp_path / "before") for p in (tmp_path / "before").rglob("*.pt"))
    after = sorted(p.relative_to(tmp_path / "after") for p in (tmp_path / "after").rglob("*.pt"))
    assert before == after and before
    for rel in before:  # unpack writes the same bytes for the same samples
        assert (tmp_path / "before" / rel).read_bytes() == (tmp_path / "after" / rel).read_bytes(), rel
    for shard in golden.glob("*.lss"):
        assert (ds / shard.name).read_bytes() == shard.read_bytes()
    assert "already version 4" in run("upgrade", ds).stdout
    p = run("upgrade", tmp_path / "missing", check=False)
    assert p.returncode == 1 and "missing" in p.stderr


@pytest.mark.parametrize("compress", ["none", "auto"])
def test_bench_runs_and_reports_its_workers(eagle, tmp_path, compress):
    out = tmp_path / "out"
    run("pack", eagle, "-o", out, "--compress", compress)
    p = run("bench", out, "--epochs", "1", "--skip-raw", "--memory-budget", "64MiB")
    line = next(l for l in p.stdout.splitlines() if l.startswith("loader ("))
    # worker_threads 0: one decoding thread per core (at most 8) when compressed, else 1.
    want = 1 if compress == "none" else min(os.cpu_count() or 1, 8)
    assert f"workers {want}," in line, line
    assert "decoded:" in p.stdout
