"""Sequence parallelism inside the trainers (issue 44 item 4): each SP rank of libshard's drop-ins
gets, bit for bit and in the trainer's own batch format, what the trainer's own slicing of the
whole sample gives that rank, while reading only its slice (about 1/N of every sample).

- SpecForge 0.2.0's offline EAGLE-3 USP (``attention_backend: usp``): SpecForge's own
  ``FeatureDataLoader`` over the ``.ckpt`` files with its USP normalizer
  (``partial(OfflineEagle3Dataset.process_data_usp, ...)``, the rank and sizes taken from its
  process groups) and ``DataCollatorWithPadding``, against ``libshard.specforge``'s
  ``FeatureDataLoader`` over the packed dataset with the same normalizer and collate: on a real
  gloo group of 2 and of 4 CPU processes (SpecForge's ``("draft_dp", "sp")`` mesh and yunchang's
  Ulysses/ring groups built as ``init_distributed`` builds them), and with explicit ranks for
  every Ulysses x ring layout of 2 and 4 ranks. The bytes each rank reads are ~1/N.
- speculators' ``--sp-size`` (the ``("dp", "sp")`` mesh of ``speculators.train.distributed``):
  the 0.9.0 wheel builds the mesh but has no split yet (speculators#871's ``split_batch_for_sp``
  is not released); ``libshard.speculators.split_batch_for_sp`` is that function, checked against
  its golden table in test_sp_rules.py. See test_trainer_speculators.py for the packed batches.
- TorchSpec is not installed here: its USP path is not tested.

Run with the trainers' environment: tests/python/trainers_util.py.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import pytest
import torch

from trainers_util import assert_same, cli_pack, require

require("specforge.runtime.data_plane", "SpecForge (specforge 0.2.0)")
import libshard  # noqa: E402
import libshard.specforge as ls  # noqa: E402
from specforge import launch as sf_launch  # noqa: E402
from specforge.data.preprocessing import OfflineEagle3Dataset  # noqa: E402
from specforge.data.utils import DataCollatorWithPadding  # noqa: E402
from specforge.runtime.data_plane import FeatureDataLoader, LocalFeatureStore  # noqa: E402
from specforge.runtime.data_plane.offline_reader import OfflineManifestReader  # noqa: E402

N_SAMPLES = 10
H = 64
MAX_LEN = 1500   # shorter than the longest samples: the group splits the clipped length
TTT = 3


def lengths():
    return [0 if i == 3 else 1 if i == 4 else 250 + 173 * i for i in range(N_SAMPLES)]


def write_specforge_dir(root: Path) -> None:
    """prepare_hidden_states.py's files (rows_{g}-{g+8}/data_{idx}.ckpt)."""
    g = torch.Generator().manual_seed(17)
    for idx, s in enumerate(lengths()):
        grp = (idx // 8) * 8
        d = root / f"rows_{grp}-{grp + 8}"
        d.mkdir(parents=True, exist_ok=True)
        torch.save({"input_ids": torch.randint(0, 500, (s,), generator=g),
                    "loss_mask": (torch.rand(s, generator=g) > 0.3).long(),
                    "aux_hidden_state": torch.randn(1, s, 3 * H, generator=g).bfloat16(),
                    "hidden_state": torch.randn(1, s, H, generator=g).bfloat16()},
                   d / f"data_{idx}.ckpt")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("sp_trainers")
    src = root / "features"
    write_specforge_dir(src)
    return src, cli_pack(src, root / "features.libshard")


def batches_of(src: Path, packed: Path, normalize, collate, *, epoch: int = 0, dp_rank=None,
               dp_size=None):
    """(SpecForge's own batches, libshard's batches, the libshard loader) for one rank."""
    out = []
    loaders = []
    for store, refs, cls in ((LocalFeatureStore("n"),
                              OfflineManifestReader(str(src), max_len=MAX_LEN,
                                                    ttt_length=TTT).read(), FeatureDataLoader),
                             (ls.FeatureStore(packed), ls.refs(packed, max_len=MAX_LEN,
                                                               ttt_length=TTT),
                              ls.FeatureDataLoader)):
        shard = sf_launch._shard_offline_refs(refs, use_usp_preprocess=True, seed=5, epoch=epoch,
                                              dp_rank=dp_rank, dp_size=dp_size)
        loader = cls(store, refs=shard, batch_size=1, collate_fn=collate,
                     per_sample_transform=normalize, strategy="eagle3", ack=False)
        out.append([(b.sample_ids, b.tensors, b.metadata) for b in loader])
        loaders.append(loader)
    return out[0], out[1], loaders[1]


def compare(want, got, where: str) -> None:
    assert len(got) == len(want) > 0, where
    for k, ((wid, wt, wm), (gid, gt, gm)) in enumerate(zip(want, got)):
        assert gid == wid, f"{where} batch {k}"
        assert gm == wm, f"{where} batch {k}"
        assert_same(gt, wt, f"{where} batch {k}")


def full_bytes(packed: Path) -> int:
    ds = libshard.open(packed)
    return int(ds.total_raw_bytes)


# -- explicit ranks, every Ulysses x ring layout ---------------------------------------------

def layouts():
    for n in (1, 2, 4):  # 1: what SpecForge runs with sp_size 1, a group of one
        for ulysses in [u for u in range(1, n + 1) if n % u == 0]:
            yield n, ulysses


@pytest.mark.parametrize("n,ulysses", list(layouts()))
def test_usp_batches_equal_specforge_explicit_ranks(data, n, ulysses):
    src, packed = data
    ring = n // ulysses
    total = full_bytes(packed)
    read = []
    for r in range(n):
        normalize = functools.partial(OfflineEagle3Dataset.process_data_usp, max_len=MAX_LEN,
                                      ttt_length=TTT, sp_rank=r, sp_size=n,
                                      ring_rank=r // ulysses, sp_ring_size=ring)
        collate = DataCollatorWithPadding()  # no process group here: its degrees by hand
        collate.sp_degree, collate.ulysses_degree = n, ulysses
        want, got, loader = batches_of(src, packed, normalize, collate, dp_rank=0, dp_size=1)
        compare(want, got, f"N={n} U={ulysses} rank {r}")
        assert "position_ids" in got[0][1]
        loader.seek(3)  # a resume: the rest of the epoch, as SpecForge's own loader seeks
        compare(want[3:], [(b.sample_ids, b.tensors, b.metadata) for b in loader],
                f"N={n} U={ulysses} rank {r} after seek")
        read.append(int(loader.libshard_stats["bytes_read"]))
    # These samples are smaller than a row block (1 MiB): each rank reads them whole, no more
    # (test_usp_each_rank_reads_its_share has samples of many blocks).
    assert max(read) <= total + (1 << 20), (read, total)


def test_usp_ring_layout_must_be_ulysses_low(data):
    _, packed = data
    with pytest.raises(ValueError, match="use_ulysses_low"):
        ls.usp_layout(4, 1, 1, 2)  # ring_rank 1 for sp_rank 1 of 2 Ulysses x 2 ring: not it
    assert ls.usp_layout(4, 3, 1, 2) == {"sp_size": 4, "sp_rank": 3, "ring_rank": 1,
                                         "sp_ring_size": 2, "ulysses_size": 2}
    sp = ls.sequence_parallel(TTT, 4, 2)
    assert sp == libshard.SequenceParallel(4, rule="specforge-usp", ttt_length=TTT,
                                           ulysses_size=2)
    with pytest.raises(ValueError, match="process groups"):
        ls.usp_layout()


def test_usp_features_equal_process_data_usp(data):
    """usp_features on a sequence-parallel Loader's samples (the public recipe for a loop of
    one's own) is process_data_usp of the whole sample."""
    src, packed = data
    ds = libshard.open(packed)
    order = ls.order(ds)
    for n, ulysses in ((1, 1), (2, 2), (4, 2)):
        for r in range(n):
            loader = libshard.Loader(packed, batch_sampler=[[i] for i in order], rank=r,
                                     world_size=n, sequence_parallel=ls.sequence_parallel(
                                         TTT, n, n // ulysses), max_len=MAX_LEN,
                                     pin_memory=False, return_index=True)
            for batch in loader:
                s = batch[0] if isinstance(batch, list) else batch
                i = int(s[libshard.INDEX_KEY])
                whole = ds[i]
                want = OfflineEagle3Dataset.process_data_usp(
                    whole, MAX_LEN, ttt_length=TTT, sp_rank=r, sp_size=n,
                    ring_rank=r // ulysses, sp_ring_size=n // ulysses)
                got = ls.usp_features(s, ttt_length=TTT)
                assert_same(got, {k: want[k] for k in got}, f"N={n} r={r} sample {i}")
                assert sorted(got) == sorted(want)
            loader.close()


def test_usp_other_stores_keep_specforges_path(data, caplog):
    """SpecForge's USP normalizer over file:// refs: SpecForge's own reading, said once."""
    src, _ = data
    normalize = functools.partial(OfflineEagle3Dataset.process_data_usp, max_len=MAX_LEN,
                                  ttt_length=TTT, sp_rank=1, sp_size=2, ring_rank=0,
                                  sp_ring_size=1)
    collate = DataCollatorWithPadding()
    collate.sp_degree, collate.ulysses_degree = 2, 2
    refs = OfflineManifestReader(str(src), max_len=MAX_LEN, ttt_length=TTT).read()
    want = [b.tensors for b in FeatureDataLoader(LocalFeatureStore("a"), refs=refs,
                                                 collate_fn=collate,
                                                 per_sample_transform=normalize, ack=False)]
    got = [b.tensors for b in ls.FeatureDataLoader(LocalFeatureStore("b"), refs=refs,
                                                   collate_fn=collate,
                                                   per_sample_transform=normalize, ack=False)]
    assert_same(got, want, "file:// refs")
    with pytest.raises(ValueError, match="batches='cpp'"):
        list(ls.FeatureDataLoader(LocalFeatureStore("c"), refs=refs, collate_fn=collate,
                                  per_sample_transform=normalize, ack=False, batches="cpp"))


# -- a real gloo group: SpecForge takes the ranks from its process groups ---------------------

def _gloo_worker(rank: int, world: int, ulysses: int, init_file: str, src: str, packed: str,
                 out_dir: str) -> None:
    import torch.distributed as dist
    from specforge import distributed as sfd
    from specforge.algorithms.builtin import builtin_algorithm_registry

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        ring = world // ulysses
        mesh = dist.device_mesh.init_device_mesh("cpu", (1, world),
                                                 mesh_dim_names=("draft_dp", "sp"))
        # yunchang's set_seq_parallel_pg(use_ulysses_low=True), which init_distributed calls
        # (yunchang is not installed here): Ulysses peers consecutive, ring peers strided.
        ulysses_group = ring_group = None
        for i in range(ring):
            ranks = list(range(i * ulysses, (i + 1) * ulysses))
            g = dist.new_group(ranks)
            if rank in ranks:
                ulysses_group = g
        for i in range(ulysses):
            ranks = list(range(i, world, ulysses))
            g = dist.new_group(ranks)
            if rank in ranks:
                ring_group = g
        sfd._DRAFT_SP_GROUP = mesh.get_group("sp")
        sfd._DRAFT_DP_GROUP = mesh.get_group("draft_dp")
        sfd._SP_ULYSSES_GROUP = ulysses_group
        sfd._SP_RING_GROUP = ring_group

        algorithm = builtin_algorithm_registry().resolve("eagle3")
        collate, normalize = sf_launch._offline_io(algorithm, "text", MAX_LEN, ttt_length=TTT,
                                                   use_usp_preprocess=True)
        assert normalize.keywords["sp_rank"] == rank and normalize.keywords["sp_size"] == world
        assert collate.sp_degree == world and collate.ulysses_degree == ulysses
        assert ls.usp_layout()["ring_rank"] == rank // ulysses
        read = []
        for epoch in range(2):
            # dp rank and size from SpecForge's draft-DP group, as its launch does.
            want, got, loader = batches_of(Path(src), Path(packed), normalize, collate,
                                           epoch=epoch)
            compare(want, got, f"gloo N={world} U={ulysses} rank {rank} epoch {epoch}")
            read.append(int(loader.libshard_stats["bytes_read"]))
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump({"batches": len(got)}, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("n,ulysses", [(2, 2), (4, 2)])
def test_usp_batches_equal_specforge_on_a_gloo_group(data, tmp_path, n, ulysses):
    import torch.multiprocessing as mp

    src, packed = data
    out = tmp_path / "out"
    out.mkdir()
    mp.start_processes(_gloo_worker, args=(n, ulysses, str(tmp_path / "init"), str(src),
                                           str(packed), str(out)),
                       nprocs=n, join=True, start_method="spawn")
    for r in range(n):
        got = json.loads((out / f"rank{r}.json").read_text())
        assert got["batches"] == N_SAMPLES


# -- bytes: each rank reads about 1/N of every sample -----------------------------------------

BIG_H = 1024          # 8 KiB a row over aux_hidden_state and hidden_state (bf16)
BIG_LENGTHS = [3000, 3700, 2500]
BLOCK = 1 << 20       # the writer's row blocks


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    path = tmp_path_factory.mktemp("sp_big") / "ds"
    g = torch.Generator().manual_seed(3)
    with libshard.Writer(path, fsync=False) as w:
        for i, s in enumerate(BIG_LENGTHS):
            w.write({"input_ids": torch.randint(0, 500, (s,), generator=g),
                     "loss_mask": (torch.rand(s, generator=g) > 0.3).long(),
                     "aux_hidden_state": torch.randn(1, s, 3 * BIG_H, generator=g).bfloat16(),
                     "hidden_state": torch.randn(1, s, BIG_H, generator=g).bfloat16()},
                    key=f"s{i}")
    return path


@pytest.mark.parametrize("n", [2, 4])
def test_usp_each_rank_reads_its_share(big, n):
    """The drop-in's loader on each rank of N reads its rows: at most its 1/N share plus the
    ttt overlap and less than a row block at each end of each field (4 fields), and the ranks
    together about one copy; its batches are process_data_usp + the collate of the whole
    samples."""
    ds = libshard.open(big)
    assert ds.has_row_blocks
    total = int(ds.total_raw_bytes)
    refs = ls.refs(big, max_len=1 << 20, ttt_length=TTT)
    slack = len(BIG_LENGTHS) * 4 * 2 * BLOCK
    read = []
    for r in range(n):
        normalize = functools.partial(OfflineEagle3Dataset.process_data_usp, max_len=1 << 20,
                                      ttt_length=TTT, sp_rank=r, sp_size=n, ring_rank=0,
                                      sp_ring_size=1)
        collate = DataCollatorWithPadding()
        collate.sp_degree, collate.ulysses_degree = n, n
        loader = ls.FeatureDataLoader(ls.FeatureStore(big), refs=refs, collate_fn=collate,
                                      per_sample_transform=normalize, ack=False)
        got = [b.tensors for b in loader]
        want = [collate([normalize(ds[int(ref.feature_store_uri.rsplit("#", 1)[1])])])
                for ref in refs]
        assert_same(got, want, f"N={n} rank {r}")
        read.append(int(loader.libshard_stats["bytes_read"]))
    for r, b in enumerate(read):
        assert b <= total // n + slack, (r, read, total)
    assert sum(read) <= total + n * slack, (read, total)
    assert max(read) < total * 0.8, (read, total)  # not the whole samples
    print(f"N={n}: each rank read {[round(b / total, 3) for b in read]} of {total} bytes")


# -- the train commands take the SP degree -----------------------------------------------------

def test_specforge_command_takes_the_sp_degree():
    base = ["train", "--config", "run.yaml"]
    usp = ["training.attention_backend=usp"]
    assert ls.sp_overrides(base) == base
    assert ls.sp_overrides(base + ["--sp-size", "1"]) == base
    assert ls.sp_overrides(base + ["--sp-size", "4"]) == base + [
        "training.sp_ulysses_size=4", "training.sp_ring_size=1"] + usp
    assert ls.sp_overrides(base + ["--sp-size=4", "--sp-ring-size", "2"]) == base + [
        "training.sp_ulysses_size=2", "training.sp_ring_size=2"] + usp
    assert ls.sp_overrides(["train", "--sp-ulysses-size", "2", "--sp-ring-size=2", "-c", "x",
                            "a.b=1", "--plan"]) == [
        "train", "-c", "x", "a.b=1", "training.sp_ulysses_size=2", "training.sp_ring_size=2",
        *usp, "--plan"]  # next to the overrides given: argparse takes one run of them
    for bad in (["--sp-size", "0"], ["--sp-size", "x"], ["--sp-size", "4", "--sp-ring-size", "3"],
                ["--sp-size", "4", "--sp-ulysses-size", "4", "--sp-ring-size", "2"],
                ["--sp-size"]):
        with pytest.raises(ValueError):
            ls.sp_overrides(base + bad)
    assert ls.main(base + ["--sp-size", "0"]) == 2


def test_specforge_config_accepts_the_overrides(tmp_path):
    """SpecForge's own config validation takes what --sp-size gives (its USP settings)."""
    from specforge.config.schema import TrainingConfig

    fields = TrainingConfig.model_fields
    assert {"sp_ulysses_size", "sp_ring_size", "attention_backend"} <= set(fields)
    cfg = TrainingConfig(sp_ulysses_size=2, sp_ring_size=2, attention_backend="usp",
                         batch_size=1)
    assert cfg.sp_ulysses_size * cfg.sp_ring_size == 4


# -- speculators --sp-size ------------------------------------------------------------------------

def _speculators_expected(batch, n: int, r: int, total: int):
    """speculators#871's split_batch_for_sp of speculators' own packed batch, written from its
    rows (the speculators rule, checked against that code by test_sp_rules.py's golden table):
    rows [r·L/N, (r+1)·L/N) of every [1, L, ...] tensor, document_ids whole, full_seq_len L."""
    s = libshard._core.sequence_parallel_slice("speculators", total, n, r)
    out = {}
    for k, v in batch.items():
        if k == "document_ids" or not isinstance(v, torch.Tensor) or v.dim() < 2:
            out[k] = v
        else:
            out[k] = v[:, s["start"]:s["stop"]]
    out["full_seq_len"] = torch.tensor(total)
    return out


def test_speculators_split_batch_for_sp():
    lsp = pytest.importorskip("libshard.speculators")
    g = torch.Generator().manual_seed(1)
    for total in (0, 8, 24, 64):
        batch = {"hidden_states": torch.randn(1, total, 12, generator=g).bfloat16(),
                 "input_ids": torch.arange(total)[None, :],
                 "verifier_last_hidden_states": torch.randn(1, total, 4, generator=g),
                 "loss_mask": torch.randint(0, 2, (1, total), generator=g),
                 "position_ids": torch.arange(total)[None, :],
                 "document_ids": torch.randint(-1, 3, (1, total), generator=g),
                 "error_records": 0}
        for n in (2, 4, 8):
            for r in range(n):
                assert_same(lsp.split_batch_for_sp(batch, r, n),
                            _speculators_expected(batch, n, r, total), f"T={total} N={n} r={r}")
    with pytest.raises(ValueError, match="multiple"):
        lsp.split_batch_for_sp({"input_ids": torch.zeros(1, 6)}, 0, 4)
    argv = ["train", "--sp-size", "4", "--data-path", "d"]
    assert lsp.take_sp_size(argv) == 4 and argv == ["train", "--data-path", "d"]
    argv = ["train", "--sp-size=2"]
    assert lsp.take_sp_size(argv) == 2 and argv == ["train"]
    assert lsp.take_sp_size(["train"]) is None
    with pytest.raises(ValueError):
        lsp.take_sp_size(["--sp-size", "0"])


def _speculators_worker(rank: int, world: int, n: int, init_file: str, data_dir: str,
                        packed: str, out_dir: str) -> None:
    import hs_connectors as hs
    import torch.distributed as dist
    import libshard.speculators as lsp
    from speculators.models.eagle3.data import shift_batch
    from speculators.train import dataloader as sp_loader
    from speculators.train import distributed as sp_dist
    from speculators.train.data import ArrowDataset
    from test_trainer_speculators import H as SH, LAYERS, SEQ

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        # speculators' own ("dp", "sp") groups (maybe_setup_distributed(sp_size=N) without
        # torchrun's accelerator): SP groups of N consecutive ranks, dp rank = rank // N.
        sp_dist._init_sp_process_groups(rank, world, n)
        assert (sp_dist.get_sp_rank(), sp_dist.get_dp_rank()) == (rank % n, rank // n)

        def setup(dataset):
            return sp_loader._setup_dataloader(dataset, SEQ, SH, num_workers=0,
                                               num_target_layers=LAYERS, prefetch_factor=None,
                                               preprocess=shift_batch, seed=4)

        ref = ArrowDataset(SEQ, data_dir, transfer=hs.FileTransfer(Path(data_dir) /
                                                                   "hidden_states"),
                           on_missing="raise")
        batches = 0
        for mode in ("cpp", "trainer"):
            mine = ArrowDataset(SEQ, data_dir, transfer=lsp.LibshardTransfer(packed),
                                on_missing="raise")
            base = setup(mine)
            got_loader = lsp.train_loader(mine, base.batch_sampler, base.collate_fn,
                                          batches=mode,
                                          fallback=lambda: lsp.read_ahead_loader(base))
            want_loader = setup(ref)
            assert len(got_loader) == len(want_loader)
            for epoch in range(2):
                got_loader.batch_sampler.set_epoch(epoch)
                want_loader.batch_sampler.set_epoch(epoch)
                # --sp-size 1: speculators' own batch, whole.
                want = [b if n == 1 else _speculators_expected(b, n, rank % n, SEQ)
                        for b in want_loader]
                got = list(got_loader)
                if mode == "cpp":  # the C++ batches are built from this rank's rows only
                    assert isinstance(got_loader, lsp.PackedLoader)
                    assert (got_loader.sp_size, got_loader.sp_rank) == (n, rank % n)
                    assert got_loader.libshard_stats["bytes_read"] > 0
                assert len(got) == len(want) > 0
                assert_same(got, want, f"speculators N={n} rank {rank} {mode} epoch {epoch}")
                batches += len(got)
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump({"batches": batches}, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("n", [1, 2, 4])
def test_speculators_sp_ranks_get_their_part_on_a_gloo_group(tmp_path, n):
    """speculators' --sp-size on a gloo group of 4 CPU processes (SP 1: four data-parallel
    groups, each rank the whole batch; SP 2: two; SP 4: one): each rank's batches from libshard.speculators.train_loader (C++ batches, and
    speculators' collate over the libshard backend) are #871's split of speculators' own batch
    for that rank, over its own sampler of the group's data-parallel rank."""
    pytest.importorskip("speculators.train.data")
    import torch.multiprocessing as mp
    from test_trainer_speculators import write_speculators_dir

    data_dir = write_speculators_dir(tmp_path / "data")
    packed = cli_pack(data_dir / "hidden_states", data_dir / "hidden_states.libshard")
    out = tmp_path / "out"
    out.mkdir()
    world = 4
    mp.start_processes(_speculators_worker, args=(world, n, str(tmp_path / "init"),
                                                  str(data_dir), str(packed), str(out)),
                       nprocs=world, join=True, start_method="spawn")
    for r in range(world):
        assert json.loads((out / f"rank{r}.json").read_text())["batches"] > 0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
