"""The trainer integrations read datasets in object storage (issue 33): libshard.specforge,
libshard.speculators and libshard.modelopt take an s3:// URL (with cache=, as libshard.open)
and serve the same samples as from the local copy, against a real S3 server (moto, loopback;
tests/python/s3_server.py). Run with the trainers' environment (trainers_util.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from trainers_util import assert_same, cli_pack, require

pytest.importorskip("boto3")
require("specforge.runtime.data_plane", "SpecForge (specforge 0.2.0)")
require("hs_connectors", "hs-connectors 0.9.0")
require("modelopt.torch.speculative.eagle.utils", "ModelOpt (nvidia-modelopt 0.47)")
import libshard.modelopt as lm  # noqa: E402
import libshard.specforge as ls  # noqa: E402
import libshard.speculators as lsp  # noqa: E402
from s3_server import MotoServer, s3_env  # noqa: E402
from test_trainer_modelopt import _write_dump  # noqa: E402
from test_trainer_specforge import write_specforge_dir  # noqa: E402
from test_trainer_speculators import write_speculators_dir  # noqa: E402

BUCKET = "libshard-trainers"


@pytest.fixture(scope="module")
def server():
    try:
        s = MotoServer()
    except RuntimeError as e:
        pytest.skip(str(e))
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def env(server, monkeypatch):
    e = s3_env(server.endpoint, server.access_key, server.secret_key)
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    for k, v in e.items():
        if k.startswith(("AWS_", "LIBSHARD_")):
            monkeypatch.setenv(k, v)
    return e


def _upload(server, local: Path, prefix: str) -> str:
    server.upload_dir(BUCKET, prefix, local)
    return f"s3://{BUCKET}/{prefix}"


def test_specforge_reads_an_s3_url(server, env, tmp_path):
    src = tmp_path / "features"
    write_specforge_dir(src, n=12)
    packed = cli_pack(src, tmp_path / "packed")
    url = _upload(server, packed, "specforge")
    cache = tmp_path / "cache"
    local, remote = ls.refs(packed), ls.refs(url, cache=cache)
    assert len(remote) == len(local) == 12
    assert all(r.feature_store_uri.startswith(f"{ls.URI_SCHEME}{url}#") for r in remote)
    assert [r.sample_id for r in remote] == [r.sample_id for r in local]
    store, local_store = ls.FeatureStore(url, cache=cache), ls.FeatureStore(packed)
    for r, l in zip(remote, local):
        got, h = store.get(r)
        assert_same(got, local_store.get(l)[0], r.sample_id)
        store.release(h)
    counts = ls.count_effective_feature_tokens(url, cache=cache)
    assert list(counts.items()) == list(ls.count_effective_feature_tokens(packed).items())
    assert ls.is_dataset(url)
    assert any(cache.rglob("*")), "the cache holds what was read"


def test_speculators_reads_an_s3_url(server, env, tmp_path):
    data_dir = write_speculators_dir(tmp_path / "data", n=8)
    packed = cli_pack(data_dir / "hidden_states", tmp_path / "packed")
    url = _upload(server, packed, "speculators")
    remote = lsp.LibshardTransfer(url, cache=tmp_path / "cache")
    local = lsp.LibshardTransfer(packed)
    assert remote.path == url
    for i in range(8):
        assert_same(remote.get_cached(i), local.get_cached(i), f"hs_{i}")
    import pickle

    again = pickle.loads(pickle.dumps(remote))  # a spawned worker reopens the URL, cache kept
    assert again.path == url and again.cache == tmp_path / "cache"
    assert_same(again.get_cached(5), local.get_cached(5), "unpickled")


def test_modelopt_reads_an_s3_url(server, env, tmp_path):
    src = tmp_path / "dump"
    _write_dump(src, n=6)
    packed = cli_pack(src, tmp_path / "packed")
    url = _upload(server, packed, "modelopt")
    remote = lm.OfflineDataset(url, answer_only_loss=True, cache=tmp_path / "cache")
    local = lm.OfflineDataset(packed, answer_only_loss=True)
    for i in range(6):
        assert_same(remote[i], local[i], f"sample {i}")
    import pickle

    assert_same(pickle.loads(pickle.dumps(remote))[3], local[3], "unpickled")


def test_speculators_checks_the_schema_at_open(tmp_path):
    src = tmp_path / "hidden_states"
    src.mkdir()
    from safetensors.torch import save_file

    save_file({"hidden_states": torch.zeros(4, 2, 3).bfloat16()}, str(src / "hs_0.safetensors"))
    packed = cli_pack(src, tmp_path / "packed")
    with pytest.raises(KeyError, match=r"token_ids.*speculators"):
        lsp.LibshardTransfer(packed)


def test_specforge_checks_the_schema_at_open(tmp_path):
    src = tmp_path / "features"
    src.mkdir()
    torch.save({"input_ids": torch.arange(5), "loss_mask": torch.ones(5, dtype=torch.long),
                "hidden_state": torch.zeros(1, 5, 4).bfloat16()}, src / "data_0.ckpt")
    packed = cli_pack(src, tmp_path / "packed")
    with pytest.raises(KeyError, match=r"aux_hidden_state.*SpecForge"):
        ls.refs(packed)
