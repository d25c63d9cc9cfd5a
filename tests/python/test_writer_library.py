"""The writing side decided once, in the C++ library (issue 22): the Writer's and pack's option
tables behind the bindings, the CLI and the stubs (errors in Python's words, not the CLI's), one
schema inference for ``libshard pack`` and ``libshard.Writer``, and the join of a multi-rank
write (JoinParts) called through the bindings."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import argparse
import ast
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import libshard
from libshard import _core
from libshard._writer import infer_schema
from libshard import capture

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
    # The writer configuration's one bound (1..1024, 0 or None automatic; before it the Writer
    # said 1..256 and refused 0, pack said 1..1024).
    with pytest.raises(ValueError, match="Writer option 'threads' = 5000 is out of range; "
                                         "use 1..1024"):
        libshard.Writer(tmp_path / "b", threads=5000)
    with pytest.raises(ValueError, match="Writer option 'compress'.*-7..22"):
        libshard.Writer(tmp_path / "c", compress="zstd:99")
    # queue_size is in_flight_bytes's other spelling, named as given (0 is automatic, as pack's).
    with pytest.raises(ValueError, match="Writer option 'queue_size' must be a byte count"):
        libshard.Writer(tmp_path / "d", queue_size=-1)
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


# ---- one writer configuration (issue 43): every front end reads the same table ---------------

REPO = Path(__file__).resolve().parents[2]
WRITER_ROWS = {"compress", "store_dtype", "shard_size", "fsync", "journal_every",
               "commit_interval", "threads", "in_flight_bytes", "attrs", "allow_identity_change"}


def _flagged_writer_rows():
    """The writer configuration's rows users set (those with a command-line flag)."""
    return {row["name"]: row for row in _core.writer_option_table()
            if row["flags"] or row["negation"]}


def _cli_help() -> str:
    cli = os.environ.get("LIBSHARD_CLI")
    if not cli:
        pytest.skip("LIBSHARD_CLI is not set")
    return subprocess.run([cli, "pack", "--help"], capture_output=True, text=True,
                          check=True).stdout


def test_every_front_end_spells_bounds_and_defaults_each_row_as_the_table():
    """libshard.Writer's keywords, libshard.pack's table and keywords, `libshard pack`'s flags and
    --help and capture's argparse flags are all made from the writer configuration's rows: the
    same name, other spellings, bounds, default and help for each."""
    rows = _flagged_writer_rows()
    assert set(rows) == WRITER_ROWS
    pack_rows = {row["name"]: row for row in _core.pack_option_table()}
    writer_params = inspect.signature(libshard.Writer.__init__).parameters
    pack_params = inspect.signature(libshard.pack).parameters
    actions = {a.dest: a for a in capture._parser()._actions}
    cli_help = _cli_help()
    flat_help = " ".join(cli_help.split())
    for name, row in rows.items():
        assert pack_rows[name] == row, name  # name, spellings, bounds, default, doc, flags, help
        assert repr(writer_params[name].default) == row["default"], name
        if name in pack_params:
            assert repr(pack_params[name].default) == row["default"], name
        flags = row["flags"] or [row["negation"]]
        action = actions[name]
        assert action.option_strings == flags, name
        assert action.default is argparse.SUPPRESS, name  # the table's default, not capture's
        assert action.help.startswith(row["help"]), name
        for flag in flags:
            assert re.search(r"(^|[\s,])" + re.escape(flag) + r"\b", cli_help), flag
        assert " ".join(row["help"].split()) in flat_help, name
    assert rows["threads"]["min"] == 1 and rows["threads"]["max"] == 1024
    assert {"queue_size", "window_bytes", "--queue-size", "--window"} <= set(
        rows["in_flight_bytes"]["aliases"])
    assert "journal_every_bytes" in rows["journal_every"]["aliases"]


def test_every_front_ends_defaults_are_the_librarys(tmp_path):
    """A Writer, a pack() and a capture given no writer option end at the C++ struct's defaults:
    no front end decides a default of its own."""
    defaults = _core.format_writer_config({})
    w = libshard.Writer(tmp_path / "w")
    given = {k: v for k, v in w._options.items() if k != "created_by"}
    assert _core.format_writer_config(given) == defaults
    pack_params = inspect.signature(libshard.pack).parameters
    explicit = {n: pack_params[n].default for n in WRITER_ROWS if n in pack_params}
    assert len(explicit) >= 4
    assert _core.format_writer_config(explicit) == defaults
    literal = {n: ast.literal_eval(r["default"]) for n, r in _flagged_writer_rows().items()}
    assert _core.format_writer_config(literal) == defaults
    ns = capture._parser().parse_args(["--out", "x"])
    assert capture.writer_options(ns) == {}
    assert defaults.startswith("compress=none store_dtype=none shard_size=4GiB fsync=true "
                               "journal_every=1GiB commit_interval=5 threads=None "
                               "in_flight_bytes=None"), defaults


def _capture_refusal(tmp_path, *flags):
    r = subprocess.run([sys.executable, "-m", "libshard.capture", "--out", str(tmp_path / "cap"),
                        "--under", str(tmp_path / "u"), *flags, "--", "gen.py"],
                       capture_output=True, text=True, env={**os.environ})
    assert r.returncode == 2, r
    return r.stderr


@pytest.mark.parametrize("name,value,flag,want", [
    ("threads", 5000, "5000", "'threads' = 5000 is out of range; use 1..1024"),
    ("compress", "zstd:23", "zstd:23", "invalid compression 'zstd:23'"),
    ("shard_size", "0", "0", "'shard_size' = 0 is out of range"),
    ("in_flight_bytes", "lots", "lots", "invalid size 'lots'"),
    ("commit_interval", -1.0, "-1", "must be a number >= 0"),
])
def test_every_front_end_refuses_a_value_out_of_bounds_alike(tmp_path, name, value, flag, want):
    src = tmp_path / "src"
    src.mkdir()
    torch.save({"input_ids": torch.arange(5)}, src / "a.pt")
    with pytest.raises(libshard.InvalidArgumentError) as writer:
        libshard.Writer(tmp_path / "w", **{name: value})
    with pytest.raises(libshard.InvalidArgumentError) as pack:
        libshard.pack(src, tmp_path / "p", **{name: value})
    cli_flag = _flagged_writer_rows()[name]["flags"][0]
    cli = subprocess.run([os.environ.get("LIBSHARD_CLI") or pytest.skip("no LIBSHARD_CLI"),
                          "pack", str(src), "-o", str(tmp_path / "c"), cli_flag, flag],
                         capture_output=True, text=True)
    assert cli.returncode == 2, cli
    captured = _capture_refusal(tmp_path, cli_flag, flag)
    for message in (str(writer.value), str(pack.value), cli.stderr, captured):
        assert want.replace("'" + name + "'", "") in message.replace(
            cli_flag, "").replace("'" + name + "'", ""), (message, want)
    assert not (tmp_path / "w").exists() and not (tmp_path / "p").exists()


def test_zero_is_automatic_in_every_front_end(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    torch.save({"input_ids": torch.arange(5)}, src / "a.pt")
    with libshard.Writer(tmp_path / "w", threads=0, in_flight_bytes=0, journal_every=0,
                         fsync=False) as w:
        w.write({"input_ids": torch.arange(3)}, key="a")
    assert libshard.pack(src, tmp_path / "p", threads=0, in_flight_bytes=0, fsync=False)[
        "samples"] == 1
    cli = subprocess.run([os.environ.get("LIBSHARD_CLI") or pytest.skip("no LIBSHARD_CLI"),
                          "pack", str(src), "-o", str(tmp_path / "c"), "--threads", "0",
                          "--in-flight-bytes", "0", "--journal-every", "0", "--no-fsync", "-q"],
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert _core.format_writer_config({"threads": 0, "queue_size": 0, "journal_every": 0}) == \
        _core.format_writer_config({})


def test_other_spellings_keep_working_and_conflicts_are_refused(tmp_path):
    w = libshard.Writer(tmp_path / "a", queue_size="64MiB", journal_every_bytes="8MiB",
                        compression="zstd:5", commit_interval_seconds=1.5,
                        attributes={"model": "m"})
    assert "queue_size" in w._options and "in_flight_bytes" not in w._options
    printed = _core.format_writer_config(w._options)
    for part in ("in_flight_bytes=64MiB", "journal_every=8MiB", "compress=zstd:5",
                 "commit_interval=1.5", "attrs={model=m}"):
        assert part in printed, printed
    with w:
        w.write({"input_ids": torch.arange(4)}, key="k")
    assert libshard.open(tmp_path / "a").attributes == {"model": "m"}
    with pytest.raises(libshard.InvalidArgumentError, match="'in_flight_bytes' and 'queue_size' "
                                                            "are one setting"):
        libshard.Writer(tmp_path / "b", in_flight_bytes="1MiB", queue_size="2MiB")
    with pytest.raises(TypeError, match="unexpected keyword argument 'queue_sizes'"):
        libshard.Writer(tmp_path / "c", queue_sizes="1MiB")
    with pytest.raises(TypeError, match="'--compress'"):
        libshard.Writer(tmp_path / "d", **{"--compress": "zstd"})
    # The error names the spelling the caller wrote.
    with pytest.raises(ValueError, match="Writer option 'journal_every_bytes'"):
        libshard.Writer(tmp_path / "e", journal_every_bytes="much")
    src = tmp_path / "src"
    src.mkdir()
    torch.save({"input_ids": torch.arange(5)}, src / "a.pt")
    summary = libshard.pack(src, tmp_path / "p", window_bytes="64MiB", journal_every_bytes="1MiB",
                            queue_size="32MiB", compression="zstd")
    assert summary["samples"] == 1


def test_capture_reads_attributes_as_pack_does():
    """--attr KEY=VALUE is the library's ParseAttribute for pack and capture alike (capture had
    its own rule: '-1' stayed a str there and became an int in pack)."""
    items = ["a=-1", "b=007", "c=12", "d=x=y", "e=0"]
    want = {"a": -1, "b": "007", "c": 12, "d": "x=y", "e": 0}
    assert _core.parse_attributes(items) == want
    flags = [f for item in items for f in ("--attr", item)]
    ns = capture._parser().parse_args(["--out", "x", *flags])
    assert capture.writer_options(ns) == {"attrs": want}
    with pytest.raises(libshard.InvalidArgumentError, match="KEY=VALUE"):
        _core.parse_attributes(["novalue"])


def test_the_writing_guide_lists_every_row_with_its_default_and_spellings():
    """docs/guide/writing.md#options is the table: each row by name, flag, default and its other
    keyword spellings."""
    text = (REPO / "docs" / "guide" / "writing.md").read_text()
    lines = {m.group(1): line for line in text.splitlines()
             if (m := re.match(r"\| `(\w+)` \|", line))}
    for name, row in _flagged_writer_rows().items():
        cells = [c.strip() for c in lines[name].split("|")[1:-1]]
        flag = row["flags"][0] if row["flags"] else row["negation"]
        assert cells[1].startswith(f"`{flag}"), (name, cells)
        assert cells[2] == "`" + repr(ast.literal_eval(row["default"])).replace("'", '"') + "`", \
            (name, cells)
        for alias in row["aliases"]:
            if alias.isidentifier():
                assert f"`{alias}`" in cells[3], (name, alias, cells)


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
