"""libshard.pack from Python: one writer per dataset, and what resume says about a finished one."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest
import torch

import libshard


def write_sources(root: Path, names) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        torch.save({"input_ids": torch.arange(i + 2, dtype=torch.int64)}, root / name)


def test_resume_of_a_finished_dataset(tmp_path):
    src, out = tmp_path / "src", tmp_path / "ds"
    write_sources(src, ["s_0.pt", "s_1.pt", "s_2.pt"])
    assert libshard.pack(src, out)["samples"] == 3
    summary = libshard.pack(src, out, resume=True)
    assert summary["nothing_to_resume"] and summary["samples"] == 3
    write_sources(src / "more", ["t_0.pt"])
    with pytest.raises(ValueError, match=r"is complete \(3 samples\); nothing to resume\. 1 of "
                                         r"the 4 sources .* use 'append'"):
        libshard.pack(src, out, resume=True)
    summary = libshard.pack(src, out, append=True)
    assert not summary["nothing_to_resume"] and summary["samples"] == 4


def test_a_dataset_another_writer_holds_is_refused(tmp_path):
    src, out = tmp_path / "src", tmp_path / "ds"
    write_sources(src, ["s_0.pt"])
    out.mkdir()
    with open(out / ".libshard.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(libshard.AlreadyExistsError,
                           match="is being written by another process") as info:
            libshard.pack(src, out)
        assert isinstance(info.value, FileExistsError)
    assert libshard.pack(src, out)["samples"] == 1

