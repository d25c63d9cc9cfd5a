"""pad_collate and pack_collate on hand-made samples: shapes, padding, lengths, cu_seqlens,
dtypes and the errors for batches they cannot form."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import pytest
import torch

import libshard
from libshard import INDEX_KEY, pack_collate, pad_collate

H = 4


def sample(length: int, index: int, hidden_dtype=torch.bfloat16) -> dict:
    ids = torch.arange(1, length + 1, dtype=torch.int64) + 100 * index
    return {
        "input_ids": ids,
        "loss_mask": torch.ones(length, dtype=torch.int64),
        "hidden_state": torch.full((1, length, H), float(index + 1), dtype=hidden_dtype),
        "scale": torch.tensor(0.5 * index, dtype=torch.float32),  # rank 0: no sequence dim
        "note": f"s{index}",
        INDEX_KEY: index,
    }


@pytest.fixture
def batch():
    return [sample(3, 0), sample(5, 1), sample(2, 2)]


def test_pad_shapes_values_lengths_and_dtypes(batch):
    out = pad_collate(batch, padding_values={"input_ids": -1})
    assert out["input_ids"].shape == (3, 5) and out["input_ids"].dtype == torch.int64
    assert out["loss_mask"].shape == (3, 5)
    assert out["hidden_state"].shape == (3, 5, H)  # [1, L, H] samples concatenated on dim 0
    assert out["hidden_state"].dtype == torch.bfloat16
    assert out["scale"].shape == (3,) and out["scale"].dtype == torch.float32
    assert out["lengths"].tolist() == [3, 5, 2] and out["lengths"].dtype == torch.int64
    assert out["input_ids"][0].tolist() == [1, 2, 3, -1, -1]          # padding_values[name]
    assert out["input_ids"][1].tolist() == [101, 102, 103, 104, 105]  # the longest: no padding
    assert out["loss_mask"][2].tolist() == [1, 1, 0, 0, 0]            # padding_value default 0
    assert torch.equal(out["hidden_state"][2, :2], torch.full((2, H), 3.0, dtype=torch.bfloat16))
    assert torch.count_nonzero(out["hidden_state"][2, 2:]) == 0
    assert out["scale"].tolist() == [0.0, 0.5, 1.0]
    assert out["note"] == ["s0", "s1", "s2"]
    assert out[INDEX_KEY].tolist() == [0, 1, 2] and out[INDEX_KEY].dtype == torch.int64


def test_pad_value_for_all_fields_and_explicit_seq_dims(batch):
    out = pad_collate(batch, padding_value=7, seq_dims={"hidden_state": 1, "input_ids": 0})
    assert out["loss_mask"][0].tolist() == [1, 1, 1, 7, 7]
    assert torch.all(out["hidden_state"][0, 3:] == 7)


def test_pad_of_equal_lengths_is_a_stack():
    out = pad_collate([sample(4, 0), sample(4, 1)])
    assert out["input_ids"].shape == (2, 4) and out["hidden_state"].shape == (2, 4, H)
    assert out["lengths"].tolist() == [4, 4]
    assert torch.equal(out["input_ids"][1], sample(4, 1)["input_ids"])


def test_pack_concatenates_with_cu_seqlens(batch):
    out = pack_collate(batch)
    assert out["input_ids"].tolist() == [1, 2, 3, 101, 102, 103, 104, 105, 201, 202]
    assert out["hidden_state"].shape == (1, 10, H) and out["hidden_state"].dtype == torch.bfloat16
    assert torch.equal(out["hidden_state"][0, 3:8], torch.full((5, H), 2.0, dtype=torch.bfloat16))
    assert out["cu_seqlens"].tolist() == [0, 3, 8, 10] and out["cu_seqlens"].dtype == torch.int32
    assert out["lengths"].tolist() == [3, 5, 2] and out["max_seqlen"] == 5
    assert out["scale"].shape == (3,)  # no sequence dim: stacked
    assert out["note"] == ["s0", "s1", "s2"] and out[INDEX_KEY].tolist() == [0, 1, 2]


def test_length_field_selects_the_lengths():
    samples = [{"a": torch.zeros(2), "b": torch.zeros(6)}, {"a": torch.zeros(3), "b": torch.zeros(1)}]
    assert pad_collate(samples)["lengths"].tolist() == [2, 3]
    assert pad_collate(samples, length_field="b")["lengths"].tolist() == [6, 1]
    assert pack_collate(samples, length_field="b")["cu_seqlens"].tolist() == [0, 6, 7]


@pytest.mark.parametrize("collate", [pad_collate, pack_collate])
def test_errors_are_invalid_argument(collate):
    with pytest.raises(libshard.InvalidArgumentError, match="empty batch"):
        collate([])
    with pytest.raises(libshard.InvalidArgumentError, match="'x'.*rank or dtype"):
        collate([{"x": torch.zeros(3)}, {"x": torch.zeros(3, dtype=torch.int64)}])
    with pytest.raises(libshard.InvalidArgumentError, match="'x'.*rank or dtype"):
        collate([{"x": torch.zeros(3)}, {"x": torch.zeros(3, 1)}])
    with pytest.raises(ValueError, match="cannot infer the sequence dimension"):
        collate([{"x": torch.zeros(2, 3)}, {"x": torch.zeros(4, 5)}])


@pytest.mark.parametrize("collate", [pad_collate, pack_collate])
def test_a_differing_non_sequence_dim_is_refused(collate):
    with pytest.raises(libshard.InvalidArgumentError, match="'x': dim 1 differs"):
        collate([{"x": torch.zeros(2, 3)}, {"x": torch.zeros(4, 5)}], seq_dims={"x": 0})
    with pytest.raises(libshard.InvalidArgumentError, match="'x': dim 0 differs"):
        collate([{"x": torch.zeros(2)}, {"x": torch.zeros(3)}], seq_dims={"x": None})
