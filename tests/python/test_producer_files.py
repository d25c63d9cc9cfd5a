"""`pack` reads the hidden-states files of vLLM and speculators bit-exactly (files made with the
`safetensors` package in those producers' layouts): per-request `[tokens, layers, hidden]` with
`token_ids`, kept stacked or split into EAGLE-3's `aux_hidden_state` + `hidden_state`
(`--split-layers`); speculators' `hs_{i}.safetensors` with fp8 hidden states and their scales."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import subprocess

import pytest
import torch

import libshard
from conftest import _cli, assert_sample_equal, pack_dir

safetensors_torch = pytest.importorskip("safetensors.torch")

H, K = 16, 4  # hidden size; captured layers (3 aux + the last)


def _assert_same(got, want, where):
    # A safetensors file has no key order of its own (the header is a JSON object): compare as
    # the file lists them.
    assert sorted(got) == sorted(want), where
    assert_sample_equal(got, {k: want[k] for k in got}, where)


def _stacked(gen, length, dtype):
    x = torch.randn(length, K, H, generator=gen)
    if dtype == torch.float8_e4m3fn:
        return (x * 4).to(dtype)
    return x.to(dtype)


def _write_vllm_dir(root, n, dtype=torch.bfloat16, name="req_{i}.safetensors", scales=False):
    gen = torch.Generator().manual_seed(7)
    root.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(n):
        length = 5 + (i * 11) % 23
        tensors = {"hidden_states": _stacked(gen, length, dtype),
                   "token_ids": torch.randint(0, 50000, (length,), generator=gen)}
        if scales:  # fp8 with their dequantisation scales: one per layer, and one per tensor
            tensors["hidden_states_scale"] = torch.rand(K, generator=gen) + 0.5
            tensors["input_scale"] = torch.rand((), generator=gen)
        safetensors_torch.save_file(tensors, str(root / name.format(i=i)))
        files.append(tensors)
    return files


def test_vllm_per_request_files_stacked(tmp_path):
    files = _write_vllm_dir(tmp_path / "src", 6)
    ds = libshard.open(pack_dir(tmp_path / "src", tmp_path / "out"))
    assert ds.schema.length_field == "token_ids"  # the length comes from token_ids
    assert ds.schema["hidden_states"].seq_dim == 0
    for i in range(6):
        assert ds.source(i) == f"req_{i}.safetensors"
        _assert_same(ds[i], files[i], f"req_{i}")
    assert ds.lengths.tolist() == [f["token_ids"].shape[0] for f in files]


def _split(t):
    length = t.shape[0]
    return {"aux_hidden_state": t[:, :-1].reshape(length, -1)[None].contiguous(),
            "hidden_state": t[:, -1][None].contiguous()}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_split_layers_into_eagle3_fields(tmp_path, dtype):
    fp8 = dtype == torch.float8_e4m3fn
    files = _write_vllm_dir(tmp_path / "src", 12, dtype, name="hs_{i}.safetensors", scales=fp8)
    ds = libshard.open(pack_dir(tmp_path / "src", tmp_path / "out", split_layers="hidden_states"))
    assert ds.schema["aux_hidden_state"].seq_dim == 1 and ds.schema["hidden_state"].seq_dim == 1
    for i in range(12):
        assert ds.source(i) == f"hs_{i}.safetensors"  # natural order: hs_2 before hs_10
        want = {}
        for key, t in files[i].items():
            if key == "hidden_states":
                want.update(_split(t))
            else:
                want[key] = t
        got = ds[i]
        _assert_same(got, want, f"hs_{i}")
        assert got["hidden_state"].dtype == dtype


def test_split_layers_errors_name_the_file(tmp_path):
    cli = _cli()
    if cli is None:
        pytest.skip("no libshard command")
    _write_vllm_dir(tmp_path / "src", 2)
    r = subprocess.run([cli, "pack", str(tmp_path / "src"), "-o", str(tmp_path / "o"),
                        "--split-layers", "nope", "--progress", "none"], capture_output=True)
    assert r.returncode == 1 and b"req_0.safetensors" in r.stderr and b"nope" in r.stderr
    r = subprocess.run([cli, "pack", str(tmp_path / "src"), "-o", str(tmp_path / "o2"),
                        "--split-layers", "token_ids", "--progress", "none"], capture_output=True)
    assert r.returncode == 1 and b"[tokens, layers, hidden]" in r.stderr
