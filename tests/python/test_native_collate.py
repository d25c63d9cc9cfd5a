"""collate="pad" / "pack" assembled in C++ (README, "Batches built in C++"): every step equals
what the Python pad_collate / pack_collate give for the same samples (same keys in the same
order, dtypes, shapes and bytes), with batch_size, max_tokens, single samples, fields=, max_len=,
padding values, every dtype, resume and return_index."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import itertools

import pytest
import torch

import libshard
from libshard import pack_collate, pad_collate

SMALL = dict(memory_budget="8MiB")


def python_collate(ds, mode, **kw):
    schema = ds.schema
    fn = pad_collate if mode == "pad" else pack_collate
    return lambda s: fn(s, seq_dims=schema.seq_dims, length_field=schema.length_field, **kw)


def assert_same_step(got, want, where):
    assert list(got) == list(want), f"{where}: keys {list(got)} != {list(want)}"
    for key, w in want.items():
        g = got[key]
        if isinstance(w, torch.Tensor):
            assert isinstance(g, torch.Tensor), f"{where} {key}: {type(g)}"
            assert g.dtype == w.dtype and g.shape == w.shape, \
                f"{where} {key}: {g.dtype} {tuple(g.shape)} != {w.dtype} {tuple(w.shape)}"
            # Bytes, not values: NaN payloads and -0.0 must match too.
            assert torch.equal(g.contiguous().view(torch.uint8) if g.numel() else g,
                               w.contiguous().view(torch.uint8) if w.numel() else w), \
                f"{where} {key} differs"
        else:
            assert type(g) is type(w) and g == w, f"{where} {key}: {g!r} != {w!r}"


def assert_native_equals_python(path, mode, epochs=1, py_kw=None, **options):
    ds = libshard.open(path)
    py_kw = py_kw or {}
    native = libshard.Loader(ds, collate=mode, **options, **SMALL)
    # The same batches: the budget and bucketing that collate="pad" implies, given explicitly.
    if mode == "pad" and ("max_tokens" in options or options.get("batch_size", 0) > 1):
        options.setdefault("bucket_window", native.state_dict()["bucketing"]["window"])
        if "max_tokens" in options:
            options.setdefault("token_budget", "padded")
    reference = libshard.Loader(ds, collate=python_collate(ds, mode, **py_kw),
                                **{k: v for k, v in options.items()
                                   if k not in ("padding_value", "padding_values")}, **SMALL)
    assert len(native) == len(reference)
    steps = 0
    for epoch in range(epochs):
        for k, (got, want) in enumerate(itertools.zip_longest(native, reference)):
            assert got is not None and want is not None, f"epoch {epoch}: step counts differ"
            assert_same_step(got, want, f"{mode} epoch {epoch} step {k}")
            steps += 1
    assert steps == epochs * len(native)


@pytest.mark.parametrize("mode", ["pad", "pack"])
@pytest.mark.parametrize("batching", [dict(batch_size=4), dict(max_tokens=90), dict()])
def test_native_equals_python_collate(eagle_dataset, mode, batching):
    assert_native_equals_python(eagle_dataset, mode, epochs=2, seed=7, return_index=True,
                                **batching)


@pytest.mark.parametrize("mode", ["pad", "pack"])
def test_fields_max_len_and_ranks(eagle_dataset, mode):
    assert_native_equals_python(eagle_dataset, mode, batch_size=3, fields=["hidden_state",
                                "input_ids"], max_len=9)
    assert_native_equals_python(eagle_dataset, mode, batch_size=3, rank=1, world_size=2,
                                return_index=True, metadata=False)


def test_padding_values(eagle_dataset):
    values = {"input_ids": -1, "hidden_state": 0.1}
    assert_native_equals_python(eagle_dataset, "pad", batch_size=5, padding_value=-100,
                                padding_values=values,
                                py_kw=dict(padding_value=-100, padding_values=values))


@pytest.mark.parametrize("mode", ["pad", "pack"])
def test_every_dtype(all_dtypes_dataset, mode):
    kw = dict(padding_value=1) if mode == "pad" else {}
    assert_native_equals_python(all_dtypes_dataset, mode, batch_size=2, return_index=True,
                                py_kw=kw, **kw)


@pytest.mark.parametrize("mode", ["pad", "pack"])
def test_resume_gives_the_same_batches(eagle_dataset, mode):
    full = libshard.Loader(eagle_dataset, collate=mode, batch_size=3, seed=2, return_index=True,
                           **SMALL)
    want = [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()}
            for b in full]
    first = libshard.Loader(eagle_dataset, collate=mode, batch_size=3, seed=2, return_index=True,
                            **SMALL)
    head = list(itertools.islice(iter(first), 3))
    state = first.state_dict()
    resumed = libshard.Loader(eagle_dataset, collate=mode, batch_size=3, return_index=True,
                              **SMALL)
    resumed.load_state_dict(state)  # the state's seed
    got = head + list(resumed)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same_step(g, w, f"{mode} step {k}")


def test_bad_padding_options_are_clear_errors(eagle_dataset):
    with pytest.raises(libshard.InvalidArgumentError, match="overflow"):
        libshard.Loader(eagle_dataset, collate="pad", batch_size=2,
                        padding_values={"hidden_state": 1e300}, **SMALL)
    with pytest.raises(libshard.InvalidArgumentError, match="not a field"):
        libshard.Loader(eagle_dataset, collate="pad", batch_size=2,
                        padding_values={"nope": 1}, **SMALL)
    with pytest.raises(libshard.InvalidArgumentError, match="collate='pad' only"):
        libshard.Loader(eagle_dataset, collate="pack", batch_size=2, padding_value=3, **SMALL)


def test_batches_outlive_the_loader_and_hold_one_region(eagle_dataset):
    loader = libshard.Loader(eagle_dataset, collate="pad", batch_size=4, shuffle=False,
                             bucket_window=None, **SMALL)
    batch = next(iter(loader))
    loader.close()
    del loader
    ds = libshard.open(eagle_dataset)
    n = int(batch["lengths"][0])
    assert torch.equal(batch["input_ids"][0, :n], ds[0]["input_ids"])
    # One region: the fields' storages lie in one span of the batch arena.
    fields = [batch[k] for k in ("input_ids", "loss_mask", "aux_hidden_state", "hidden_state")]
    starts = sorted(t.data_ptr() for t in fields)
    assert all(p % 64 == 0 for p in starts)
    span = max(t.data_ptr() + t.nbytes for t in fields) - starts[0]
    assert span < sum(t.nbytes for t in fields) + 64 * len(fields)
