"""libshard.Writer: bit-exact round trips of every dtype, schema errors naming key and field, keys
(has, duplicates, Dataset.find), resume after abort and after kill -9, several ranks (env, Slurm-
like variables, torchrun with gloo) joined by key into one dataset, kill -9 at random moments of a
2-process run equal to an uninterrupted run."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import libshard
from conftest import _cli, assert_sample_equal, make_all_dtypes_sample, make_eagle_sample

HERE = Path(__file__).resolve().parent
CHILD = str(HERE / "writer_child.py")
sys.path.insert(0, str(HERE))
from writer_child import make_sample  # noqa: E402


def _tensors(sample):
    return {k: v for k, v in sample.items() if isinstance(v, torch.Tensor)}


def _read_all(path):
    ds = libshard.open(path)
    return [(ds.source(i), ds[i]) for i in range(len(ds))]


def _child_env(extra=None):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("SLURM_") or k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
            del env[k]
    env.update(extra or {})
    return env


def test_round_trip_every_dtype_bit_exact(tmp_path):
    gen = torch.Generator().manual_seed(3)
    samples = [make_all_dtypes_sample(gen, 3 + 2 * i) for i in range(5)]
    out = tmp_path / "ds"
    with libshard.Writer(out, shard_size="8KiB") as w:
        for i, s in enumerate(samples):
            w.write(s, key=f"k{i}")
        assert w.has("k4") and not w.has("k5")
    ds = libshard.open(out)
    assert len(ds) == 5 and len(ds.shards) > 1
    for i, s in enumerate(samples):
        assert ds.source(i) == f"k{i}"
        assert ds.find(f"k{i}") == i
        assert_sample_equal(ds[i], _tensors(s), f"sample {i}")
    with pytest.raises(KeyError):
        ds.find("nope")
    # The schema is what pack infers: input_ids gives the length.
    assert ds.schema.length_field == "input_ids"
    assert ds.lengths.tolist() == [3 + 2 * i for i in range(5)]


@pytest.mark.parametrize("compress", ["zstd", "zstd:1"])
def test_compressed_round_trip_and_metadata(tmp_path, compress):
    gen = torch.Generator().manual_seed(4)
    samples = [make_eagle_sample(gen, 10 + i) for i in range(6)]
    out = tmp_path / "ds"
    with libshard.Writer(out, compress=compress) as w:
        for i, s in enumerate(samples):
            w.write({**s, "conv_id": f"c{i}", "score": i * 0.5}, key=f"conv_{i}")
    ds = libshard.open(out)
    for i, s in enumerate(samples):
        assert_sample_equal(ds[i], {**s, "conv_id": f"c{i}", "score": i * 0.5})
    assert any(ds.location(i)["flags"] & 1 for i in range(len(ds)))  # zstd kept somewhere


def test_schema_errors_name_key_and_field(tmp_path):
    gen = torch.Generator().manual_seed(5)
    with libshard.Writer(tmp_path / "ds") as w:
        w.write(make_eagle_sample(gen, 8), key="a")
        bad = make_eagle_sample(gen, 8)
        bad["hidden_state"] = bad["hidden_state"].float()
        with pytest.raises(libshard.InvalidArgumentError, match="'b'.*hidden_state.*dtype") as e:
            w.write(bad, key="b")
        assert isinstance(e.value, ValueError)
        missing = make_eagle_sample(gen, 8)
        del missing["loss_mask"]
        with pytest.raises(ValueError, match="'c'.*loss_mask.*missing"):
            w.write(missing, key="c")
        wide = make_eagle_sample(gen, 8, hidden=32)  # hidden size changes: not the seq dim
        with pytest.raises(ValueError, match="'d'.*hidden_state.*dim 2"):
            w.write(wide, key="d")
        with pytest.raises(ValueError, match="'a' is already"):
            w.write(make_eagle_sample(gen, 8), key="a")
        with pytest.raises(ValueError, match="key must be"):
            w.write(make_eagle_sample(gen, 8), key=3)  # type: ignore[arg-type]
        w.write(make_eagle_sample(gen, 30), key="e")  # another length is fine
    assert [libshard.open(tmp_path / "ds").source(i) for i in range(2)] == ["a", "e"]
    with pytest.raises(ValueError, match="closed"):
        w.write(make_eagle_sample(gen, 8), key="f")


def test_given_schema_and_resume_refuses_another(tmp_path):
    gen = torch.Generator().manual_seed(6)
    first = tmp_path / "first"
    with libshard.Writer(first) as w:
        w.write(make_eagle_sample(gen, 5), key="x")
    schema = libshard.open(first).schema
    out = tmp_path / "ds"
    w = libshard.Writer(out, schema=schema)
    assert w.schema == schema
    w.write(make_eagle_sample(gen, 5), key="y")
    w.close()
    other = libshard.Schema(schema.fields[:2], "input_ids")
    with pytest.raises(ValueError, match="another schema"):
        libshard.Writer(out, schema=other)


def test_abort_then_reopen_keeps_durable_keys(tmp_path):
    out = tmp_path / "ds"
    w = libshard.Writer(out, journal_every=1, threads=2)
    for i in range(6):
        w.write(make_sample(i), key=f"s{i:05d}")
    w.flush()  # every sample appended; journal_every=1 journals each one
    w.abort()  # as a crash would: no commit
    assert not (out / "manifest.json").exists()
    with libshard.Writer(out) as w2:
        assert all(w2.has(f"s{i:05d}") for i in range(6)) and len(w2) == 6
        for i in range(10):
            if not w2.has(f"s{i:05d}"):
                w2.write(make_sample(i), key=f"s{i:05d}")
    got = _read_all(out)
    assert [k for k, _ in got] == [f"s{i:05d}" for i in range(10)]
    for i, (_, s) in enumerate(got):
        assert_sample_equal(s, make_sample(i))
    # Reopened after the commit: appends, and has() knows everything.
    with libshard.Writer(out) as w3:
        assert w3.has("s00009")
        w3.write(make_sample(10), key="s00010")
    assert libshard.open(out).find("s00010") == 10


def test_background_error_surfaces_on_next_call(tmp_path):
    # Metadata over the format's 1 MiB limit passes write()'s checks and fails in the encoder
    # thread: the error is raised by a later call, and the writer takes nothing more.
    w = libshard.Writer(tmp_path / "ds")
    w.write(make_sample(0), key="a")
    w.write({**make_sample(1), "note": "x" * (2 << 20)}, key="big")
    with pytest.raises(libshard.InvalidArgumentError, match="big"):
        for i in range(2, 200):
            w.write(make_sample(i), key=f"k{i}")
        w.flush()
    with pytest.raises(libshard.InvalidArgumentError, match="big"):
        w.close()
    assert not (tmp_path / "ds" / "manifest.json").exists()


def _run_ranks(out, n, world, extra_env, mode="env", slow=0.0):
    procs = []
    for r in range(world):
        env = _child_env({k: v.format(rank=r, world=world) for k, v in extra_env.items()})
        procs.append(subprocess.Popen([sys.executable, CHILD, str(out), str(n), "--mode", mode,
                                       "--slow", str(slow)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    return procs


def _wait_ok(procs):
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()[-3000:]


def _expect_dataset(out, n):
    got = _read_all(out)
    assert [k for k, _ in got] == [f"s{i:05d}" for i in range(n)]
    for i, (_, s) in enumerate(got):
        assert_sample_equal(s, make_sample(i), f"s{i:05d}")


@pytest.mark.parametrize("env", [
    {"RANK": "{rank}", "WORLD_SIZE": "{world}"},
    {"SLURM_PROCID": "{rank}", "SLURM_NTASKS": "{world}"},
    {"SLURM_ARRAY_TASK_ID": "{rank}", "SLURM_ARRAY_TASK_COUNT": "{world}", "SLURM_NTASKS": "1",
     "SLURM_PROCID": "0"},
], ids=["torchrun_env", "slurm_tasks", "slurm_array"])
def test_ranks_join_into_one_dataset_ordered_by_key(tmp_path, env):
    out = tmp_path / "ds"
    n, world = 23, 3
    _wait_ok(_run_ranks(out, n, world, env))
    assert sorted(os.listdir(out / "parts")) == [
        ".join.lock", ".joined-of-00003"] + [f"rank-{r:05d}-of-00003" for r in range(3)]
    _expect_dataset(out, n)
    # Hard links: the joined shards are the parts' files, no byte copied.
    ds = libshard.open(out)
    for s in ds.shards:
        assert os.stat(s["path"]).st_nlink == 2


def test_rank_without_samples_does_not_block_the_join(tmp_path):
    out = tmp_path / "ds"
    _wait_ok(_run_ranks(out, 2, 3, {"RANK": "{rank}", "WORLD_SIZE": "{world}"}))
    assert (out / "parts" / "rank-00002-of-00003.empty").exists()
    _expect_dataset(out, 2)
    with pytest.raises(ValueError, match="written by several ranks"):
        libshard.Writer(out, rank=0, world_size=1)


def test_torchrun_gloo_two_processes(tmp_path):
    out = tmp_path / "ds"
    env = _child_env({"OMP_NUM_THREADS": "1"})
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "--standalone", CHILD, str(out),
                        "17", "--mode", "torchrun"], env=env, capture_output=True, timeout=180)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    _expect_dataset(out, 17)


def test_join_is_independent_of_finish_order(tmp_path):
    # Rank 1 finishes before rank 0 in one run, after it in the other: same dataset.
    results = []
    for first in (0, 1):
        out = tmp_path / f"ds{first}"
        for r in (first, 1 - first):
            _wait_ok([subprocess.Popen(
                [sys.executable, CHILD, str(out), "11"],
                env=_child_env({"RANK": str(r), "WORLD_SIZE": "2"}),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)])
        results.append([(k, {n: t.clone() for n, t in s.items()}) for k, s in _read_all(out)])
    assert [k for k, _ in results[0]] == [k for k, _ in results[1]]
    for (k, a), (_, b) in zip(*results):
        assert_sample_equal(a, b, k)


def test_kill9_at_random_moments_equals_uninterrupted(tmp_path):
    n, world = 40, 2
    env = {"RANK": "{rank}", "WORLD_SIZE": "{world}"}
    rnd = random.Random(int(os.environ.get("LIBSHARD_TEST_SEED", "11")))
    out = tmp_path / "killed"
    kills = 0
    interrupted = set()  # keys that were durable in an interrupted part at some kill
    for attempt in range(5):
        procs = _run_ranks(out, n, world, env, slow=0.05)
        procs[attempt % world].stdout.readline()  # its first write (or EOF: it had nothing left)
        time.sleep(rnd.uniform(0.0, 1.2))  # ~1 s of writes per rank
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                kills += 1
        for p in procs:
            p.wait(timeout=60)
        for part in (out / "parts").glob("rank-*") if (out / "parts").exists() else []:
            if (part / "_journal.lsj").exists():
                interrupted.add(part.name)
        if (out / "manifest.json").exists():
            break
    _wait_ok(_run_ranks(out, n, world, env))  # finish whatever is left (or a no-op rerun)
    assert kills > 0 and interrupted, (kills, interrupted)
    _expect_dataset(out, n)
    ds = libshard.open(out)
    ds.verify()


def test_merge_by_key_cli_and_python(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    with libshard.Writer(a) as w:
        for i in (4, 0, 2):
            w.write(make_sample(i), key=f"s{i:05d}")
    with libshard.Writer(b) as w:
        for i in (3, 1):
            w.write(make_sample(i), key=f"s{i:05d}")
    libshard.merge(tmp_path / "m", [a, b], by_key=True)
    _expect_dataset(tmp_path / "m", 5)
    libshard.merge(tmp_path / "p", [a, b])  # part order
    assert [k for k, _ in _read_all(tmp_path / "p")] == [
        "s00004", "s00000", "s00002", "s00003", "s00001"]
    with pytest.raises(ValueError, match="key 's00000' occurs in part"):
        libshard.merge(tmp_path / "dup", [a, a], by_key=True)
    assert not (tmp_path / "dup" / "manifest.json").exists()
    cli = _cli()
    if cli is None:
        pytest.skip("no libshard command")
    r = subprocess.run([cli, "merge", "--by-key", str(tmp_path / "c"), str(b), str(a)],
                       capture_output=True)
    assert r.returncode == 0, r.stderr
    _expect_dataset(tmp_path / "c", 5)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_copied_off_the_gpu_without_caller_sync(tmp_path):
    # Tensors made by kernels still queued on the current stream, then overwritten by the next
    # sample's kernels: the writer's copy is ordered after the first and before the second.
    dev = torch.device("cuda")
    want = []
    with libshard.Writer(tmp_path / "ds") as w:
        buf = torch.empty(1, 4096, 256, device=dev, dtype=torch.bfloat16)
        for i in range(8):
            torch.cuda._sleep(10_000_000)  # keeps the stream busy: the fill runs late
            hs = buf.fill_(float(i)).clone()
            ids = torch.arange(4096, device=dev) + i
            w.write({"input_ids": ids, "hidden_state": hs}, key=f"g{i}")
            want.append({"input_ids": torch.arange(4096) + i,  # computed here: no sync
                         "hidden_state": torch.full((1, 4096, 256), float(i),
                                                    dtype=torch.bfloat16)})
    ds = libshard.open(tmp_path / "ds")
    for i in range(8):
        assert_sample_equal(ds[i], want[i], f"g{i}")


def test_pack_part_auto_reads_launcher_variables(tmp_path, eagle_src):
    cli = _cli()
    if cli is None:
        pytest.skip("no libshard command")
    for env, name in [({"RANK": "1", "WORLD_SIZE": "3"}, "torchrun"),
                      ({"SLURM_PROCID": "1", "SLURM_NTASKS": "3"}, "slurm"),
                      ({"SLURM_ARRAY_TASK_ID": "6", "SLURM_ARRAY_TASK_MIN": "5",
                        "SLURM_ARRAY_TASK_COUNT": "3"}, "array")]:
        r = subprocess.run([cli, "pack", str(eagle_src), "-o", str(tmp_path / name), "--part",
                            "auto", "--progress", "none"], env=_child_env(env), capture_output=True)
        assert r.returncode == 0, r.stderr
    r = subprocess.run([cli, "pack", str(eagle_src), "-o", str(tmp_path / "explicit"), "--part",
                        "1/3", "--progress", "none"], env=_child_env(), capture_output=True)
    assert r.returncode == 0, r.stderr
    want = [libshard.open(tmp_path / "explicit").source(i)
            for i in range(len(libshard.open(tmp_path / "explicit")))]
    for name in ("torchrun", "slurm", "array"):
        ds = libshard.open(tmp_path / name)
        assert [ds.source(i) for i in range(len(ds))] == want, name
    r = subprocess.run([cli, "pack", str(eagle_src), "-o", str(tmp_path / "none"), "--part",
                        "auto"], env=_child_env(), capture_output=True)
    assert r.returncode != 0 and b"--part auto" in r.stderr


ATTRS = {"target_model": "meta-llama/Llama-3.1-8B-Instruct", "hidden_state_layer_ids": "31",
         "aux_hidden_state_layer_ids": "1,15,28", "hidden_size": 4096}


def test_attributes_recorded_shown_checked(tmp_path):
    import json
    out = tmp_path / "ds"
    with libshard.Writer(out, attrs=ATTRS) as w:
        w.write(make_sample(0), key="a")
    ds = libshard.open(out)
    assert ds.attributes == ATTRS
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["provenance"]["attributes"] == ATTRS
    ds.check({"target_model": ATTRS["target_model"], "hidden_size": 4096})
    libshard.Loader(out, expect={"target_model": ATTRS["target_model"]})
    with pytest.raises(libshard.InvalidArgumentError,
                       match="made with target_model='meta-llama/Llama-3.1-8B-Instruct', not "
                             "'Qwen/Qwen3-8B'"):
        libshard.Loader(out, expect={"target_model": "Qwen/Qwen3-8B"})
    with pytest.raises(ValueError, match="does not record attribute 'tokenizer'"):
        libshard.Loader(out, expect={"tokenizer": "x"})
    with pytest.raises(ValueError, match="must be a str or an int"):
        libshard.Writer(tmp_path / "bad", attrs={"layers": [1, 2]}).write(make_sample(0), key="a")
    # Reopened with a contradicting attribute: refused; with agreeing ones: kept.
    with pytest.raises(ValueError, match="mix two setups"):
        libshard.Writer(out, attrs={**ATTRS, "hidden_size": 8192})
    with libshard.Writer(out, attrs={"target_model": ATTRS["target_model"]}) as w:
        w.write(make_sample(1), key="b")
    assert libshard.open(out).attributes == ATTRS
    cli = _cli()
    if cli is not None:
        r = subprocess.run([cli, "info", str(out)], capture_output=True, text=True)
        assert r.returncode == 0 and "target_model" in r.stdout and "Llama-3.1-8B" in r.stdout
        r = subprocess.run([cli, "info", "--json", str(out)], capture_output=True, text=True)
        assert json.loads(r.stdout)["attributes"] == ATTRS


def test_attributes_of_parts_must_agree(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    with libshard.Writer(a, attrs=ATTRS) as w:
        w.write(make_sample(0), key="x")
    with libshard.Writer(b, attrs={**ATTRS, "target_model": "other"}) as w:
        w.write(make_sample(1), key="y")
    with pytest.raises(ValueError, match="other attributes.*target_model=other"):
        libshard.merge(tmp_path / "m", [a, b])
    libshard.merge(tmp_path / "ok", [a, a / ".." / "a"], by_key=False)
    assert libshard.open(tmp_path / "ok").attributes == ATTRS


def test_attributes_damaged_in_manifest_is_corruption(tmp_path):
    import json
    out = tmp_path / "ds"
    with libshard.Writer(out, attrs={"k": "v"}) as w:
        w.write(make_sample(0), key="a")
    m = json.loads((out / "manifest.json").read_text())
    m["provenance"]["attributes"]["k"] = [1]
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(libshard.CorruptionError, match="attributes.k"):
        libshard.open(out)


def test_pack_attr(tmp_path, eagle_src):
    cli = _cli()
    if cli is None:
        pytest.skip("no libshard command")
    r = subprocess.run([cli, "pack", str(eagle_src), "-o", str(tmp_path / "p"), "--progress",
                        "none", "--attr", "target_model=m/1", "--attr", "hidden_size=16",
                        "--attr", "layer_ids=01"], capture_output=True)
    assert r.returncode == 0, r.stderr
    assert libshard.open(tmp_path / "p").attributes == {
        "target_model": "m/1", "hidden_size": 16, "layer_ids": "01"}
    r = subprocess.run([cli, "pack", str(eagle_src), "-o", str(tmp_path / "q"), "--attr", "novalue"],
                       capture_output=True)
    assert r.returncode == 2 and b"KEY=VALUE" in r.stderr
    if getattr(libshard._core, "HAVE_PACK", False):
        libshard.pack(eagle_src, tmp_path / "py", attrs={"target_model": "m/2"})
        assert libshard.open(tmp_path / "py").attributes == {"target_model": "m/2"}
