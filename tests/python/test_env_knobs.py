"""Every LIBSHARD_* variable with a bad value, through every entry point (docs/guide/
environment.md): the library's table (libshard/src/util/env_knobs.cc, shown in the guide) is read
by all of them alike, so each refuses the value with an error naming the variable that is set:
the command line (every command), Python (open, follow, Loader, the read-ahead, Writer, pack,
merge, upgrade), and `python -m libshard.capture`. And an error about a setting names where its
value was read from (the variable or the file that is actually set), not another place."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest
import torch

import conftest
import libshard

GUIDE = conftest.REPO / "docs" / "guide" / "environment.md"


def table() -> List[Tuple[str, str]]:
    """(variable, type) of every row of the guide's table (held equal to the library's by
    tests/env_knobs_test.cc)."""
    rows = re.findall(r"^\| `(LIBSHARD_[A-Z0-9_]+)` \| (\w+) \|", GUIDE.read_text(), re.M)
    assert len(rows) >= 20, rows
    return rows


# A value each type refuses (a path takes any text: it has none).
BAD = {"count": ["many", "-1", "0.5"], "bytes": ["lots", "-4096"], "boolean": ["maybe"],
       "seconds": ["soon", "-2"], "word": ["bogus"], "url": ["localhost:9"]}
CASES = [(name, value) for name, kind in table() for value in BAD.get(kind, [])]
assert {kind for _, kind in table()} <= set(BAD) | {"path"}, "a new type needs its bad values"


def _sample(i: int) -> Dict[str, torch.Tensor]:
    return {"input_ids": torch.arange(i, i + 5), "hidden": torch.ones(5, 4, dtype=torch.bfloat16)}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("env")
    for name in ("ds", "ds2"):
        with libshard.Writer(root / name, fsync=False) as w:
            for i in range(3):
                w.write(_sample(i), key=f"{name}/{i}")
    src = root / "src"
    src.mkdir()
    for i in range(2):
        torch.save(_sample(i), src / f"s{i}.pt")
    libshard.pack(src, root / "packed")
    return root


@pytest.fixture
def clean_env(monkeypatch):
    for name, _ in table():
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _expect_named(name: str, value: str, run: Callable[[], object]) -> None:
    with pytest.raises(libshard.InvalidArgumentError) as e:
        run()
    assert f"environment variable '{name}'" in str(e.value), (name, value, str(e.value))


def python_entry_points(root: Path, tmp: Path) -> Dict[str, Callable[[], object]]:
    ds, ds2 = str(root / "ds"), str(root / "ds2")
    # Opened before the variable was set: what is done with them later still reads it.
    opened = libshard.open(ds)
    read_ahead = libshard.Dataset(ds, read_ahead={"memory_budget": "16MiB"})
    return {
        "open": lambda: libshard.open(ds),
        "Dataset": lambda: libshard.Dataset(ds),
        "open(follow=True)": lambda: libshard.open(ds, follow=True),
        "Loader(path)": lambda: libshard.Loader(ds),
        "Loader(dataset)": lambda: libshard.Loader(opened),
        "Loader(follow=True)": lambda: libshard.Loader(ds, follow=True),
        "prefetch": lambda: libshard.Dataset(ds, read_ahead={}).prefetch([0]),
        "prefetch(opened)": lambda: read_ahead.prefetch([0]),
        "Writer": lambda: libshard.Writer(tmp / "w").write(_sample(0), key="k"),
        "pack": lambda: libshard.pack(root / "src", tmp / "p"),
        "merge": lambda: libshard.merge(tmp / "m", [ds, ds2]),
        "upgrade": lambda: libshard.upgrade(ds),
    }


@pytest.mark.parametrize("name,value", CASES)
def test_python_entry_points_refuse_a_bad_variable(made, tmp_path, clean_env, name, value):
    entries = python_entry_points(made, tmp_path)
    clean_env.setenv(name, value)
    for entry, run in entries.items():
        try:
            _expect_named(name, value, run)
        except AssertionError as e:
            raise AssertionError(f"{entry}: {e}") from None
        except pytest.fail.Exception as e:
            raise AssertionError(f"{entry} accepted {name}={value!r}: {e}") from None
    assert not (tmp_path / "w" / "manifest.json").exists()
    assert not (tmp_path / "p" / "manifest.json").exists()


def _cli() -> str:
    cli = conftest._cli()
    if cli is None:
        pytest.skip("the libshard command-line tool is not built")
    return cli


def cli_commands(root: Path, tmp: Path) -> Dict[str, List[str]]:
    ds, ds2 = str(root / "ds"), str(root / "ds2")
    return {
        "info": ["info", ds], "info --json": ["info", ds, "--json"], "verify": ["verify", ds],
        "bench": ["bench", ds, "--epochs", "1"], "unpack": ["unpack", ds, "-o", str(tmp / "u")],
        "upgrade": ["upgrade", ds], "merge": ["merge", str(tmp / "m"), ds, ds2],
        "pack": ["pack", str(root / "src"), "-o", str(tmp / "p")],
        "verify --against": ["verify", str(root / "packed"), "--against", str(root / "src")],
    }


@pytest.mark.parametrize("name,value", CASES)
def test_every_command_refuses_a_bad_variable(made, tmp_path, name, value):
    cli = _cli()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBSHARD_")}
    env[name] = value
    for command, args in cli_commands(made, tmp_path).items():
        r = subprocess.run([cli, *args], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, (command, name, value, r.returncode, r.stdout, r.stderr)
        assert f"environment variable '{name}'" in r.stderr, (command, r.stderr)
    assert not (tmp_path / "p" / "manifest.json").exists()
    assert not (tmp_path / "u").exists() or not any((tmp_path / "u").iterdir())


def test_every_command_runs_with_the_variables_unset_or_valid(made, tmp_path):
    """The same commands succeed without a bad variable (so the refusals above are the
    variable's), with every variable set to a valid value of its own."""
    cli = _cli()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBSHARD_")}
    env.update({"LIBSHARD_S3_CONNECTIONS": "4", "LIBSHARD_CACHE_BLOCK_SIZE": "1MiB",
                "LIBSHARD_S3_CONTENT_MD5": "0", "LIBSHARD_ENGINE": "pread",
                "LIBSHARD_IO_MODE": "buffered", "LIBSHARD_PLANES_KERNEL": "sse2"})
    for command, args in cli_commands(made, tmp_path).items():
        r = subprocess.run([cli, *args], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (command, r.stdout, r.stderr)


@pytest.mark.parametrize("name,value", CASES)
def test_capture_refuses_a_bad_variable(tmp_path, clean_env, capsys, name, value):
    from libshard import capture
    gen = tmp_path / "gen.py"
    gen.write_text("raise SystemExit('the generator must not run')\n")
    clean_env.setenv(name, value)
    with pytest.raises(SystemExit) as e:
        capture.main(["--out", str(tmp_path / "ds"), "--under", str(tmp_path / "out"), "--",
                      str(gen)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"environment variable '{name}'" in err, err
    assert not (tmp_path / "ds" / "manifest.json").exists()


def test_valid_values_are_accepted_by_python(made, tmp_path, clean_env):
    clean_env.setenv("LIBSHARD_S3_PART_SIZE", "8MiB")
    clean_env.setenv("LIBSHARD_STATS", "0")
    clean_env.setenv("LIBSHARD_XXH3", "scalar")
    for entry, run in python_entry_points(made, tmp_path).items():
        run()


# -- an error names where the value was read from ---------------------------------------------
def test_s3_settings_name_the_file_or_variable_they_came_from(tmp_path, clean_env):
    config = tmp_path / "config"
    config.write_text("[default]\ns3.addressing_style = sideways\n")
    clean_env.setenv("AWS_CONFIG_FILE", str(config))
    clean_env.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    for k in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_ACCESS_KEY_ID"):
        clean_env.delenv(k, raising=False)
    with pytest.raises(libshard.InvalidArgumentError) as e:
        libshard.open("s3://bucket/x", cache=tmp_path / "c")
    assert f"s3.addressing_style of profile 'default' in {config}" in str(e.value), str(e.value)
    assert "LIBSHARD_S3_ADDRESSING" not in str(e.value)
    config.write_text("[default]\nendpoint_url = localhost:9\n")
    with pytest.raises(libshard.InvalidArgumentError) as e:
        libshard.open("s3://bucket/x", cache=tmp_path / "c")
    assert f"endpoint_url of profile 'default' in {config}" in str(e.value), str(e.value)
    clean_env.setenv("AWS_ENDPOINT_URL", "localhost:8")
    with pytest.raises(libshard.InvalidArgumentError) as e:
        libshard.open("s3://bucket/x", cache=tmp_path / "c")
    assert "'localhost:8' (AWS_ENDPOINT_URL)" in str(e.value), str(e.value)


@pytest.mark.parametrize("where", ["option", "variable"])
def test_direct_io_refusal_names_where_direct_was_asked(made, clean_env, where):
    clean_env.setenv("LIBSHARD_IO_REFUSE_DIRECT", "open")  # a file system without O_DIRECT
    if where == "variable":
        clean_env.setenv("LIBSHARD_IO_MODE", "direct")
        loader = lambda: libshard.Loader(made / "ds")  # noqa: E731
    else:
        loader = lambda: libshard.Loader(made / "ds", io_mode="direct")  # noqa: E731
    with pytest.raises(libshard.UnsupportedError) as e:
        next(iter(loader()))
    text = str(e.value)
    if where == "variable":
        assert "(LIBSHARD_IO_MODE=direct)" in text and "io_mode=direct" not in text, text
    else:
        assert "(io_mode=direct)" in text and "LIBSHARD_IO_MODE" not in text, text
