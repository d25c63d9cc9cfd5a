"""Loader options decided once, in the C++ library (issue 22): the option table behind the
bindings, the generated stubs, the Python signature's defaults, an empty field selection, a C++
caller and a Python caller getting the same batches, and the one rank resolver."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import inspect
import os
import re
import random
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import torch

import libshard
from libshard import _core
from libshard._world import resolve_world

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"memory_budget": "64MiB"}
N = 200


@pytest.fixture(scope="module")
def varlen(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("options") / "ds"
    rnd = random.Random(22)
    gen = torch.Generator().manual_seed(22)
    with libshard.Writer(out, fsync=False) as w:
        for i in range(N):
            length = rnd.randint(4, 120)
            w.write({"input_ids": torch.randint(0, 1000, (length,), generator=gen),
                     "hidden_state": torch.randn(1, length, 8, generator=gen)}, key=f"s{i}")
    return out


def test_committed_stubs_match_the_generator():
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(_core.__file__)))
    r = subprocess.run([sys.executable, str(ROOT / "scripts/gen_core_pyi.py"), "--check"],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + " (run scripts/gen_core_pyi.py and commit _core.pyi)"


def test_python_signature_defaults_are_the_tables():
    rows = {row["name"]: row for row in _core.loader_option_table()}
    params = inspect.signature(libshard.Loader.__init__).parameters
    checked = 0
    for name, p in params.items():
        if name in rows and name not in ("rank", "world_size"):  # resolved by resolve_world
            assert repr(p.default) == rows[name]["default"], name
            checked += 1
    assert checked >= 25


def test_dataset_cache_options_are_the_dataset_table():
    """cache / cache_size of libshard.open, Dataset and Loader are DatasetOptionTable's rows
    (the CLI's --cache / --cache-size read the same table): same names, same defaults."""
    rows = {row["name"]: row for row in _core.dataset_option_table()}
    assert set(rows) == {"cache", "cache_size"}
    assert rows["cache_size"]["unset"]  # None and 0: no bound
    for fn in (libshard.open, libshard.Dataset.__init__, libshard.Loader.__init__):
        params = inspect.signature(fn).parameters
        for name, row in rows.items():
            assert repr(params[name].default) == row["default"], (fn, name)


def test_every_table_row_reaches_the_core(varlen):
    ds = libshard.Dataset(varlen)
    rows = {row["name"] for row in _core.loader_option_table()}
    assert {"budget"} <= {a for row in _core.loader_option_table() for a in row["aliases"]}
    with pytest.raises(libshard.InvalidArgumentError, match="'no_such' is not a known option"):
        _core.Loader(ds._core, {"no_such": 1})
    assert "verify" in rows and "consumer_pads" in rows


def test_empty_field_selection_is_an_error(varlen):
    with pytest.raises(ValueError, match="fields' is an empty list") as info:
        libshard.Loader(varlen, fields=[], **SMALL)
    assert isinstance(info.value, libshard.InvalidArgumentError)
    with pytest.raises(libshard.InvalidArgumentError, match="selects no field"):
        _core.Loader(libshard.Dataset(varlen)._core, {"fields": []})
    # None reads every field, a name reads one.
    assert set(next(iter(libshard.Loader(varlen, fields=None, **SMALL)))) >= {"input_ids",
                                                                              "hidden_state"}
    one = next(iter(libshard.Loader(varlen, fields="input_ids", **SMALL)))
    assert "hidden_state" not in one


def test_errors_speak_the_options_not_the_cli(varlen):
    for kwargs, words in [(dict(queue_depth=5000), "Loader option 'queue_depth' = 5000"),
                          (dict(batch_size=0), "'batch_size' = 0 is out of range"),
                          (dict(max_tokens=10, token_budget="most"), "'token_budget' = 'most'"),
                          (dict(bucket_window="big", batch_size=2), "'bucket_window' = 'big'"),
                          (dict(worker_threads=-2), "'worker_threads' = -2")]:
        with pytest.raises(libshard.InvalidArgumentError, match=words) as info:
            libshard.Loader(varlen, **kwargs, **SMALL)
        assert " --" not in str(info.value) and "pass -" not in str(info.value)


def test_auto_settings_are_decided_in_cpp():
    decide = _core.resolve_loader_options
    assert decide({"collate": "pad", "batch_size": 4}) == {"token_budget": "padded",
                                                          "bucket_window": 4096}
    assert decide({"collate": "pack", "max_tokens": 64}) == {"token_budget": "sum",
                                                            "bucket_window": 0}
    assert decide({"consumer_pads": True, "max_tokens": 64})["bucket_window"] == 4096
    assert decide({"collate": "pad", "max_tokens": 64, "bucket_window": None})["bucket_window"] == 0
    assert decide({"collate": "pad"})["bucket_window"] == 0  # single samples
    assert libshard.Loader.AUTO_BUCKET_WINDOW == 4096


# -- a C++ caller and a Python caller, same options, same batches --------------------------------

def _core_steps(ds: libshard.Dataset, options: Dict[str, Any]) -> List[Tuple[List[int], Any]]:
    """Steps of the raw core loader, which fills a LoaderOptions from only the keys given, as a
    C++ caller does (every other member at its C++ default)."""
    core = _core.Loader(ds._core, options)
    out = []
    while True:
        raw = core.next()
        if raw is None:
            break
        if isinstance(raw, tuple):
            fields, indices = raw[0], raw[1]
            out.append((list(indices), {name: tuple(shape) for name, _, shape, _ in fields}))
        else:
            out.append(([s[0] for s in raw], None))
    core.close()
    return out


def _python_steps(loader: libshard.Loader, collated: bool) -> List[Tuple[List[int], Any]]:
    out = []
    for step in loader:
        if collated:
            out.append((step["__index__"].tolist(),
                        {k: tuple(step[k].shape) for k in ("input_ids", "hidden_state")}))
        else:
            out.append(([s["__index__"] for s in step], None))
    return out


@pytest.mark.parametrize("options", [
    {"collate": "pad", "batch_size": 8},                       # auto window: on (4096)
    {"collate": "pad", "max_tokens": 512},                     # auto budget: padded
    {"collate": "pad", "max_tokens": 512, "bucket_window": 32},
    {"collate": "pad", "max_tokens": 512, "token_budget": "sum", "bucket_window": 0},
    {"collate": "pack", "max_tokens": 512},                    # auto: sum, no window
    {"collate": "pack", "max_tokens": 512, "bucket_window": 64},
    {"collate": "pack", "batch_size": 5, "max_len": 40},
    {"max_tokens": 300},                                        # lists of samples
    {"batch_size": 6, "bucket_window": 48, "world_size": 2, "rank": 1},
])
def test_cpp_and_python_callers_get_the_same_batches(varlen, options):
    ds = libshard.Dataset(varlen)
    core_options = dict(options, seed=5, memory_budget=64 << 20)
    cpp = _core_steps(ds, core_options)
    py = _python_steps(libshard.Loader(ds, seed=5, return_index=True, **options, **SMALL),
                       collated="collate" in options)
    assert len(cpp) > 1 and cpp == py
    if options.get("collate") == "pad" and options.get("bucket_window") is None:
        # The auto window is on for both: batches differ from the unbucketed order.
        plain = _core_steps(ds, dict(core_options, bucket_window=0))
        assert [i for i, _ in plain] != [i for i, _ in cpp]


def test_python_pad_collate_buckets_like_collate_pad(varlen):
    ds = libshard.Dataset(varlen)
    native = libshard.Loader(ds, seed=2, max_tokens=512, collate="pad", return_index=True,
                             **SMALL)
    python = libshard.Loader(ds, seed=2, max_tokens=512, collate=libshard.pad_collate,
                             return_index=True, **SMALL)
    assert [s["__index__"].tolist() for s in native] == [s["__index__"].tolist() for s in python]


# -- one rank resolver --------------------------------------------------------------------------

LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS",
                 "SLURM_LOCALID", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN",
                 "SLURM_ARRAY_TASK_COUNT")


@pytest.fixture
def clean_env(monkeypatch):
    for k in LAUNCHER_VARS:
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


@pytest.mark.parametrize("env, want", [
    ({}, (0, 1, "default")),
    ({"RANK": "3", "WORLD_SIZE": "4"}, (3, 4, "RANK/WORLD_SIZE")),
    ({"RANK": "3", "WORLD_SIZE": "4", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"},
     (3, 4, "RANK/WORLD_SIZE")),
    ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}, (1, 2, "SLURM_PROCID/SLURM_NTASKS")),
    ({"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "5", "SLURM_ARRAY_TASK_COUNT": "4"},
     (2, 4, "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT")),
])
def test_resolver_precedence(env, want):
    assert resolve_world(environment=env) == want
    assert resolve_world(1, 8, environment=env) == (1, 8, "arguments")


@pytest.mark.parametrize("env, words", [
    ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x'"),
    ({"RANK": "1"}, "WORLD_SIZE is not"),
    ({"WORLD_SIZE": "2"}, "RANK is not"),
    ({"SLURM_PROCID": "2", "SLURM_NTASKS": "2"}, "SLURM_PROCID=2"),
    ({"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_COUNT": "3"}, "gaps or steps"),
])
def test_resolver_names_inconsistent_variables(env, words):
    with pytest.raises(libshard.InvalidArgumentError, match=words):
        resolve_world(environment=env)


def test_loader_and_writer_share_the_resolver(varlen, clean_env, tmp_path):
    clean_env.setenv("SLURM_PROCID", "1")
    clean_env.setenv("SLURM_NTASKS", "2")
    loader = libshard.Loader(varlen, **SMALL)
    assert (loader.rank, loader.world_size) == (1, 2)
    from libshard._writer import resolve_writer_rank
    assert resolve_writer_rank(None, None) == (1, 2, "SLURM_PROCID/SLURM_NTASKS")
    clean_env.setenv("RANK", "0")
    clean_env.setenv("WORLD_SIZE", "1")
    loader = libshard.Loader(varlen, **SMALL)
    assert (loader.rank, loader.world_size) == (0, 1)  # torchrun's variables win over Slurm's
    with pytest.raises(libshard.InvalidArgumentError, match="rank=3, world_size=2"):
        libshard.Loader(varlen, rank=3, world_size=2, **SMALL)


def test_torch_distributed_wins_over_the_environment(clean_env, tmp_path):
    import torch.distributed as dist
    clean_env.setenv("RANK", "1")
    clean_env.setenv("WORLD_SIZE", "3")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        assert resolve_world() == (0, 1, "torch.distributed")
        assert resolve_world(None, 5) == (0, 5, "arguments and torch.distributed")
        assert resolve_world(2, 4) == (2, 4, "arguments")
    finally:
        dist.destroy_process_group()


# -- one compression spec parser -----------------------------------------------------------------

@pytest.mark.parametrize("spec", ["zstd:99", "zstd:x", "lz5", "zstd:-8"])
def test_writer_compress_is_parsed_by_the_library(tmp_path, spec):
    with pytest.raises(libshard.InvalidArgumentError,
                       match=r"Writer option 'compress': invalid compression .*-7\.\.22"):
        with libshard.Writer(tmp_path / "out", compress=spec, fsync=False) as w:
            w.write({"input_ids": torch.arange(4)}, key="a")


def test_writer_compress_levels_and_codecs_round_trip(tmp_path):
    for spec in (None, "none", "zstd", "zstd:5", "ZSTD:-3", "auto", "planes", "planes2"):
        out = tmp_path / f"ds-{spec}".replace(":", "_")
        with libshard.Writer(out, compress=spec, fsync=False) as w:
            w.write({"input_ids": torch.arange(16), "hidden_state": torch.ones(1, 16, 8,
                                                                               dtype=torch.bfloat16)},
                    key="a")
        assert libshard.Dataset(out)[0]["input_ids"].tolist() == list(range(16))


def test_pack_flags_are_the_pack_table():
    """`libshard pack --help` lists a flag for every pack option row with a CLI alias, with the
    row's doc (the flags are generated from the table, not written again in the CLI)."""
    cli = os.environ.get("LIBSHARD_CLI")
    if not cli:
        pytest.skip("LIBSHARD_CLI is not set")
    help_text = subprocess.run([cli, "pack", "--help"], capture_output=True, text=True,
                               check=True).stdout
    flat = " ".join(help_text.split())
    rows = list(_core.pack_option_table())
    flagged = [row for row in rows if any(a.startswith("--") for a in row["aliases"])]
    assert len(flagged) >= 15
    for row in flagged:
        # A row on by default is turned off by its --no-X flag (CommandLineSpellingOf); the
        # others are their flags.
        for flag in row["flags"] or [row["negation"]]:
            assert re.search(r"(^|[\s,])" + re.escape(flag) + r"\b", help_text), (flag, help_text)
        if row["name"] != "progress":  # the CLI's own modes, not the C++ callback
            doc = row["doc"].split(" (CLI:")[0]
            assert " ".join(doc.split()) in flat, (row["name"], doc)
            assert " ".join(row["help"].split()) in flat, (row["name"], row["help"])
    for negation in ("--no-hash", "--no-crc", "--no-fsync"):
        assert negation in help_text


def test_pack_in_flight_bytes_keeps_window_bytes_as_an_alias():
    rows = {row["name"]: row for row in _core.pack_option_table()}
    assert "window_bytes" not in rows
    assert {"--window", "window_bytes"} <= set(rows["in_flight_bytes"]["aliases"])
