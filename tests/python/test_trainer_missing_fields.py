"""A field a trainer needs and the dataset lacks, in every trainer module (libshard.automodel,
.specforge, .modelopt, .speculators), at open and per batch: a libshard error
(``InvalidArgumentError``, a ``ValueError``) naming the field and the dataset, never a bare
``KeyError`` (the error is also a ``KeyError``, as the trainers' own readers raise). Run with the
trainers' environment (tests/python/trainers_util.py); a trainer that is not installed skips its
tests."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Dict, List

import pytest
import torch

import libshard

H = 8


def need(module: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        pytest.skip(f"{module} is not importable here ({e}); run with .venv-trainers/bin/python")


def write(out: Path, samples: List[Dict[str, torch.Tensor]], keys: List[str],
          attrs=None) -> Path:
    w = libshard.Writer(out, attrs=attrs)
    for key, sample in zip(keys, samples):
        w.write(sample, key=key)
    w.close()
    return out


def assert_names(excinfo, *words: str) -> None:
    e = excinfo.value
    assert isinstance(e, libshard.InvalidArgumentError) and isinstance(e, ValueError), type(e)
    assert isinstance(e, KeyError)  # what code written for the trainers' readers catches
    text = str(e)
    assert not text.startswith("'"), text  # the message as written, not a quoted KeyError
    for w in words:
        assert w in text, (w, text)


# -- NeMo AutoModel ---------------------------------------------------------------------------
EAGLE3 = {"input_ids": ("i", [6]), "attention_mask": ("i", [6]), "loss_mask": ("i", [6]),
          "aux_hidden_states": ("b", [6, 3 * H]), "position_mask": ("?", [6, 1]),
          "target_probs": ("f", [6, 12])}
DSPARK = {"input_ids": ("i", [6]), "loss_mask": ("i", [6]),
          "target_hidden_states": ("b", [6, 2 * H]), "target_last_hidden_states": ("b", [6, H])}


def _tensor(kind: str, shape: List[int]) -> torch.Tensor:
    return {"i": lambda: torch.ones(shape, dtype=torch.long),
            "b": lambda: torch.zeros(shape, dtype=torch.bfloat16),
            "?": lambda: torch.ones(shape, dtype=torch.bool),
            "f": lambda: torch.full(shape, 1 / 12)}[kind]()


def _automodel_dataset(out: Path, columns, manifest) -> Path:
    """What `libshard pack` of an AutoModel cache records: shard rows as samples, the manifest
    as automodel.* attributes."""
    import json
    attrs = {"source_format": "automodel"}
    for k, v in manifest.items():
        plain = isinstance(v, (int, str)) and not isinstance(v, bool)
        attrs[f"automodel.{k}"] = v if plain else json.dumps(v)
    samples = [{n: _tensor(*spec) for n, spec in columns.items()} for _ in range(3)]
    return write(out, samples, [f"shard-000000.safetensors/{i}" for i in range(3)], attrs)


@pytest.mark.parametrize("field", sorted(EAGLE3))
def test_automodel_eagle3_missing_field_at_open(tmp_path, field):
    la = need("libshard.automodel")
    cols = {k: v for k, v in EAGLE3.items() if k != field}
    ds = _automodel_dataset(tmp_path / "ds", cols, {"format_version": 2, "shard_size": 4,
                                                    "draft_vocab_size": 12,
                                                    "target_probs_topk": None})
    with pytest.raises(KeyError) as e:
        la.CachedEagle3Dataset(ds)
    assert_names(e, field, str(ds))


@pytest.mark.parametrize("field", sorted(DSPARK))
def test_automodel_dspark_missing_field_at_open(tmp_path, field):
    la = need("libshard.automodel")
    cols = {k: v for k, v in DSPARK.items() if k != field}
    ds = _automodel_dataset(tmp_path / "ds", cols, {"format_version": 1, "shard_size": 4,
                                                    "complete": True})
    with pytest.raises(KeyError) as e:
        la.CachedDSparkDataset(ds)
    assert_names(e, field, str(ds))


@pytest.mark.parametrize("field", ["shard_size", "draft_vocab_size"])
def test_automodel_missing_manifest_field_at_open(tmp_path, field):
    la = need("libshard.automodel")
    manifest = {"format_version": 2, "shard_size": 4, "draft_vocab_size": 12,
                "target_probs_topk": None}
    del manifest[field]
    ds = _automodel_dataset(tmp_path / "ds", EAGLE3, manifest)
    with pytest.raises(KeyError) as e:
        la.CachedEagle3Dataset(ds)
    assert_names(e, field, str(ds), "manifest")


def test_automodel_missing_field_per_item(tmp_path):
    la = need("libshard.automodel")
    ds = _automodel_dataset(tmp_path / "ds", EAGLE3, {"format_version": 2, "shard_size": 4,
                                                      "draft_vocab_size": 12,
                                                      "target_probs_topk": None})
    cached = la.CachedEagle3Dataset(ds)
    assert cached[1]["target_probs"].shape == (6, 12)
    cached._disk_keys = cached._disk_keys + ("extra_field",)  # a reader asking for more
    with pytest.raises(KeyError) as e:
        cached[1]
    assert_names(e, "extra_field", "sample 1", str(ds))


def test_automodel_a_dataset_of_another_source_is_a_libshard_error(tmp_path):
    la = need("libshard.automodel")
    ds = write(tmp_path / "ds", [{"input_ids": torch.arange(3)}], ["a"])
    with pytest.raises(libshard.InvalidArgumentError, match="source_format"):
        la.CachedEagle3Dataset(ds)


# -- SpecForge --------------------------------------------------------------------------------
def _specforge_dataset(out: Path, drop: str = "") -> Path:
    fields = {"input_ids": torch.arange(6), "loss_mask": torch.ones(6, dtype=torch.long),
              "aux_hidden_state": torch.zeros(1, 6, 3 * H).bfloat16(),
              "hidden_state": torch.zeros(1, 6, H).bfloat16()}
    fields.pop(drop, None)
    return write(out, [dict(fields) for _ in range(3)],
                 [f"rows_0-8/data_{i}.ckpt" for i in range(3)])


@pytest.mark.parametrize("field", ["input_ids", "loss_mask", "aux_hidden_state",
                                   "hidden_state"])
def test_specforge_missing_field_at_open_and_per_sample(tmp_path, field):
    ls = need("libshard.specforge")
    ds = _specforge_dataset(tmp_path / "ds", drop=field)
    with pytest.raises(KeyError) as e:
        ls.refs(ds)
    assert_names(e, field, str(ds))
    # Per sample: a ref (made for a full dataset) naming a field this dataset lacks.
    full = _specforge_dataset(tmp_path / "full")
    ref = ls.refs(full)[0]
    ref = dataclasses.replace(ref, feature_store_uri=ref.feature_store_uri.replace(str(full),
                                                                                  str(ds)))
    store = ls.FeatureStore()
    with pytest.raises(KeyError) as e:
        store.get(ref)
    assert_names(e, field, str(ds), "sample 0")


@pytest.mark.parametrize("field", ["input_ids", "loss_mask"])
def test_specforge_vocab_count_missing_field(tmp_path, field):
    ls = need("libshard.specforge")
    ds = _specforge_dataset(tmp_path / "ds", drop=field)
    with pytest.raises(KeyError) as e:
        ls.count_effective_feature_tokens(ds)
    assert_names(e, field, str(ds))


# -- ModelOpt ---------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["input_ids", "hidden_states", "aux_hidden_states"])
def test_modelopt_missing_field_at_open(tmp_path, field):
    lm = need("libshard.modelopt")
    fields = {"input_ids": torch.arange(6), "hidden_states": torch.zeros(6, H).bfloat16(),
              "aux_hidden_states": torch.zeros(6, 3 * H).bfloat16()}
    fields.pop(field)
    ds = write(tmp_path / "ds", [fields], ["c0.pt"])
    with pytest.raises(KeyError) as e:
        lm.OfflineDataset(ds)
    assert_names(e, field, str(ds), "ModelOpt")


def test_modelopt_answer_only_loss_without_loss_mask(tmp_path):
    lm = need("libshard.modelopt")
    fields = {"input_ids": torch.arange(6), "hidden_states": torch.zeros(6, H).bfloat16(),
              "aux_hidden_states": torch.zeros(6, 3 * H).bfloat16()}
    ds = write(tmp_path / "ds", [fields], ["c0.pt"])
    with pytest.raises(KeyError) as e:
        lm.OfflineDataset(ds, answer_only_loss=True)
    assert_names(e, "loss_mask", str(ds))


# -- speculators ------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["hidden_states", "token_ids", "hidden_states_scales"])
def test_speculators_missing_field_at_open(tmp_path, field):
    lsp = need("libshard.speculators")
    fields = {"hidden_states": torch.zeros(6, 4, H).bfloat16(), "token_ids": torch.arange(6)}
    if field == "hidden_states_scales":  # fp8 hidden states need their scales
        fields["hidden_states"] = fields["hidden_states"].to(torch.float8_e4m3fn)
    else:
        fields.pop(field)
    ds = write(tmp_path / "ds", [fields], ["hs_0.safetensors"])
    with pytest.raises(KeyError) as e:
        lsp.LibshardTransfer(ds)
    assert_names(e, field, str(ds))


def test_speculators_training_data_missing_a_column(tmp_path):
    lsp = need("libshard.speculators")
    datasets = need("datasets")

    class Split:  # speculators' ArrowDataset: its rows in .data
        data = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3]], "seq_len": [3]})

        def __len__(self) -> int:
            return 1

    with pytest.raises(KeyError) as e:
        lsp._ArrowRows(Split())
    assert_names(e, "loss_mask", "Arrow")
