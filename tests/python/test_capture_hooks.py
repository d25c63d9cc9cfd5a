"""libshard.capture's view of the file tree, in one process (install, calls, uninstall).

test_capture.py runs generators under the command; this file checks the hooks call by call:
directories that exist only as captured samples' parents, bytes paths, a real file shadowed by a
captured one, read-backs and their bound, a sample saved from a forked child, and that every
original comes back on uninstall.
"""

from __future__ import annotations

import builtins
import glob
import os
from pathlib import Path

import pytest
import torch

import libshard
from libshard import _capture_hooks as hooks
from libshard._capture_store import CaptureStore


def sample(n: int = 6) -> dict:
    return {"input_ids": torch.arange(n), "hidden_state": torch.ones(1, n, 4).bfloat16()}


def make_store(tmp_path: Path, name: str = "ds") -> CaptureStore:
    under = tmp_path / "out"
    under.mkdir(exist_ok=True)
    return CaptureStore(str(tmp_path / name), str(under), include=[], exclude=[],
                        writer_options={"journal_every": 1}, readback_bytes=1 << 20,
                        log=lambda message: None)


@pytest.fixture
def store(tmp_path):
    s = make_store(tmp_path)
    hooks.install(s)
    try:
        yield s
    finally:
        hooks.uninstall()
        if not s.closed:
            s.close(True)


def test_uninstall_restores_every_original(store):
    assert builtins.open is not hooks._open and os.stat is not hooks._stat
    hooks.uninstall()
    assert builtins.open is hooks._open and os.stat is hooks._stat
    assert torch.save is hooks._torch_save and os.scandir is hooks._scandir
    hooks.install(store)  # for the fixture's own uninstall


def test_directories_of_captured_samples_exist_only_as_such(store, tmp_path):
    under = tmp_path / "out"
    (under / "a").mkdir()
    torch.save(sample(), under / "a" / "x.pt")
    assert (under / "a" / "x.pt").is_file() and os.path.getsize(under / "a" / "x.pt") > 0
    assert os.listdir(under / "a") == ["x.pt"]
    assert os.listdir(os.fsencode(under / "a")) == [b"x.pt"]
    assert [e.name for e in os.scandir(os.fsencode(under / "a"))] == [b"x.pt"]
    assert not os.access(under / "a" / "x.pt", os.X_OK)
    assert os.access(under / "a" / "x.pt", os.R_OK | os.W_OK)
    # The generator removed the (empty on disk) directory: the sample still has a parent.
    os.rmdir(under / "a")
    assert os.path.isdir(under / "a") and os.path.exists(under / "a" / "x.pt")
    assert os.listdir(under) == ["a"]
    assert glob.glob(str(under / "*" / "*.pt")) == [str(under / "a" / "x.pt")]
    assert [str(p.relative_to(under)) for p in under.rglob("*.pt")] == ["a/x.pt"]
    walked = [(os.path.relpath(r, under), d, f) for r, d, f in os.walk(under)]
    assert walked == [(".", ["a"], []), ("a", [], ["x.pt"])]
    hooks.uninstall()  # the disk really has no such directory
    assert not (under / "a").exists()
    hooks.install(store)


def test_relative_paths_and_dot_dot(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path / "out")
    torch.save(sample(), "y.pt")
    assert os.path.exists("../out/./y.pt") and os.path.exists("y.pt")
    assert "y.pt" in os.listdir()
    assert store.has("y.pt")


def test_a_real_file_is_shadowed_by_the_captured_one(store, tmp_path):
    under = tmp_path / "out"
    hooks.uninstall()
    (under / "z.pt").write_bytes(b"old")
    hooks.install(store)
    torch.save(sample(), under / "z.pt")
    entries = list(os.scandir(under))
    assert [e.name for e in entries] == ["z.pt"]
    assert entries[0].stat().st_size == store.stat_result("z.pt").st_size != 3


def test_readbacks_and_their_bound(store, tmp_path):
    under = tmp_path / "out"
    small = {"input_ids": torch.arange(4), "x": torch.zeros(4), "note": "n", "k": 3}
    torch.save(small, under / "a.pt")
    got = torch.load(under / "a.pt")
    assert list(got) == ["input_ids", "x", "note", "k"] and got["note"] == "n"
    got["x"] += 1  # a copy: the captured sample is not changed
    assert torch.equal(torch.load(str(under / "a.pt"))["x"], torch.zeros(4))
    with pytest.raises(libshard.UnsupportedError, match="its bytes cannot be read"):
        open(under / "a.pt", "rb")
    with pytest.raises(FileExistsError):
        open(under / "a.pt", "xb")
    # Past the bound, the oldest are evicted: their read-back says where to read them.
    store.readback_limit = 1
    torch.save({"input_ids": torch.arange(2), "x": torch.ones(2), "note": "m", "k": 4},
               under / "c.pt")
    with pytest.raises(libshard.UnsupportedError, match=r"ds\.find\('a.pt'\)"):
        torch.load(under / "a.pt")


def test_safetensors_readbacks(tmp_path):
    s = make_store(tmp_path)
    hooks.install(s)
    try:
        from safetensors import safe_open
        from safetensors.numpy import load_file as load_numpy
        from safetensors.torch import load_file, save_file
        path = str(tmp_path / "out" / "b.safetensors")
        save_file({"token_ids": torch.arange(3), "h": torch.ones(3, 2)}, path, metadata={"m": "v"})
        got = load_file(path)
        assert sorted(got) == ["h", "token_ids"] and torch.equal(got["h"], torch.ones(3, 2))
        assert load_numpy(path)["token_ids"].tolist() == [0, 1, 2]
        with safe_open(path, framework="pt") as f:
            assert f.metadata() == {"m": "v"} and f.get_tensor("h").shape == (3, 2)
    finally:
        hooks.uninstall()
        s.close(True)
    ds = libshard.open(tmp_path / "ds")
    # The order the file would hold them in (I64 before F32), as pack reads it.
    assert ds.schema.names == ["token_ids", "h"] and ds.metadata(0) == {"m": "v"}


def test_the_content_rule_and_include(tmp_path):
    under = tmp_path / "out"
    under.mkdir()
    log = []
    s = CaptureStore(str(tmp_path / "ds"), str(under), include=["*.pt"], exclude=["skip/**"],
                     writer_options={}, readback_bytes=0, log=log.append)
    hooks.install(s)
    try:
        (under / "skip").mkdir()
        torch.save({"w": torch.ones(2)}, under / "skip" / "w.pt")      # excluded: to disk
        torch.save({"input_ids": torch.arange(3), "n": {"a": torch.ones(3), "b": [1, None]}},
                   under / "n.pt")                                      # included: captured
        torch.save({"input_ids": torch.arange(3)}, under / "data.ckpt")  # not included: disk
    finally:
        hooks.uninstall()
    s.close(True)
    assert (under / "skip" / "w.pt").exists() and (under / "data.ckpt").exists()
    assert not (under / "n.pt").exists()
    ds = libshard.open(tmp_path / "ds")
    assert ds.schema.names == ["input_ids", "n.a"] and ds.metadata(0) == {"n.b.0": 1}
    assert log == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_sample_saved_by_a_forked_child_is_refused(store, tmp_path):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what the save raised, then leave at once
        os.close(r)
        try:
            torch.save(sample(), tmp_path / "out" / "child.pt")
            msg = "saved"
        except libshard.UnsupportedError as e:
            msg = str(e)
        os.write(w, msg.encode()[:4000])
        os._exit(0)
    os.close(w)
    got = os.read(r, 4000).decode()
    os.waitpid(pid, 0)
    assert f"a child forked by the captured process {os.getpid()}" in got, got
    assert not store.has("child.pt")
    # The captured process was told: it refuses to commit a dataset without that sample.
    with pytest.raises(libshard.InvalidArgumentError, match="child.pt"):
        store.close(True)


def test_after_close_a_save_says_the_capture_ended(store, tmp_path):
    store.close(True)
    with pytest.raises(libshard.UnsupportedError, match="has ended"):
        torch.save(sample(), tmp_path / "out" / "late.pt")


def test_the_hooks_leave_what_introspection_sees_as_it_was(tmp_path):
    """A generator that picks texts by scanning modules (the example generator takes the
    docstrings of the standard library's functions and classes) sees the same texts under
    capture: a hook is a Python function where the original is a builtin, so it must carry no
    documentation (an os._exit hook with a docstring once shifted every prompt by one)."""
    import inspect
    import io as io_mod

    def texts():
        out = []
        for mod in (os, builtins, io_mod, torch):
            for name, obj in sorted(inspect.getmembers(mod), key=lambda kv: kv[0]):
                if inspect.isfunction(obj) or inspect.isclass(obj):
                    out.append((mod.__name__, name, inspect.getdoc(obj)))
        return [t for t in out if t[2]]

    before = texts()
    s = make_store(tmp_path)
    hooks.install(s)
    try:
        during = texts()
    finally:
        hooks.uninstall()
        s.close(True)
    assert during == before
