"""The writing side decided once, in the C++ library (issue 22): the Writer's and pack's option
tables behind the bindings, the CLI and the stubs (errors in Python's words, not the CLI's), one
schema inference for ``libshard pack`` and ``libshard.Writer``, and the join of a multi-rank
write (JoinParts) called through the bindings."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import inspect
import os
from pathlib import Path

import pytest
import torch

import libshard
from libshard import _core
from libshard._writer import infer_schema

pytestmark = pytest.mark.skipif(not getattr(_core, "HAVE_PACK", False),
                                reason="built without the pack pipeline")


# ---- one schema inference -------------------------------------------------------------------

def _cases():
    g = torch.Generator().manual_seed(7)
    L = 37
    return {
        "eagle3": {"input_ids": torch.randint(0, 100, (L,), generator=g),
                   "loss_mask": torch.ones(L, dtype=torch.int64),
                   "aux_hidden_state": torch.randn(1, L, 24, generator=g).bfloat16(),
                   "hidden_state": torch.randn(1, L, 8, generator=g).bfloat16()},
        "token_ids": {"hidden_states": torch.randn(L, 3, 8, generator=g).half(),
                      "token_ids": torch.arange(L)},
        "no_length": {"input_ids": torch.zeros(2, L, dtype=torch.int64),
                      "h": torch.randn(4, L, 5, generator=g),
                      "scalar": torch.tensor(3.0)},
        "tie": {"input_ids": torch.arange(L), "square": torch.randn(L, L, generator=g),
                "fixed": torch.randn(5, generator=g), "lead": torch.randn(1, L, L, generator=g)},
        "length_elsewhere": {"x": torch.randn(1, 9, 4, generator=g), "y": torch.arange(9)},
    }


@pytest.mark.parametrize("case", sorted(_cases()))
def test_writer_and_pack_infer_the_same_schema(tmp_path, case):
    tensors = _cases()[case]
    src = tmp_path / "src"
    src.mkdir()
    torch.save(tensors, src / "a.pt")
    libshard.pack(src, tmp_path / "packed")
    packed = libshard.open(tmp_path / "packed").schema
    assert infer_schema(tensors) == packed
    with libshard.Writer(tmp_path / "written", fsync=False) as w:
        w.write(tensors, key="a")
    assert libshard.open(tmp_path / "written").schema == packed


def test_schema_inference_errors_name_the_sample(tmp_path):
    with pytest.raises(libshard.InvalidArgumentError, match="sample 'k' has no tensors"):
        libshard.Writer(tmp_path / "w").write({"note": "text only"}, key="k")
    with pytest.raises(libshard.InvalidArgumentError, match="complex64.*does not store"):
        infer_schema({"z": torch.zeros(3, dtype=torch.complex64)})


# ---- option tables --------------------------------------------------------------------------

def _signature_matches(fn, rows, skip=()):
    params = inspect.signature(fn).parameters
    checked = 0
    for name, p in params.items():
        if name in rows and name not in skip:
            assert repr(p.default) == rows[name]["default"], name
            checked += 1
    return checked


def test_writer_signature_defaults_are_the_table():
    rows = {row["name"]: row for row in _core.writer_option_table()}
    assert _signature_matches(libshard.Writer.__init__, rows) >= 7
    assert {"queue_bytes", "journal_every_bytes", "compression"} <= {
        a for row in rows.values() for a in row["aliases"]}


def test_pack_signature_defaults_are_the_table():
    rows = {row["name"]: row for row in _core.pack_option_table()}
    assert _signature_matches(libshard.pack, rows, skip=("src", "out")) >= 12
    # Every row but the front end's own (attrs, progress) reaches PackOptions; the CLI's flags
    # are the aliases.
    assert rows["shard_size"]["aliases"] == ["--shard-size"]
    assert rows["out"]["aliases"][0] == "--output"


def test_writer_options_are_checked_by_the_table_at_construction(tmp_path):
    with pytest.raises(ValueError, match="Writer option 'shard_size'.*'4Gigs'"):
        libshard.Writer(tmp_path / "a", shard_size="4Gigs")
    with pytest.raises(ValueError, match="Writer option 'threads' = 0 is out of range; use 1..256"):
        libshard.Writer(tmp_path / "b", threads=0)
    with pytest.raises(ValueError, match="Writer option 'compress'.*-7..22"):
        libshard.Writer(tmp_path / "c", compress="zstd:99")
    with pytest.raises(ValueError, match="Writer option 'queue_size' = 0 is out of range"):
        libshard.Writer(tmp_path / "d", queue_size=0)
    assert not os.path.exists(tmp_path / "a")  # refused before anything was made


def test_writer_store_dtype_is_pack_store_dtype(tmp_path):
    """Writer(store_dtype=) stores what pack --store-dtype stores (the library's one parser)."""
    gen = torch.Generator().manual_seed(3)
    samples = [{"input_ids": torch.arange(n), "hidden_state": torch.randn(1, n, 8, generator=gen)
                .bfloat16()} for n in (5, 9)]
    src = tmp_path / "src"
    src.mkdir()
    for i, s in enumerate(samples):
        torch.save(s, src / f"s{i}.pt")
    with libshard.Writer(tmp_path / "w", store_dtype="float8_e4m3fn", compress="auto") as w:
        for i, s in enumerate(samples):
            w.write(s, key=f"s{i}.pt")
    libshard.pack(src, tmp_path / "p", store_dtype="float8_e4m3fn", compress="auto")
    a, b = libshard.open(tmp_path / "w"), libshard.open(tmp_path / "p")
    for i in range(2):
        assert torch.equal(a[i]["hidden_state"], b[i]["hidden_state"])
        assert not torch.equal(a[i]["hidden_state"], samples[i]["hidden_state"])  # lossy
    with pytest.raises(ValueError, match="Writer option 'store_dtype'.*'int4'"):
        libshard.Writer(tmp_path / "x", store_dtype="int4")


def test_pack_errors_speak_python_not_the_cli(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    torch.save({"input_ids": torch.arange(5)}, src / "a.pt")
    cases = [
        (dict(src=None, out=tmp_path / "o"), "'src'"),
        (dict(src=src, out=tmp_path / "o", resume=True, append=True),
         "'resume' and 'append' exclude each other"),
        (dict(src=src, out=tmp_path / "o", compress="zstd", store_dtype="float8_e4m3fn"),
         "exclude each other"),
        (dict(src=src, out=tmp_path / "o", fields=["input_ids", "input_ids"]),
         "'fields' names 'input_ids' twice"),
        (dict(src=src, out=tmp_path / "o", threads=5000), "pack option 'threads' = 5000"),
        (dict(src=src, out=tmp_path / "o", shard_size="huge"), "pack option 'shard_size'"),
    ]
    for kwargs, want in cases:
        with pytest.raises(ValueError) as info:
            libshard.pack(**kwargs)
        msg = str(info.value)
        assert want in msg, msg
        assert "--" not in msg and "-o OUT" not in msg, msg
    libshard.pack(src, tmp_path / "done")
    with pytest.raises(libshard.Error) as info:
        libshard.pack(src, tmp_path / "done")  # exists: says which option continues or adds
    assert "'append'" in str(info.value) and "--append" not in str(info.value), str(info.value)


# ---- the join of a multi-rank write ---------------------------------------------------------

def _write_rank(out: Path, rank: int, world: int, keys):
    w = libshard.Writer(out, rank=rank, world_size=world, fsync=False)
    for k in keys:
        w.write({"input_ids": torch.arange(3 + len(k))}, key=k)
    w.close()
    return w


def test_join_through_the_library(tmp_path):
    out = tmp_path / "ds"
    assert _core.part_directory(str(out), 1, 2) == str(out / "parts" / "rank-00001-of-00002")
    w0 = _write_rank(out, 0, 2, ["b", "d"])
    assert not w0.joined and not (out / "manifest.json").exists()
    w1 = _write_rank(out, 1, 2, ["a", "c"])
    assert w1.joined
    ds = libshard.open(out)
    assert [ds.source(i) for i in range(len(ds))] == ["a", "b", "c", "d"]
    again = _core.join_parts(str(out), 2)
    assert again["joined"] and again["already_joined"] and again["parts_joined"] == 2


def test_join_refuses_a_key_in_two_parts(tmp_path):
    out = tmp_path / "ds"
    _write_rank(out, 0, 2, ["a", "b"])
    with pytest.raises(ValueError, match="key 'b' occurs in part .*rank-00000.* and in part"):
        _write_rank(out, 1, 2, ["b", "c"])
    assert not (out / "manifest.json").exists()


def test_an_empty_rank_is_recorded_by_the_library(tmp_path):
    out = tmp_path / "ds"
    libshard.Writer(out, rank=1, world_size=2).close()
    assert (out / "parts" / "rank-00001-of-00002.empty").exists()
    w0 = _write_rank(out, 0, 2, ["x"])
    assert w0.joined and len(libshard.open(out)) == 1
