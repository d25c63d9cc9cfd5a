"""Sequence-parallel loading from Python (docs/guide/long-context.md, "The sequence_parallel
option"; docs/ORDER.md §3a): ``Loader(..., sequence_parallel=N)`` with 2 groups of 2 and of 4
ranks (world and rank given explicitly) serves every rank of a group the same samples in the same
order, each sample once per group across the groups; each rank's tensors are the rows of its
slice (``sample["__sp__"]``) of the whole sample, bit for bit, and the even rule's slices put
together are the whole sample, raw and with ``compress="auto"``; a resume mid-epoch continues as
the uninterrupted run; ``libshard.SequenceParallel`` is the same as the keywords; the errors name
the option (a world the degree does not divide, an unknown rule, a C++ collate), and a sample
larger than the arena is a ``ResourceExhaustedError`` naming ``memory_budget`` and
``sequence_parallel``, which loads once split."""
# suite: check

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import libshard
from conftest import tensor_bytes

HIDDEN = 64
SAMPLES = 16


def length(i: int) -> int:
    return 500 + 157 * i  # 500 .. 2855


def sample(i: int) -> dict:
    n = length(i)
    gen = torch.Generator().manual_seed(7 + i)
    return {
        "input_ids": torch.arange(n, dtype=torch.int64) * 5 + i,
        "loss_mask": (torch.arange(n) % 4 != 0).to(torch.int64),
        "hidden_state": torch.randn(1, n, HIDDEN, generator=gen).to(torch.bfloat16),
        "scale": torch.full((3,), float(i)),
    }


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict:
    out = {}
    for name, options in {"raw": {}, "auto": {"compress": "auto"}}.items():
        path = tmp_path_factory.mktemp(f"sp_{name}") / "ds"
        with libshard.Writer(path, fsync=False, **options) as w:
            for i in range(SAMPLES):
                w.write(sample(i), key=f"s{i}")
        out[name] = path
    return out


def run(path: Path, rank: int, world: int, max_steps: int = 10**9, **kw) -> list:
    loader = libshard.Loader(path, rank=rank, world_size=world, seed=3, return_index=True,
                             pin_memory=False, **kw)
    out = []
    for k, s in enumerate(loader):
        if k >= max_steps:
            break
        out.append(s)
    return out


def cut(t: torch.Tensor, seq_dim, start: int, stop: int) -> torch.Tensor:
    if seq_dim is None:
        return t
    index = [slice(None)] * t.dim()
    index[seq_dim] = slice(start, stop)
    return t[tuple(index)]


def check_slice(ds, s: dict, rank: int, degree: int, rule: str = "even", ttt: int = 0) -> None:
    i = int(s[libshard.INDEX_KEY])
    sp = s[libshard.SP_KEY]
    want = libshard._core.sequence_parallel_slice(rule, length(i), degree, rank % degree, ttt)
    for key in ("start", "stop", "pad_to", "offset", "full_length", "rule"):
        assert sp[key] == want[key], (i, key)
    assert (sp["sp_size"], sp["sp_rank"], sp["length"]) == (degree, rank % degree, length(i))
    whole = ds[i]
    rows = ds.read(i, rows=(sp["start"], sp["stop"]))
    seq_dims = ds.schema.seq_dims
    for name in whole:
        if not isinstance(whole[name], torch.Tensor):
            continue
        expect = cut(whole[name], seq_dims.get(name), sp["start"], sp["stop"])
        assert s[name].shape == expect.shape, (i, name)
        assert tensor_bytes(s[name]) == tensor_bytes(expect), (i, name)
        assert tensor_bytes(s[name]) == tensor_bytes(rows[name]), (i, name)


@pytest.mark.parametrize("storage", ["raw", "auto"])
@pytest.mark.parametrize("degree", [2, 4])
def test_groups_share_samples_and_ranks_get_their_slices(datasets, storage, degree):
    path = datasets[storage]
    ds = libshard.open(path)
    assert ds.has_row_blocks
    world = 2 * degree
    groups = [[run(path, g * degree + k, world, sequence_parallel=degree)
               for k in range(degree)] for g in range(2)]
    seen = []
    for g, ranks in enumerate(groups):
        order = [int(s[libshard.INDEX_KEY]) for s in ranks[0]]
        assert len(order) == SAMPLES // 2
        for k, served in enumerate(ranks):
            assert [int(s[libshard.INDEX_KEY]) for s in served] == order, (g, k)
            for s in served:
                check_slice(ds, s, g * degree + k, degree)
        seen += order
        # The even rule: the group's slices, in rank order, make the whole sample.
        for j, i in enumerate(order):
            whole = ds[i]
            for name, dim in ds.schema.seq_dims.items():
                if dim is None:
                    continue
                joined = torch.cat([ranks[k][j][name] for k in range(degree)], dim=dim)
                assert tensor_bytes(joined) == tensor_bytes(whole[name]), (i, name)
    assert sorted(seen) == list(range(SAMPLES))


def test_the_value_and_the_keywords_are_one_setting(datasets):
    path = datasets["raw"]
    ds = libshard.open(path)
    a = run(path, 3, 4, sequence_parallel=libshard.SequenceParallel(4, rule="specforge-usp",
                                                                    ttt_length=5))
    assert len(a) == SAMPLES
    for s in a:
        check_slice(ds, s, 3, 4, "specforge-usp", 5)
    b = run(path, 1, 4, sequence_parallel=4, sp_rule="specforge-dspark")
    assert all(s[libshard.SP_KEY]["rule"] == "even" for s in b)
    assert [int(s[libshard.INDEX_KEY]) for s in b] == [int(s[libshard.INDEX_KEY]) for s in a]
    assert repr(libshard.SequenceParallel(4, rule="specforge-usp", ttt_length=5)) == \
        "SequenceParallel(4, rule='specforge-usp', ttt_length=5)"
    with pytest.raises(libshard.InvalidArgumentError, match="sp_rule"):
        libshard.Loader(path, world_size=4, rank=0, sp_rule="torchspec-usp",
                        sequence_parallel=libshard.SequenceParallel(4))


def test_batches_are_lists_of_slices(datasets):
    path = datasets["raw"]
    ds = libshard.open(path)
    loader = libshard.Loader(path, rank=1, world_size=2, sequence_parallel=2, batch_size=3,
                             return_index=True, pin_memory=False)
    batches = list(loader)
    assert len(batches) == len(loader) == (SAMPLES + 2) // 3
    for batch in batches:
        assert isinstance(batch, list)
        for s in batch:
            check_slice(ds, s, 1, 2)


def test_fields_and_max_len_apply_to_the_slices(datasets):
    path = datasets["auto"]
    ds = libshard.open(path)
    for rank in range(2):
        for s in run(path, rank, 2, sequence_parallel=2, fields=["input_ids", "scale"],
                     max_len=1000):
            i = int(s[libshard.INDEX_KEY])
            sp = s[libshard.SP_KEY]
            want = libshard._core.sequence_parallel_slice("even", length(i), 2, rank,
                                                          max_len=1000)
            assert sp["full_length"] == min(length(i), 1000) == want["full_length"]
            assert (sp["start"], sp["stop"], sp["length"]) == (want["start"], want["stop"],
                                                               length(i))
            assert [k for k in s if isinstance(s[k], torch.Tensor)] == ["input_ids", "scale"]
            assert torch.equal(s["input_ids"], ds[i]["input_ids"][sp["start"]:sp["stop"]])
            assert torch.equal(s["scale"], ds[i]["scale"])


def test_resume_mid_epoch_equals_the_uninterrupted_run(datasets):
    path = datasets["auto"]
    whole = run(path, 5, 8, sequence_parallel=4)
    loader = libshard.Loader(path, rank=5, world_size=8, seed=3, sequence_parallel=4,
                             return_index=True, pin_memory=False)
    it = iter(loader)
    first = [int(next(it)[libshard.INDEX_KEY]) for _ in range(3)]
    state = loader.state_dict()
    del it
    resumed = libshard.Loader(path, rank=5, world_size=8, seed=3, sequence_parallel=4,
                              return_index=True, pin_memory=False)
    resumed.load_state_dict(state)
    rest = [int(s[libshard.INDEX_KEY]) for s in resumed]
    assert first + rest == [int(s[libshard.INDEX_KEY]) for s in whole]


def test_errors_name_the_option(datasets):
    path = datasets["raw"]
    with pytest.raises(libshard.InvalidArgumentError,
                       match="sequence_parallel.*does not divide world_size 6"):
        libshard.Loader(path, rank=0, world_size=6, sequence_parallel=4)
    with pytest.raises(libshard.InvalidArgumentError, match="sp_rule.*no-such-rule"):
        libshard.Loader(path, rank=0, world_size=4, sequence_parallel=4, sp_rule="no-such-rule")
    with pytest.raises(libshard.InvalidArgumentError, match="sp_rule.*packed row"):
        libshard.Loader(path, rank=0, world_size=4, sequence_parallel=4, sp_rule="speculators")
    with pytest.raises(libshard.InvalidArgumentError, match="collate.*sequence_parallel"):
        libshard.Loader(path, rank=0, world_size=4, sequence_parallel=4, batch_size=2,
                        collate="pad")


def test_a_group_of_one_applies_the_rule(datasets):
    """sequence_parallel=1 (what a trainer passes with sp_size 1) is a group of one: every rank
    gets its data-parallel samples as without it, each whole under "even" and whole plus
    ttt_length zero rows (pad_to) under specforge-usp; a C++ collate works under "even"."""
    path = datasets["raw"]
    ds = libshard.open(path)
    for rank in range(3):
        off = [int(s[libshard.INDEX_KEY]) for s in run(path, rank, 3)]
        one = run(path, rank, 3, sequence_parallel=1)
        assert [int(s[libshard.INDEX_KEY]) for s in one] == off
        for s in one:
            check_slice(ds, s, rank, 1)
            assert s[libshard.SP_KEY]["stop"] == s[libshard.SP_KEY]["pad_to"] == \
                length(int(s[libshard.INDEX_KEY]))
        usp = run(path, rank, 3, sequence_parallel=libshard.SequenceParallel(
            1, rule="specforge-usp", ttt_length=5))
        assert [int(s[libshard.INDEX_KEY]) for s in usp] == off
        for s in usp:
            check_slice(ds, s, rank, 1, "specforge-usp", 5)
            assert s[libshard.SP_KEY]["pad_to"] == length(int(s[libshard.INDEX_KEY])) + 5
    padded = [run(path, 0, 1, batch_size=4, collate="pad", **kw)
              for kw in ({}, {"sequence_parallel": 1})]
    assert len(padded[0]) == len(padded[1]) > 0
    for a, b in zip(*padded):
        assert sorted(a) == sorted(b)
        for key, value in a.items():
            if isinstance(value, torch.Tensor):
                assert tensor_bytes(value) == tensor_bytes(b[key]), key


def test_degrees_below_one_are_refused_naming_the_option(datasets):
    path = datasets["raw"]
    for bad in (0, -1, libshard.SequenceParallel(0), libshard.SequenceParallel(-2)):
        with pytest.raises(libshard.InvalidArgumentError, match="sequence_parallel.*out of range"):
            libshard.Loader(path, sequence_parallel=bad)
    with pytest.raises(libshard.InvalidArgumentError, match="sequence_parallel=1"):
        libshard.Loader(path, sp_rule="specforge-usp")
    with pytest.raises(libshard.InvalidArgumentError, match="collate"):
        libshard.Loader(path, batch_size=2, collate="pad", sequence_parallel=libshard.
                        SequenceParallel(1, rule="specforge-usp", ttt_length=3))


def test_a_sample_larger_than_the_arena_names_the_option_and_loads_split(tmp_path):
    # Samples of 8 MiB of hidden states (1 MiB row blocks of 512 rows): a 6 MiB arena holds a
    # quarter of one (plus a block at each end) but not one whole.
    path = tmp_path / "big"
    with libshard.Writer(path, fsync=False) as w:
        for i in range(3):
            w.write({"input_ids": torch.arange(4096, dtype=torch.int64) + i,
                     "hidden_state": torch.full((1, 4096, 1024), float(i)).to(torch.bfloat16)},
                    key=f"b{i}")
    budget = 6 << 20
    with pytest.raises(libshard.ResourceExhaustedError,
                       match="(?s)memory_budget.*sequence_parallel"):
        for _ in libshard.Loader(path, rank=0, world_size=1, memory_budget=budget,
                                 pin_memory=False):
            pass
    for rank in range(4):
        served = 0
        # Each sample dropped before the next, as a trainer does: the arena holds the slices.
        for s in libshard.Loader(path, rank=rank, world_size=4, sequence_parallel=4,
                                 memory_budget=budget, return_index=True, pin_memory=False):
            sp = s[libshard.SP_KEY]
            assert (sp["start"], sp["stop"]) == (1024 * rank, 1024 * (rank + 1))
            assert s["hidden_state"].shape == (1, 1024, 1024)
            assert torch.equal(s["input_ids"], torch.arange(1024 * rank, 1024 * (rank + 1))
                               + int(s[libshard.INDEX_KEY]))
            served += 1
            del s
        assert served == 3


def test_follow_a_write_in_progress_reads_each_rank_its_slice(tmp_path):
    # A dataset whose Writer is still open (follow=True, docs/ORDER.md §7): the journal records
    # each sample's block table, so a group of 2 reads about one copy of each committed sample
    # (each rank its rows, checked), and the slices are the closed dataset's rows.
    path = tmp_path / "following"
    w = libshard.Writer(path, fsync=False)
    n = 3  # follow windows of 1 and 2 positions: all 3 known before the writer closes
    for i in range(n):
        w.write({"input_ids": torch.arange(2048, dtype=torch.int64) + i,
                 "hidden_state": torch.randn(1, 2048, 1024,
                                             generator=torch.Generator().manual_seed(i))
                 .to(torch.bfloat16)},
                key=f"f{i}")
    w.flush()
    try:
        group, read = [], 0
        for rank in range(2):
            loader = libshard.Loader(path, follow=True, rank=rank, world_size=2,
                                     sequence_parallel=2, return_index=True, pin_memory=False)
            got = []
            for s in loader:
                got.append(s)
                if len(got) == n:
                    break
            read += loader.stats()["bytes_read"]
            loader.close()
            group.append(got)
    finally:
        w.close()
    ds = libshard.open(path)
    stored = sum(p.stat().st_size for p in path.glob("*.lss"))
    assert read < 1.2 * stored, (read, stored)  # 2x before the journal's block tables were used
    for rank, got in enumerate(group):
        assert sorted(int(s[libshard.INDEX_KEY]) for s in got) == list(range(n))
        for s in got:
            check = ds.read(int(s[libshard.INDEX_KEY]),
                            rows=(s[libshard.SP_KEY]["start"], s[libshard.SP_KEY]["stop"]))
            assert s[libshard.SP_KEY]["sp_rank"] == rank
            for name in ("input_ids", "hidden_state"):
                assert tensor_bytes(s[name]) == tensor_bytes(check[name]), (rank, name)


# -- a packed batch: sp_rule="speculators" with collate="speculators-eagle3" -------------------

PACKED_LENGTHS = [2600, 1900, 3100, 1, 700, 2200, 1500, 900]
PACKED_ROW = 4096     # recipe_len, speculators' --total-seq-len
PACKED_BATCHES = [[0, 1], [2, 3, 4], [5, 6, 7]]
BLOCK = 1 << 20       # the writer's row blocks


@pytest.fixture(scope="module")
def packed_dataset(tmp_path_factory) -> Path:
    """speculators' hidden-states samples: hidden_states [S, L+1, H] bf16 (4 KiB a row),
    token_ids [S]."""
    path = tmp_path_factory.mktemp("sp_packed") / "ds"
    g = torch.Generator().manual_seed(5)
    with libshard.Writer(path, fsync=False) as w:
        for i, s in enumerate(PACKED_LENGTHS):
            w.write({"hidden_states": torch.randn(s, 4, 512, generator=g).to(torch.bfloat16),
                     "token_ids": torch.randint(0, 1000, (s,), generator=g)}, key=f"s{i}")
    return path


def packed_batches(path: Path, n: int = 0, r: int = 0):
    sp = {} if n == 0 else {"rank": r, "world_size": n,
                            "sequence_parallel": libshard.SequenceParallel(n, "speculators")}
    loader = libshard.Loader(path, batch_sampler=PACKED_BATCHES, collate="speculators-eagle3",
                             recipe_len=PACKED_ROW, pin_memory=False, **sp)
    got = list(loader)
    return got, int(loader.stats()["bytes_read"])


@pytest.mark.parametrize("n", [1, 2, 4])
def test_a_packed_batch_each_rank_builds_its_part_from_its_rows(packed_dataset, n):
    """SP rank r of N gets speculators#871's part of the packed batch (torch.chunk(N, dim=1)[r]
    of every tensor, document_ids whole), bit for bit, reading only the stored rows of the
    samples behind its part: at most 1/N of what the whole batches read plus a row block at each
    end of each field of each sample."""
    ds = libshard.open(packed_dataset)
    assert ds.has_row_blocks
    whole, whole_read = packed_batches(packed_dataset)
    assert len(whole) == len(PACKED_BATCHES)
    slack = len(PACKED_LENGTHS) * 2 * 2 * BLOCK
    read = []
    for r in range(n):
        got, bytes_read = packed_batches(packed_dataset, n, r)
        assert len(got) == len(whole)
        for k, (a, b) in enumerate(zip(got, whole)):
            assert list(a) == list(b), k
            for key, value in b.items():
                if not isinstance(value, torch.Tensor):
                    assert a[key] == value, (k, key)
                    continue
                want = value if key == "document_ids" else value.chunk(n, dim=1)[r]
                assert a[key].shape == want.shape, (k, key)
                assert tensor_bytes(a[key]) == tensor_bytes(want.contiguous()), (r, k, key)
        read.append(bytes_read)
    for b in read:
        assert b <= whole_read // n + slack, (read, whole_read)
    if n == 4:
        assert max(read) < whole_read * 0.5, (read, whole_read)  # not the whole batches
    print(f"N={n}: each rank read {[round(b / whole_read, 3) for b in read]} of {whole_read}")


def test_a_packed_batch_needs_a_multiple_and_the_recipe(packed_dataset):
    with pytest.raises(libshard.InvalidArgumentError,
                       match="sequence_parallel.*does not divide recipe_len 4096"):
        libshard.Loader(packed_dataset, batch_sampler=PACKED_BATCHES, rank=0, world_size=3,
                        collate="speculators-eagle3", recipe_len=PACKED_ROW,
                        sequence_parallel=libshard.SequenceParallel(3, "speculators"))
    with pytest.raises(libshard.InvalidArgumentError, match="sp_rule.*'even' splits samples"):
        libshard.Loader(packed_dataset, batch_sampler=PACKED_BATCHES, rank=0, world_size=2,
                        collate="speculators-eagle3", recipe_len=PACKED_ROW,
                        sequence_parallel=2)
