"""The refusals of the C++ bindings (bindings/src) that the other suites left unreached, found by
the bindings' line coverage (`make coverage`, docs/testing.md): each raises InvalidArgumentError
naming what it refuses; and a sample tensor's memory object. Through the public API where it
reaches them; where the Python package checks first (announced indices, a caller's steps),
through libshard._core, whose own checks stand behind those of the package."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import numpy as np
import pytest
import torch

import libshard
from libshard import _core

Invalid = libshard.InvalidArgumentError


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("bindings_refusals") / "ds"
    with libshard.Writer(out) as w:
        for i in range(4):
            w.write({"x": torch.arange(i + 2, dtype=torch.int64), "n": i}, key=f"k{i}")
    return libshard.open(out)


# -- option values (bindings/src/options.h ToOptionValue) ------------------------------------
@pytest.mark.parametrize("value,message", [
    (object(), "'batch_size' has the wrong type (object)"),
    (2**70, "'batch_size' = 1180591620717411303424 is too large"),
    (-(2**70), "is too large"),
])
def test_loader_option_values_of_the_wrong_kind(small, value, message):
    with pytest.raises(Invalid, match=message.replace("(", r"\(").replace(")", r"\)")):
        libshard.Loader(small, batch_size=value)


@pytest.mark.parametrize("value,message", [
    ([1], "must be a list of names (str), got a int"),
    ({1: 2}, "keys must be field names (str)"),
    ({"a": "b"}, "['a'] must be a number, got a str"),
    ({"a": True}, "['a'] must be a number, got a bool"),
])
def test_core_option_lists_and_maps_of_the_wrong_kind(small, value, message):
    with pytest.raises(Invalid) as e:
        _core.Loader(small._core, {"batch_size": value})
    assert message in str(e.value) and "'batch_size'" in str(e.value)


def test_core_order_group_as_a_dict(small):
    loader = _core.Loader(small._core, {"order": {"kind": "unshuffled"}, "batch_size": 4})
    batch = loader.next()
    assert [s[0] for s in batch] == [0, 1, 2, 3]
    loader.close()


# -- rank and world size (bindings/src/world.cc) ---------------------------------------------
@pytest.mark.parametrize("rank,world_size,message", [
    ("1", 2, "rank must be an integer or None, got '1'"),
    (True, 2, "rank must be an integer or None, got True"),
    (-1, 2, "need 0 <= rank < world_size, got rank=-1"),
    (0, 2**70, "world_size is too large"),
])
def test_loader_rank_and_world_size_refused(small, rank, world_size, message):
    with pytest.raises(Invalid, match=message):
        libshard.Loader(small, rank=rank, world_size=world_size)


# -- the Writer's metadata and attributes (bindings/src/writer.cc) ----------------------------
def test_writer_metadata_integer_out_of_int64(tmp_path):
    with libshard.Writer(tmp_path / "ds") as w:
        with pytest.raises(Invalid, match="metadata 'm': integer out of int64 range"):
            w.write({"x": torch.arange(2), "m": 2**70}, key="a")
            w.flush()


@pytest.mark.parametrize("attributes,message", [
    ([1], "must be a dict of str -> str or int"),
    ({"a": 2**70}, "'a': integer out of int64 range"),
])
def test_writer_attributes_refused(tmp_path, attributes, message):
    with pytest.raises(Invalid, match=message):
        libshard.Writer(tmp_path / "ds", attributes=attributes)


# -- read-ahead and a caller's steps, behind the package's checks ----------------------------
def test_core_read_ahead_refuses_bad_indices_and_use_after_close(small):
    ra = _core.ReadAhead(small._core, {})
    with pytest.raises(Invalid, match="the indices must be a 1-D sequence"):
        ra.announce(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(Invalid, match=r"announced index -1 \(entry 1\) is negative"):
        ra.announce(np.array([0, -1], dtype=np.int64))
    assert ra.get(1)[0] == 1
    ra.close()
    with pytest.raises(Invalid, match="the read-ahead is closed"):
        ra.get(0)
    ra.close()  # idempotent


def test_core_caller_steps_refused(small):
    loader = _core.Loader(small._core, {"order": {"kind": "caller"}})
    bounds = np.array([0, 2], dtype=np.int64)
    with pytest.raises(Invalid, match=r"sample index -1 \(entry 1\) is negative"):
        loader.set_epoch_steps(0, np.array([0, -1], dtype=np.int64), bounds)
    with pytest.raises(Invalid, match="sample index array must be 1-D"):
        loader.set_epoch_steps(0, np.zeros((1, 2), dtype=np.int64), bounds)
    loader.close()


# -- pack's progress lines (bindings/src/pack.cc) ---------------------------------------------
def test_pack_progress_lines(eagle_src, tmp_path, capfd):
    libshard.pack(eagle_src, tmp_path / "out", progress=True)
    err = capfd.readouterr().err
    assert "libshard pack: " in err and " files, " in err and ", done" in err, err


# -- a sample tensor's memory object (bindings/src/tensor_memory.cc) --------------------------
def test_core_tensor_memory_length_and_address(small):
    import ctypes
    index, fields, _ = small._core.read(3)
    (name, dtype, shape, mem), = fields
    assert (index, name, dtype, tuple(shape)) == (3, "x", "int64", (5,))
    want = torch.arange(5, dtype=torch.int64).numpy().tobytes()
    assert len(mem) == mem.nbytes == len(want) == memoryview(mem).nbytes
    assert ctypes.string_at(mem.address, mem.nbytes) == want
