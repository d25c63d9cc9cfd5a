"""libshard.Writer.write refuses tensors that have no plain bytes (issue 21, item 2).

Each kind is refused with an InvalidArgumentError (a libshard.Error and a ValueError) naming the
sample's key, the field and what to do; nothing of a refused sample is written, the Writer stays
usable, and the committed dataset holds exactly the samples that were accepted. Views that only
need materialising (non-contiguous, neg bit) and tensors that require grad are accepted, like
non-contiguous tensors always were.
"""
# suite: check (make check runs this file: scripts/check.sh)
from __future__ import annotations

from typing import Callable, Dict, List, Tuple

import pytest
import torch

import libshard
from conftest import assert_sample_equal, make_eagle_sample

LENGTH, HIDDEN = 8, 16


def _good(seed: int) -> Dict[str, torch.Tensor]:
    return make_eagle_sample(torch.Generator().manual_seed(seed), LENGTH, hidden=HIDDEN)


def _fake(hs: torch.Tensor) -> torch.Tensor:
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        return torch.empty(hs.shape, dtype=hs.dtype)


def _two_tensor(hs: torch.Tensor) -> torch.Tensor:
    from torch.testing._internal.two_tensor import TwoTensor  # a wrapper subclass
    return TwoTensor(hs.clone(), hs.clone())


# (id, bad hidden_state from the good one, the message's expected part)
KINDS: List[Tuple[str, Callable[[torch.Tensor], torch.Tensor], str]] = [
    ("meta", lambda hs: torch.empty(hs.shape, dtype=hs.dtype, device="meta"),
     r"is on the meta device.*materialise it on a real device"),
    ("sparse_coo", lambda hs: hs.to_sparse(), r"has layout sparse_coo.*call \.to_dense\(\)"),
    ("sparse_csr", lambda hs: hs.float().to_sparse_csr(), r"has layout sparse_csr.*\.to_dense\(\)"),
    ("mkldnn", lambda hs: hs.float().to_mkldnn(), r"has layout _mkldnn.*\.to_dense\(\)"),
    ("nested", lambda hs: torch.nested.nested_tensor([hs[0], hs[0, :3]]),
     r"is a nested tensor.*to_padded_tensor"),
    ("nested_jagged",
     lambda hs: torch.nested.nested_tensor([hs[0], hs[0, :3]], layout=torch.jagged),
     r"is a nested tensor.*to_padded_tensor"),
    ("quantized", lambda hs: torch.quantize_per_tensor(hs.float(), 0.1, 0, torch.qint8),
     r"is a quantized tensor.*\.dequantize\(\)"),
    ("fake", _fake, r"is a .*FakeTensor.*no data.*outside"),
    ("wrapper_subclass", _two_tensor,
     r"is a tensor subclass .*TwoTensor.*__torch_dispatch__.*plain torch\.Tensor"),
    ("functional", lambda hs: torch._to_functional_tensor(hs),
     r"is wrapped by .*functionalization.*write it outside the transform"),
]


def _dataset(path) -> List[Tuple[str, Dict[str, object]]]:
    ds = libshard.open(path)
    return [(ds.source(i), ds[i]) for i in range(len(ds))]


@pytest.mark.filterwarnings("ignore::UserWarning")  # sparse CSR / nested are "beta" in torch
def test_each_kind_is_refused_by_key_and_field_and_the_writer_goes_on(tmp_path):
    out = tmp_path / "ds"
    written: List[Tuple[str, Dict[str, torch.Tensor]]] = []
    with libshard.Writer(out) as w:
        first = _good(0)
        w.write(first, key="good_0")
        written.append(("good_0", first))
        for i, (kind, make, expected) in enumerate(KINDS, start=1):
            bad = _good(i)
            bad["hidden_state"] = make(bad["hidden_state"])
            with pytest.raises(libshard.InvalidArgumentError,
                               match=rf"sample 'bad_{kind}': field 'hidden_state' {expected}") as e:
                w.write(bad, key=f"bad_{kind}")
            assert isinstance(e.value, libshard.Error) and isinstance(e.value, ValueError)
            assert not w.has(f"bad_{kind}")
            # The next sample is accepted, and so is the refused key with plain tensors.
            good = _good(100 + i)
            w.write(good, key=f"good_{i}")
            written.append((f"good_{i}", good))
        again = _good(999)
        w.write(again, key="bad_meta")
        written.append(("bad_meta", again))
    got = _dataset(out)
    assert [k for k, _ in got] == [k for k, _ in written]
    for (key, g), (_, want) in zip(got, written):
        assert_sample_equal(g, want, key)
    libshard.open(out).verify()  # every sample's checksum holds


def test_a_refused_first_sample_opens_nothing(tmp_path):
    """The schema and the reference shapes come from the first sample accepted."""
    out = tmp_path / "ds"
    with libshard.Writer(out) as w:
        bad = make_eagle_sample(torch.Generator().manual_seed(1), LENGTH, hidden=2 * HIDDEN)
        bad["hidden_state"] = bad["hidden_state"].to("meta")
        with pytest.raises(ValueError, match="'first'.*'hidden_state'.*meta device"):
            w.write(bad, key="first")
        assert w.schema is None and len(w) == 0
        samples = [_good(2), make_eagle_sample(torch.Generator().manual_seed(3), 5, hidden=HIDDEN)]
        for i, s in enumerate(samples):
            w.write(s, key=f"k{i}")
    got = _dataset(out)
    assert [k for k, _ in got] == ["k0", "k1"]
    for (_, g), want in zip(got, samples):
        assert_sample_equal(g, want)


def test_metadata_and_other_fields_of_a_refused_sample_are_not_written(tmp_path):
    out = tmp_path / "ds"
    with libshard.Writer(out) as w:
        w.write({**_good(0), "note": "kept"}, key="a")
        bad = {**_good(1), "note": "dropped"}
        bad["loss_mask"] = bad["loss_mask"].to_sparse()
        with pytest.raises(ValueError, match="'b'.*'loss_mask'.*sparse_coo"):
            w.write(bad, key="b")
        w.write({**_good(2), "note": "kept too"}, key="c")
    got = _dataset(out)
    assert [k for k, _ in got] == ["a", "c"]
    assert [s["note"] for _, s in got] == ["kept", "kept too"]


def test_inside_vmap_is_refused(tmp_path):
    out = tmp_path / "ds"
    errors: List[str] = []
    template = _good(1)
    with libshard.Writer(out) as w:
        def body(hs: torch.Tensor) -> torch.Tensor:
            sample = dict(template)
            sample["hidden_state"] = hs
            try:
                w.write(sample, key="in_vmap")
            except libshard.InvalidArgumentError as e:
                errors.append(str(e))
            return hs
        torch.vmap(body)(torch.stack([_good(1)["hidden_state"]] * 2))
        w.write(_good(2), key="after")
    assert len(errors) == 1  # vmap runs the body once, on the batched tensor
    assert "sample 'in_vmap': field 'hidden_state'" in errors[0]
    assert "torch.func transform" in errors[0]
    assert [k for k, _ in _dataset(out)] == ["after"]


def test_views_and_grad_tensors_are_materialised_not_refused(tmp_path):
    class Tagged(torch.Tensor):  # a subclass without __torch_dispatch__: plain storage
        pass

    base = [_good(i) for i in range(5)]
    inputs = [dict(s) for s in base]
    expected = [dict(s) for s in base]
    hs = base[0]["hidden_state"]
    inputs[0]["hidden_state"] = hs.transpose(1, 2).contiguous().transpose(1, 2)
    assert not inputs[0]["hidden_state"].is_contiguous()
    inputs[1]["hidden_state"] = torch._neg_view(base[1]["hidden_state"])
    assert inputs[1]["hidden_state"].is_neg()
    expected[1]["hidden_state"] = -base[1]["hidden_state"]
    inputs[2]["hidden_state"] = base[2]["hidden_state"].clone().requires_grad_(True)
    inputs[3]["hidden_state"] = base[3]["hidden_state"].as_subclass(Tagged)
    inputs[4]["hidden_state"] = torch.nn.Parameter(base[4]["hidden_state"].clone())
    out = tmp_path / "ds"
    with libshard.Writer(out) as w:
        for i, s in enumerate(inputs):
            w.write(s, key=f"k{i}")
    got = _dataset(out)
    assert len(got) == 5
    for (key, g), want in zip(got, expected):
        assert_sample_equal(g, want, key)
