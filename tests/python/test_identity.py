"""Dataset identity (issue 45.1; docs/guide/writing.md#identity, FORMAT.md §2.2): what made a
dataset (its attributes and schema, hashed) is recorded, shown, and checked by every write that
continues or combines datasets, through every front end: a reopened libshard.Writer (resume and
append), parts of several ranks and their join, `libshard pack --resume/--append` (with the
identity a cache's own manifest gives), `libshard merge`, and capture's rerun. Any difference is
refused naming the key and both values; `allow_identity_change` / `--allow-identity-change` sets
what a changed run no longer continues aside (kept, never reused), and merges deliberately.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import conftest
import libshard
from cache_writers import deepspec_files, write_files
from capture_util import clean_env

GEN = str(conftest.REPO / "tests" / "python" / "generators" / "toy_generator.py")
ATTRS = {"target_model": "meta-llama/Llama-3.1-8B-Instruct", "hidden_state_layer_ids": "31",
         "hidden_size": 16, "seed": 1}


def sample(i: int) -> dict:
    g = torch.Generator().manual_seed(i)
    n = 3 + i % 5
    return {"input_ids": torch.randint(0, 100, (n,), generator=g),
            "hidden_state": torch.randn(1, n, 16, generator=g).to(torch.bfloat16)}


def cli(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
    exe = conftest._cli()
    if exe is None:
        pytest.skip("the libshard command-line tool is not built")
    r = subprocess.run([exe, *args], capture_output=True, text=True)
    if ok:
        assert r.returncode == 0, r.stderr
    return r


def stale(path: Path) -> list:
    """The set-aside copies of `path` (its siblings named NAME.stale-*)."""
    return sorted(path.parent.glob(path.name + ".stale-*"))


def unfinished(out: Path, keys, **kw) -> None:
    """A write stopped without commit: its journal stays (as after a kill)."""
    w = libshard.Writer(out, journal_every=1, **kw)
    for k in keys:
        w.write(sample(int(k[1:])), key=k)
    w.flush()
    w.abort()


# ---- recorded and shown ------------------------------------------------------------------------

def test_identity_recorded_shown_and_stable(tmp_path):
    out = tmp_path / "ds"
    with libshard.Writer(out, attrs=ATTRS) as w:
        for i in range(3):
            w.write(sample(i), key=f"k{i}")
    ds = libshard.open(out)
    ident = ds.identity
    assert ident.recorded and ident.attributes == ATTRS
    assert len(ident.digest) == 16 and int(ident.digest, 16) >= 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["provenance"]["identity"] == {"version": 1, "xxh3": ident.digest}
    info = json.loads(cli("info", "--json", str(out)).stdout)
    assert info["identity"] == {"xxh3": ident.digest, "recorded": True}
    assert f"identity     xxh3 {ident.digest}" in cli("info", str(out)).stdout
    # The same attributes and schema give the same digest; any other value another one.
    with libshard.Writer(tmp_path / "same", attrs=ATTRS) as w:
        w.write(sample(9), key="other")
    assert libshard.open(tmp_path / "same").identity.digest == ident.digest
    with libshard.Writer(tmp_path / "other", attrs={**ATTRS, "seed": "1"}) as w:
        w.write(sample(9), key="other")
    assert libshard.open(tmp_path / "other").identity.digest != ident.digest


def test_a_dataset_written_before_identities_opens_with_none_recorded(tmp_path):
    out = tmp_path / "old"
    with libshard.Writer(out, attrs={"k": "v"}) as w:
        w.write(sample(0), key="a")
    m = json.loads((out / "manifest.json").read_text())
    del m["provenance"]["identity"]  # as every manifest before identities
    (out / "manifest.json").write_text(json.dumps(m))
    ds = libshard.open(out)
    assert not ds.identity.recorded and ds.identity.attributes == {"k": "v"}
    assert "not recorded" in cli("info", str(out)).stdout
    # Its writes are checked against what it records like any other's.
    with pytest.raises(libshard.InvalidArgumentError, match="k='v'.*'w'"):
        libshard.Writer(out, attrs={"k": "w"})
    with libshard.Writer(out, attrs={"k": "v"}) as w:
        w.write(sample(1), key="b")
    assert libshard.open(out).identity.recorded  # recorded from its next commit on


def test_an_edited_manifest_is_refused(tmp_path):
    out = tmp_path / "ds"
    with libshard.Writer(out, attrs={"target_model": "a"}) as w:
        w.write(sample(0), key="a")
    m = json.loads((out / "manifest.json").read_text())
    m["provenance"]["attributes"]["target_model"] = "b"
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(libshard.CorruptionError, match="edited or damaged"):
        libshard.open(out)


# ---- libshard.Writer: resume and append ------------------------------------------------------

def test_writer_resume_refuses_another_identity_and_keeps_the_journal(tmp_path):
    out = tmp_path / "ds"
    unfinished(out, ["k0", "k1"], attrs=ATTRS)
    with pytest.raises(libshard.InvalidArgumentError) as e:
        libshard.Writer(out, attrs={**ATTRS, "target_model": "Qwen/Qwen3-8B"})
    msg = str(e.value)
    assert "target_model='meta-llama/Llama-3.1-8B-Instruct'" in msg and "'Qwen/Qwen3-8B'" in msg
    assert "allow_identity_change=True" in msg and "unfinished write" in msg
    with pytest.raises(libshard.InvalidArgumentError, match="records no attribute 'tokenizer'"):
        libshard.Writer(out, attrs={"tokenizer": "x"})
    assert not stale(out)
    # Fewer attributes (none) continue it, keeping all it records.
    with libshard.Writer(out) as w:
        assert w.has("k0") and w.has("k1") and w.set_aside == []
        w.write(sample(2), key="k2")
    ds = libshard.open(out)
    assert len(ds) == 3 and ds.attributes == ATTRS


def test_writer_allow_identity_change_sets_the_old_write_aside(tmp_path):
    out = tmp_path / "ds"
    unfinished(out, ["k0", "k1"], attrs=ATTRS)
    new = {**ATTRS, "target_model": "Qwen/Qwen3-8B"}
    with libshard.Writer(out, attrs=new, allow_identity_change=True) as w:
        assert [Path(p) for p in w.set_aside] == stale(out)
        assert not w.has("k0")            # the old samples are never reused
        w.write(sample(5), key="k5")
    ds = libshard.open(out)
    assert [ds.key(i) for i in range(len(ds))] == ["k5"] and ds.attributes == new
    (aside,) = stale(out)
    assert (aside / "_journal.lsj").exists() and (aside / "_identity.json").exists()
    # What was set aside is whole: resumed where it is, it is the old write.
    with libshard.Writer(aside, attrs=ATTRS) as w:
        assert w.has("k0") and w.has("k1")
    assert len(libshard.open(aside)) == 2


def test_writer_reopening_a_committed_dataset_checks_its_identity(tmp_path):
    out = tmp_path / "ds"
    with libshard.Writer(out, attrs=ATTRS) as w:
        w.write(sample(0), key="k0")
    with pytest.raises(libshard.InvalidArgumentError, match="a dataset made with seed=1.*gives 2"):
        libshard.Writer(out, attrs={"seed": 2})
    with libshard.Writer(out, attrs={"seed": 2}, allow_identity_change=True) as w:
        assert len(w.set_aside) == 1 and len(w) == 0
        w.write(sample(1), key="k1")
    assert libshard.open(out).attributes == {"seed": 2}
    assert len(libshard.open(stale(out)[0])) == 1


# ---- several ranks ------------------------------------------------------------------------------

def _rank(out: Path, rank: int, world: int, keys, **kw) -> libshard.Writer:
    w = libshard.Writer(out, rank=rank, world_size=world, **kw)
    for k in keys:
        w.write(sample(int(k[1:])), key=k)
    w.close()
    return w


def test_parts_of_another_world_size_are_set_aside_never_joined(tmp_path):
    out = tmp_path / "ds"
    # A run of 3 ranks: ranks 0 and 1 finish, rank 2 is killed (its journal stays).
    _rank(out, 0, 3, ["k0", "k3"])
    _rank(out, 1, 3, ["k1", "k4"])
    unfinished(libshard._writer.part_dir(str(out), 2, 3), ["k2"])
    parts = out / "parts"
    # Rerun with 2 ranks: the 3-rank parts are set aside (kept) when its first rank starts.
    w0 = _rank(out, 0, 2, ["k0", "k2"])
    assert len(w0.set_aside) == 3
    assert sorted(p.name.split(".stale-")[0] for p in parts.glob("*.stale-*")) == [
        "rank-00000-of-00003", "rank-00001-of-00003", "rank-00002-of-00003"]
    assert not list(parts.glob("rank-*-of-00003"))
    w1 = _rank(out, 1, 2, ["k1", "k3"])
    assert w1.set_aside == [] and w1.joined
    ds = libshard.open(out)
    assert sorted(ds.key(i) for i in range(len(ds))) == ["k0", "k1", "k2", "k3"]  # no k4
    # The set-aside parts are still there, whole.
    kept = next(parts.glob("rank-00001-of-00003.stale-*"))
    assert len(libshard.open(kept)) == 2
    # A follower sees one world size only.
    assert sorted(p.name for p in parts.iterdir() if not ".stale-" in p.name
                  and p.name.startswith("rank-")) == ["rank-00000-of-00002",
                                                       "rank-00001-of-00002"]


def test_parts_of_other_identities_are_not_joined_unless_allowed(tmp_path):
    out = tmp_path / "ds"
    _rank(out, 0, 2, ["k0"], attrs={"seed": 1})
    with pytest.raises(libshard.InvalidArgumentError, match="seed: 1 -> 2"):
        _rank(out, 1, 2, ["k1"], attrs={"seed": 2})
    assert not (out / "manifest.json").exists()
    assert libshard.join_parts(out, 2, allow_identity_change=True)
    assert libshard.open(out).attributes == {}  # what the parts share
    # A rank rerun with other attributes: refused, or its own part set aside.
    with pytest.raises(libshard.InvalidArgumentError, match="seed=1"):
        libshard.Writer(out, rank=0, world_size=2, attrs={"seed": 3})
    w = libshard.Writer(out, rank=0, world_size=2, attrs={"seed": 2}, allow_identity_change=True)
    assert len(w.set_aside) == 1 and "rank-00000-of-00002.stale-" in w.set_aside[0]
    w.write(sample(7), key="k7")
    w.close()
    ds = libshard.open(out)
    assert ds.attributes == {"seed": 2}
    assert sorted(ds.key(i) for i in range(len(ds))) == ["k1", "k7"]


def test_one_writers_dataset_is_not_replaced_by_a_join(tmp_path):
    out = tmp_path / "ds"
    with libshard.Writer(out) as w:
        w.write(sample(0), key="k0")
    with pytest.raises(libshard.InvalidArgumentError, match="written by one writer"):
        libshard.Writer(out, rank=0, world_size=2)
    assert len(libshard.open(out)) == 1


# ---- merge -----------------------------------------------------------------------------------

def test_merge_names_the_difference_and_merges_deliberately(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    with libshard.Writer(a, attrs={"target_model": "m", "data_source": "sharegpt"}) as w:
        w.write(sample(0), key="x")
    with libshard.Writer(b, attrs={"target_model": "m", "data_source": "ultrachat"}) as w:
        w.write(sample(1), key="y")
    r = cli("merge", str(tmp_path / "m"), str(a), str(b), ok=False)
    assert r.returncode != 0
    assert "data_source: 'sharegpt' -> 'ultrachat'" in r.stderr and \
        "--allow-identity-change" in r.stderr
    with pytest.raises(libshard.InvalidArgumentError, match="allow_identity_change=True"):
        libshard.merge(tmp_path / "p", [a, b])
    r = cli("merge", "--allow-identity-change", str(tmp_path / "m"), str(a), str(b))
    merged = libshard.open(tmp_path / "m")
    assert merged.attributes == {"target_model": "m"} and len(merged) == 2
    assert merged.identity.digest in r.stdout


# ---- pack ------------------------------------------------------------------------------------

def _deepspec(root: Path, model: str, n: int = 6) -> Path:
    g = torch.Generator().manual_seed(3)
    samples = []
    for i in range(n):
        L = 4 + i
        bits = lambda t: t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()  # noqa
        samples.append({
            "input_ids": bits(torch.randint(0, 999, (L,), generator=g, dtype=torch.int32)),
            "attention_mask": bits(torch.ones(L, dtype=torch.uint8)),
            "loss_mask": bits(torch.ones(L, dtype=torch.uint8)),
            "target_hidden_states": bits(torch.randn(L, 2 * 8, generator=g).bfloat16()),
            "target_last_hidden_states": bits(torch.randn(L, 8, generator=g).bfloat16()),
        })
    return write_files(root, deepspec_files(samples, layer_ids=[1, 2], hidden_size=8,
                                            extra={"target_model_name_or_path": model}))


def test_pack_append_of_a_cache_of_another_model_is_refused(tmp_path):
    a = _deepspec(tmp_path / "a", "Qwen/Qwen3-4B")
    b = _deepspec(tmp_path / "b", "Qwen/Qwen3-8B")
    out = tmp_path / "packed"
    cli("pack", str(a), "-o", str(out), "-q")
    assert libshard.open(out).identity.attributes["deepspec.target_model_name_or_path"] == \
        "Qwen/Qwen3-4B"
    r = cli("pack", str(b), "-o", str(out), "--append", "-q", ok=False)
    assert r.returncode == 1
    assert "deepspec.target_model_name_or_path='Qwen/Qwen3-4B'" in r.stderr and \
        "'Qwen/Qwen3-8B'" in r.stderr and "--allow-identity-change" in r.stderr, r.stderr
    assert len(libshard.open(out)) == 6
    # The same cache appends (nothing new); --attr must agree too.
    cli("pack", str(a), "-o", str(out), "--append", "-q")
    r = cli("pack", str(a), "-o", str(out), "--append", "--attr", "seed=3", ok=False)
    assert "records no attribute 'seed'" in r.stderr
    # Deliberately: the old dataset is set aside, OUT holds the new cache's samples.
    r = cli("pack", str(b), "-o", str(out), "--append", "--allow-identity-change")
    assert "set aside" in r.stdout
    (aside,) = stale(out)
    assert str(aside) in r.stdout
    assert libshard.open(out).identity.attributes["deepspec.target_model_name_or_path"] == \
        "Qwen/Qwen3-8B"
    assert len(libshard.open(aside)) == 6


def test_pack_resume_of_a_job_with_other_attributes(tmp_path):
    src = tmp_path / "src"
    conftest.write_eagle_dir(src, 6)
    (src / "rows_0-10" / "data_9.ckpt").write_bytes(b"not a torch file")  # sorts last
    out = tmp_path / "out"
    r = cli("pack", str(src), "-o", str(out), "--attr", "seed=1", "--journal-every", "1",
            "-q", ok=False)
    assert r.returncode != 0 and (out / "_journal.lsj").exists()
    (src / "rows_0-10" / "data_9.ckpt").unlink()
    r = cli("pack", str(src), "-o", str(out), "--resume", "--attr", "seed=2", ok=False)
    assert "seed=1" in r.stderr and "gives 2" in r.stderr and "--resume" in r.stderr, r.stderr
    if getattr(libshard._core, "HAVE_PACK", False):
        with pytest.raises(libshard.InvalidArgumentError, match="allow_identity_change=True"):
            libshard.pack(src, out, resume=True, attrs={"seed": 2})
        summary = libshard.pack(src, out, resume=True, attrs={"seed": 2},
                                allow_identity_change=True)
        assert [Path(p) for p in summary["set_aside"]] == stale(out)
        assert summary["already_present"] == 0 and summary["samples_added"] == 6
    else:
        cli("pack", str(src), "-o", str(out), "--resume", "--attr", "seed=2",
            "--allow-identity-change")
    assert libshard.open(out).attributes == {"seed": 2}
    assert (stale(out)[0] / "_journal.lsj").exists()


# ---- capture ---------------------------------------------------------------------------------

def _capture(out: Path, gen_out: Path, *flags: str, env=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "libshard.capture", "--out", str(out), "--journal-every", "1",
           *flags, "--", GEN, "--output-dir", str(gen_out), "--n", "4"]
    return subprocess.run(cmd, env=env or clean_env(), capture_output=True, text=True,
                          timeout=300)


def test_capture_rerun_checks_the_identity(tmp_path):
    out, gen = tmp_path / "ds", tmp_path / "gen"
    r = _capture(out, gen, "--attr", "target_model=a")
    assert r.returncode == 0, r.stderr
    r = _capture(out, gen, "--attr", "target_model=b")
    assert r.returncode == 2
    assert "target_model='a'" in r.stderr and "'b'" in r.stderr and \
        "allow_identity_change" in r.stderr, r.stderr
    r = _capture(out, gen, "--attr", "target_model=a")  # the same: resumes, nothing new
    assert r.returncode == 0 and "skipped 4" in r.stdout, r.stdout + r.stderr
    r = _capture(out, gen, "--attr", "target_model=b", "--allow-identity-change")
    assert r.returncode == 0, r.stderr
    assert "set aside" in r.stderr and "4 samples captured" in r.stderr, r.stderr
    assert libshard.open(out).attributes == {"target_model": "b"}
    assert len(libshard.open(stale(out)[0])) == 4


def test_capture_ranks_of_another_world_size_set_the_old_parts_aside(tmp_path):
    out, gen = tmp_path / "ds", tmp_path / "gen"
    r = _capture(out, gen, env=clean_env(RANK="0", WORLD_SIZE="3"))
    assert r.returncode == 0, r.stderr
    procs = [subprocess.Popen(
        [sys.executable, "-m", "libshard.capture", "--out", str(out), "--", GEN,
         "--output-dir", str(gen), "--indices", idx],
        env=clean_env(RANK=str(rank), WORLD_SIZE="2"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for rank, idx in enumerate(("0,2", "1,3"))]
    errs = ""
    for p in procs:
        _, err = p.communicate(timeout=300)
        errs += err
        assert p.returncode == 0, err
    assert "set aside" in errs and "rank-00000-of-00003.stale-" in errs
    ds = libshard.open(out)
    assert len(ds) == 4
    assert list((out / "parts").glob("rank-00000-of-00003.stale-*"))


def test_pack_part_rerun_with_another_n_is_refused(tmp_path):
    """`pack --part I/N` writes one part per OUT: a rerun of a part with another N (or other
    attributes) into the same OUT must not pass for that part, or the merged parts would hold a
    sample twice."""
    src = tmp_path / "src"
    conftest.write_eagle_dir(src, 6)
    part = tmp_path / "part0"
    cli("pack", str(src), "-o", str(part), "--part", "0/2", "--attr", "seed=1", "-q")
    assert len(libshard.open(part)) == 3
    # Part 0 of 3 is a subset of part 0 of 2: the old part is not that part.
    r = cli("pack", str(src), "-o", str(part), "--part", "0/3", "--attr", "seed=1", "--resume",
            ok=False)
    assert r.returncode == 1 and "not among the sources of this run" in r.stderr and \
        "--part" in r.stderr, r.stderr
    r = cli("pack", str(src), "-o", str(part), "--part", "0/2", "--attr", "seed=2", "--resume",
            ok=False)
    assert "seed=1" in r.stderr and "gives 2" in r.stderr, r.stderr
    r = cli("pack", str(src), "-o", str(part), "--part", "0/2", "--attr", "seed=1", "--resume")
    assert "nothing to resume" in r.stdout
