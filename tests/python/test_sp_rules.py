"""The split rules of sequence parallelism (libshard/sequence_parallel.h, through
`_core.sequence_parallel_*`) against each trainer's own slicing code.

A rank that reads only the rows [start, stop) its rule names, pads them with zero rows to pad_to
and adds what the rule's batch contract says (attention_mask, position_ids, the collate's
rounding) must hold, bit for bit, what the trainer cuts from the whole sample:

- SpecForge's offline EAGLE-3 USP ("specforge-usp") is in the installed wheel (specforge 0.2.0):
  its `OfflineEagle3Dataset.process_data_usp` and `DataCollatorWithPadding` run here, on random
  samples, for SP 2, 4 and 8 in every Ulysses x ring layout (run with the trainers' environment:
  `TORCHDYNAMO_DISABLE=1 .venv-trainers/bin/python -m pytest tests/python/test_sp_rules.py`).
- speculators' packing (`CollateFn` + `shift_batch`, in the speculators 0.9.0 wheel) runs here
  too: the rows PackedParts gives a rank, taken from the stored samples, are the rank's part of
  the packed row, bit for bit.
- The SP code that no installed wheel has (SpecForge DSpark USP, SpecForge#725 / #728;
  speculators' split_batch_for_sp, speculators#871; TorchSpec's split_usp_batch, TorchSpec#93)
  was run once, by the generator below, on arange-coded samples: GOLDEN at the end of this file
  is what each rank got (rows, padding, positions, batch length), and the generator checked the
  C++ rule bit for bit on random samples while making it. The tests compare the rule with GOLDEN
  (no network, no trainer needed). Remake or check it with the trainers' sources at hand:

      TORCHDYNAMO_DISABLE=1 .venv-trainers/bin/python tests/python/test_sp_rules.py \\
          --specforge-git PATH/TO/SpecForge --speculators-git PATH/TO/speculators \\
          --torchspec-file PATH/TO/torchspec/utils/usp.py [--write | --check]

  (the git checkouts must hold the commits in SOURCES; the TorchSpec file is usp.py at commit
  2c0f1eb197d70f7f825722af2c5b60c4fb35c2a0 of lightseekorg/TorchSpec).
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from libshard import _core

HERE = Path(__file__).resolve()

# The trainers' code each golden table was made from (repository, commit, path: function).
SOURCES = {
    "specforge-usp": ("sgl-project/SpecForge (specforge 0.2.0 wheel = main a6b6b02)",
                      "a6b6b0230009d15ec2a97a57384e6f53f0f96946",
                      "specforge/data/preprocessing.py: OfflineEagle3Dataset.process_data_usp; "
                      "specforge/data/utils.py: DataCollatorWithPadding"),
    "specforge-dspark": ("sgl-project/SpecForge#728 head",
                         "5ad56a1c4e125e655affcc5ab2c0fcb7fa57f7a8",
                         "specforge/algorithms/common/dflash_family_data.py: "
                         "normalize_dspark_offline_sample_usp, build_dspark_collator"),
    "specforge-dspark#725": ("sgl-project/SpecForge#725 head",
                             "5b815c824a004af8c69df5929ee14c9ce0879eb2",
                             "specforge/algorithms/common/dflash_family_data.py: "
                             "normalize_dspark_usp_offline_sample (#728's rows, no positions)"),
    "speculators": ("vllm-project/speculators#871 head", "49c8aac7404f470df1ec57df38d52b2cc05f9c4e",
                    "src/speculators/train/sequence_parallel.py: split_batch_for_sp"),
    "torchspec-usp": ("lightseekorg/TorchSpec (after #93)",
                      "2c0f1eb197d70f7f825722af2c5b60c4fb35c2a0",
                      "torchspec/utils/usp.py: split_usp_batch"),
}

H = 8  # hidden width of the test samples (aux / hidden states are 3H wide)


def sp_slice(rule: str, length: int, n: int, r: int, ttt: int = 0, ulysses: int = 0,
             max_len: int = 0) -> Dict[str, int]:
    return _core.sequence_parallel_slice(rule, length, n, r, ttt_length=ttt, ulysses_size=ulysses,
                                         max_len=max_len)


def rule_info(name: str) -> Dict[str, Any]:
    for info in _core.sequence_parallel_rules():
        if info["name"] == name or name in info["aliases"]:
            return info
    raise KeyError(name)


def divisors(n: int) -> List[int]:
    return [u for u in range(1, n + 1) if n % u == 0]


# ---------------------------------------------------------------------------------------------
# The table through the bindings
# ---------------------------------------------------------------------------------------------

def test_the_rule_table_is_the_libraries():
    rules = _core.sequence_parallel_rules()
    assert [r["name"] for r in rules] == ["even", "specforge-usp", "torchspec-usp", "speculators"]
    assert rules[0]["aliases"] == ["specforge-dspark"]
    for r in rules:
        assert r["trainer"] and r["source"]
    assert sp_slice("specforge-dspark", 10, 4, 3) == sp_slice("even", 10, 4, 3) | {"rule": "even"}


def test_refusals_are_invalid_argument_errors_naming_the_value():
    import libshard
    with pytest.raises(libshard.InvalidArgumentError, match="unknown sequence_parallel rule 'usp'"):
        sp_slice("usp", 10, 2, 0)
    with pytest.raises(libshard.InvalidArgumentError, match="sp_rank 2 .* 0..1"):
        sp_slice("even", 10, 2, 2)
    with pytest.raises(libshard.InvalidArgumentError, match="not a multiple of sp_size 4"):
        sp_slice("speculators", 10, 4, 0)
    with pytest.raises(libshard.InvalidArgumentError, match="ttt_length = 3"):
        sp_slice("even", 10, 4, 0, ttt=3)
    with pytest.raises(libshard.InvalidArgumentError, match="length = -1 is out of range"):
        sp_slice("even", -1, 4, 0)
    with pytest.raises(libshard.InvalidArgumentError, match="sp_size must be an integer"):
        sp_slice("even", 10, 2.0, 0)  # type: ignore[arg-type]


def test_packed_parts_through_the_bindings():
    assert _core.sequence_parallel_packed_parts([5, 0, 4, 2], 3, 6) == [(0, 3, 5, 0), (2, 0, 1, 2)]
    assert _core.sequence_parallel_packed_parts([5, 0, 4, 2], 11, 12) == []


# ---------------------------------------------------------------------------------------------
# Slicing a whole sample by a C++ slice (what the loader's row-range read plus padding gives)
# ---------------------------------------------------------------------------------------------

def cut(t, dim: int, s: Dict[str, int], pad_to: Optional[int] = None):
    """Rows [start, stop) of `t` along `dim`, then zero rows up to pad_to (s's, unless given)."""
    import torch
    index = [slice(None)] * t.dim()
    index[dim] = slice(s["start"], s["stop"])
    part = t[tuple(index)]
    shape = list(t.shape)
    shape[dim] = (s["pad_to"] if pad_to is None else pad_to) - (s["stop"] - s["start"])
    return torch.cat([part, t.new_zeros(shape)], dim=dim).contiguous()


def attention_mask(s: Dict[str, int], length: Optional[int] = None):
    import torch
    m = torch.zeros((1, s["pad_to"] if length is None else length), dtype=torch.long)
    m[:, : s["stop"] - s["start"]] = 1
    return m


def positions(s: Dict[str, int], length: int):
    """The rule's generated position ids, zero-padded to `length`."""
    import torch
    p = torch.zeros((1, length), dtype=torch.long)
    p[0, : s["position_count"]] = torch.arange(s["position_begin"],
                                               s["position_begin"] + s["position_count"])
    return p


def loss_mask_of(mask, s: Dict[str, int], rule: str):
    """The stored loss_mask [S] as the rule's trainer prepares it before the split: truncated to
    the split length, its last row zeroed when the rule says so."""
    m = mask[: s["full_length"]].clone()
    if rule_info(rule)["zero_last_loss"] and m.numel() > 0:
        m[-1] = 0
    return m


def specforge_sample(length: int, seed: int) -> Dict[str, Any]:
    """prepare_hidden_states.py's sample: input_ids [S] i64 (1..S, so a row's value names it),
    loss_mask [S] i64, aux_hidden_state [1, S, 3H] and hidden_state [1, S, H] bf16."""
    import torch
    g = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.arange(1, length + 1, dtype=torch.long),
        "loss_mask": torch.randint(0, 2, (length,), generator=g, dtype=torch.long),
        "aux_hidden_state": torch.randn(1, length, 3 * H, generator=g).to(torch.bfloat16),
        "hidden_state": torch.randn(1, length, H, generator=g).to(torch.bfloat16),
    }


def specforge_usp_expected(data, s, n: int, ulysses: int) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """process_data_usp's feature and DataCollatorWithPadding's batch of it, from the C++ slice."""
    ids = data["input_ids"][None, :]
    mask = loss_mask_of(data["loss_mask"], s, "specforge-usp")[None, :]
    feature = {
        "hidden_state": cut(data["aux_hidden_state"], 1, s),
        "target": cut(data["hidden_state"], 1, s),
        "input_ids": cut(ids, 1, s),
        "loss_mask": cut(mask, 1, s),
        "attention_mask": attention_mask(s),
        "position_ids": positions(s, s["position_count"]),
    }
    b = s["batch_pad_to"]
    batch = {
        "input_ids": cut(ids, 1, s, b),
        "attention_mask": attention_mask(s, b),
        "loss_mask": cut(mask, 1, s, b),
        "hidden_state": feature["hidden_state"],  # USP: the collate leaves it at pad_to
        "target": cut(data["hidden_state"], 1, s, b),
        "position_ids": positions(s, s["position_pad_to"]),
    }
    return feature, batch


def trainers_module(name: str, what: str):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        pytest.skip(f"{what} is not importable here ({e}); run this file with the trainers' "
                    "environment (.venv-trainers/bin/python, scripts/trainers_env.sh builds it)")


# ---------------------------------------------------------------------------------------------
# SpecForge offline EAGLE-3 USP, live against the installed wheel
# ---------------------------------------------------------------------------------------------

SPECFORGE_LENGTHS = [0, 1, 2, 3, 5, 7, 8, 13, 16, 31, 64, 100, 257]


@pytest.mark.parametrize("n", [2, 4, 8])
def test_specforge_usp_matches_process_data_usp_and_its_collate(n):
    trainers_module("specforge.data.preprocessing", "SpecForge (specforge 0.2.0)")
    from specforge.data.preprocessing import OfflineEagle3Dataset
    from specforge.data.utils import DataCollatorWithPadding
    from trainers_util import assert_same

    checked = 0
    for length in SPECFORGE_LENGTHS:
        data = specforge_sample(length, seed=length * 31 + n)
        for max_len in (2048, max(1, length // 2)):
            for ttt in (1, 3, 7):
                for ulysses in divisors(n):
                    ring = n // ulysses
                    collate = DataCollatorWithPadding()  # no process group: set its degrees
                    collate.sp_degree, collate.ulysses_degree = n, ulysses
                    for r in range(n):
                        where = f"L={length} max_len={max_len} N={n} U={ulysses} ttt={ttt} rank {r}"
                        # yunchang's use_ulysses_low layout: Ulysses peers are consecutive ranks.
                        got = OfflineEagle3Dataset.process_data_usp(
                            data, max_len, ttt_length=ttt, sp_rank=r, sp_size=n,
                            ring_rank=r // ulysses, sp_ring_size=ring)
                        s = sp_slice("specforge-usp", length, n, r, ttt, ulysses, max_len)
                        feature, batch = specforge_usp_expected(data, s, n, ulysses)
                        assert_same(got, feature, where)
                        assert_same(collate([got]), batch, where + " (collated)")
                        checked += 1
    assert checked == len(SPECFORGE_LENGTHS) * 2 * 3 * len(divisors(n)) * n


# ---------------------------------------------------------------------------------------------
# speculators: a packed row's rank ranges back to the samples, live against CollateFn
# ---------------------------------------------------------------------------------------------

def speculators_raw(length: int, seed: int) -> Dict[str, Any]:
    """ArrowDataset.__getitem__'s sample: hidden_states [S, 3H], verifier_last_hidden_states
    [S, H], input_ids [S], loss_mask [S], lengths [1], position_ids arange(S)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    return {
        "hidden_states": torch.randn(length, 3 * H, generator=g).to(torch.bfloat16),
        "input_ids": torch.randint(1, 1000, (length,), generator=g, dtype=torch.long),
        "verifier_last_hidden_states": torch.randn(length, H, generator=g).to(torch.bfloat16),
        "loss_mask": torch.randint(0, 2, (length,), generator=g, dtype=torch.long),
        "lengths": torch.tensor([length], dtype=torch.long),
        "position_ids": torch.arange(length, dtype=torch.long),
    }


@pytest.mark.parametrize("n", [2, 4, 8])
def test_speculators_packed_parts_match_collate_fn(n):
    trainers_module("speculators.train.data", "speculators (speculators 0.9.0)")
    import torch
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.data import CollateFn
    from trainers_util import assert_same

    # shift_batch: row i of the shifted sample is stored row i + 1 of these, row i of hidden_states.
    shifted_from = {"input_ids": 1, "verifier_last_hidden_states": 1, "loss_mask": 1,
                    "position_ids": 1, "hidden_states": 0}
    for trial, lengths in enumerate([[9, 4, 12], [1, 1], [30], [5, 6, 7, 8, 9], [2, 40, 3]]):
        for total in (24, 32, 64):
            total -= total % n
            raws = [speculators_raw(length, seed=trial * 100 + k)
                    for k, length in enumerate(lengths)]
            collate = CollateFn(max_len=total, hidden_size=H, num_target_layers=3,
                                dtype=torch.bfloat16, preprocess=shift_batch)
            packed = collate([dict(r) for r in raws])
            shifted = [length - 1 for length in lengths]
            for r in range(n):
                s = sp_slice("speculators", total, n, r)
                where = f"lengths={lengths} T={total} N={n} rank {r}"
                parts = _core.sequence_parallel_packed_parts(shifted, s["start"], s["stop"])
                for key, shift in shifted_from.items():
                    full = packed[key]
                    want = full[:, s["start"]:s["stop"]]  # split_batch_for_sp's chunk (GOLDEN)
                    got = full.new_zeros(want.shape)
                    for k, begin, end, at in parts:
                        rows = raws[k][key][begin + shift:end + shift]
                        got[0, at:at + end - begin] = rows.to(full.dtype)
                    assert_same(got, want, f"{where} {key}")
                # document_ids stays whole: the samples' (shifted, truncated) lengths, -1 after.
                doc = torch.full((1, total), -1, dtype=torch.long)
                row = 0
                for k, length in enumerate(shifted):
                    take = min(length, total - row)
                    doc[0, row:row + take] = k
                    row += take
                    if row == total:
                        break
                assert_same(packed["document_ids"], doc, where)


# ---------------------------------------------------------------------------------------------
# The golden tables (the trainers' code that no wheel here has)
# ---------------------------------------------------------------------------------------------

def observed(rule: str, length: int, n: int, r: int, ttt: int, ulysses: int,
             max_len: int) -> Any:
    """What GOLDEN records for one rank, from the C++ rule."""
    try:
        s = sp_slice(rule, length, n, r, ttt, ulysses, max_len)
    except ValueError:
        return "refused"
    valid = s["stop"] - s["start"]
    count = s["position_count"]
    return (valid, s["start"] if valid else 0, s["pad_to"], s["position_begin"] if count else 0,
            count, s["position_pad_to"], s["batch_pad_to"])


@pytest.mark.parametrize("source", ["specforge-usp", "specforge-dspark", "torchspec-usp",
                                    "speculators"])
def test_rule_matches_the_golden_table_of_the_trainers_code(source):
    table = GOLDEN[source]
    assert len(table) > 20
    for (length, max_len, n, ttt, ulysses), ranks in table.items():
        assert len(ranks) == n
        for r, want in enumerate(ranks):
            got = observed(source, length, n, r, ttt, ulysses, max_len)
            assert got == want, (f"{source} L={length} max_len={max_len} N={n} ttt={ttt} "
                                 f"U={ulysses} rank {r}: rule {got} != trainer {want} "
                                 f"({SOURCES[source][0]} {SOURCES[source][1][:10]})")


# ---------------------------------------------------------------------------------------------
# The generator: runs the trainers' code, checks the rule bit for bit, writes GOLDEN
# ---------------------------------------------------------------------------------------------

def _load(name: str, text: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = f"<{name}>"
    sys.modules[name] = module
    exec(compile(text, module.__file__, "exec"), module.__dict__)
    return module


def _git_show(repo: str, commit: str, path: str) -> str:
    return subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def _record(valid: int, first: int, pad_to: int, pos, pos_len: int, batch_len: int):
    """One rank's record from a trainer's output. `pos`: the position_ids it generated for the
    rank ([1, K], before any collate padding), checked to be an arange; None: it makes none."""
    begin = count = 0
    if pos is not None:
        p = pos[0].tolist()
        count = len(p)
        begin = p[0] if count else 0
        assert p == list(range(begin, begin + count)), p
    return (valid, first if valid else 0, pad_to, begin, count, pos_len, batch_len)


def _padded(pos, collated) -> int:
    """The length of the collated position_ids, checked to be `pos` then zeros."""
    c = collated[0].tolist()
    p = pos[0].tolist()
    assert c[:len(p)] == p and all(v == 0 for v in c[len(p):]), (p, c)
    return len(c)


def _rows_of(ids) -> Tuple[int, int]:
    """(valid, first row) of a slice of arange(1, S + 1) ids, checked: contiguous, then zeros."""
    v = ids.reshape(-1).tolist()
    valid = sum(1 for x in v if x != 0)
    assert all(x != 0 for x in v[:valid]) and all(x == 0 for x in v[valid:]), v
    first = v[0] - 1 if valid else 0
    assert v[:valid] == list(range(first + 1, first + valid + 1)), v
    return valid, first


def generate(args) -> Dict[str, Dict[Tuple[int, ...], Any]]:
    import torch
    from trainers_util import assert_same
    golden: Dict[str, Dict[Tuple[int, ...], Any]] = {}

    # SpecForge EAGLE-3 USP: the wheel (== main a6b6b02 for these files).
    from specforge.data.preprocessing import OfflineEagle3Dataset
    from specforge.data.utils import DataCollatorWithPadding
    table = golden["specforge-usp"] = {}
    for length in [0, 1, 3, 5, 13, 100]:
        data = specforge_sample(length, seed=length)
        for n in (2, 4, 8):
            for ttt in (1, 7):
                for ulysses in sorted({1, n}):
                    ranks = []
                    collate = DataCollatorWithPadding()
                    collate.sp_degree, collate.ulysses_degree = n, ulysses
                    for r in range(n):
                        f = OfflineEagle3Dataset.process_data_usp(
                            data, 2048, ttt_length=ttt, sp_rank=r, sp_size=n,
                            ring_rank=r // ulysses, sp_ring_size=n // ulysses)
                        b = collate([f])
                        valid, first = _rows_of(f["input_ids"])
                        assert int(f["attention_mask"].sum()) == valid
                        ranks.append(_record(valid, first, f["input_ids"].shape[1],
                                             f["position_ids"],
                                             _padded(f["position_ids"], b["position_ids"]),
                                             b["input_ids"].shape[1]))
                        s = sp_slice("specforge-usp", length, n, r, ttt, ulysses)
                        feature, batch = specforge_usp_expected(data, s, n, ulysses)
                        assert_same(f, feature)
                        assert_same(b, batch)
                    table[(length, 0, n, ttt, ulysses)] = ranks

    # SpecForge DSpark USP (#728; #725 splits the same rows, without position_ids).
    dspark = _load("sp_golden_dspark_728", _git_show(
        args.specforge_git, SOURCES["specforge-dspark"][1],
        "specforge/algorithms/common/dflash_family_data.py"))
    dspark725 = _load("sp_golden_dspark_725", _git_show(
        args.specforge_git, SOURCES["specforge-dspark#725"][1],
        "specforge/algorithms/common/dflash_family_data.py"))
    collate = dspark.build_dspark_collator()
    table = golden["specforge-dspark"] = {}
    for length in [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33, 64, 100]:
        g = torch.Generator().manual_seed(length)
        raw = {"input_ids": torch.arange(1, length + 1, dtype=torch.long),
               "loss_mask": torch.randint(0, 2, (length,), generator=g, dtype=torch.long),
               "hidden_states": torch.randn(1, length, 3 * H, generator=g).to(torch.bfloat16),
               "target_last_hidden_states": torch.randn(length, H, generator=g).to(torch.bfloat16)}
        for max_len in sorted({4096, max(1, length // 2)}):
            for n in (2, 4, 8):
                ranks = []
                for r in range(n):
                    f = dspark.normalize_dspark_offline_sample_usp(raw, max_len, sp_rank=r,
                                                                   sp_size=n)
                    f725 = dspark725.normalize_dspark_usp_offline_sample(raw, max_len, sp_rank=r,
                                                                         sp_size=n)
                    assert_same(f725, {k: f[k] for k in f725})
                    b = collate([f])
                    valid, first = _rows_of(f["input_ids"])
                    assert int(f["attention_mask"].sum()) == valid
                    ranks.append(_record(valid, first, f["input_ids"].shape[1], f["position_ids"],
                                         _padded(f["position_ids"], b["position_ids"]),
                                         b["input_ids"].shape[1]))
                    s = sp_slice("specforge-dspark", length, n, r, max_len=max_len)
                    whole = dspark.normalize_dspark_offline_sample(raw, max_len)
                    keys = ("input_ids", "loss_mask", "hidden_states", "target_last_hidden_states")
                    want = {k: cut(whole[k], 1, s) for k in keys}
                    want["attention_mask"] = attention_mask(s)
                    want["position_ids"] = positions(s, s["position_pad_to"])
                    assert_same(f, want)
                    assert_same(b, {k: want[k] for k in b})
                table[(length, 0 if max_len == 4096 else max_len, n, 0, 0)] = ranks

    # TorchSpec split_usp_batch.
    text = (Path(args.torchspec_file).read_text() if args.torchspec_file else
            _git_show(args.torchspec_git, SOURCES["torchspec-usp"][1], "torchspec/utils/usp.py"))
    usp = _load("sp_golden_torchspec_usp", text)
    table = golden["torchspec-usp"] = {}
    for length in [0, 1, 3, 5, 13, 100]:
        g = torch.Generator().manual_seed(length)
        ids = torch.arange(1, length + 1, dtype=torch.long)
        mask = torch.randint(0, 2, (length,), generator=g, dtype=torch.long)
        hs = torch.randn(1, length, 3 * H, generator=g).to(torch.bfloat16)
        tgt = torch.randn(1, length, H, generator=g).to(torch.bfloat16)
        for n in (2, 4, 8):
            for ttt in (1, 7):
                for ulysses in divisors(n):
                    ranks = []
                    for r in range(n):
                        out = usp.split_usp_batch(
                            input_ids=ids, loss_mask=mask, hidden_states=hs,
                            target_hidden_states=tgt, ttt_length=ttt, sp_rank=r, sp_size=n,
                            ring_rank=r // ulysses, sp_ring_size=n // ulysses, max_len=None)
                        o_ids, o_att, o_mask, o_hs, o_tgt, o_pos = out
                        valid, first = _rows_of(o_ids)
                        assert int(o_att.sum()) == valid
                        ranks.append(_record(valid, first, o_ids.shape[1], o_pos,
                                             o_pos.shape[1], o_ids.shape[1]))
                        s = sp_slice("torchspec-usp", length, n, r, ttt, ulysses)
                        m = loss_mask_of(mask, s, "torchspec-usp")[None, :]
                        assert_same(list(out), [cut(ids[None, :], 1, s), attention_mask(s),
                                                cut(m, 1, s), cut(hs, 1, s), cut(tgt, 1, s),
                                                positions(s, s["position_pad_to"])])
                    table[(length, 0, n, ttt, ulysses)] = ranks

    # speculators split_batch_for_sp on a packed row.
    sp = _load("sp_golden_speculators_sp", _git_show(
        args.speculators_git, SOURCES["speculators"][1],
        "src/speculators/train/sequence_parallel.py"))
    table = golden["speculators"] = {}
    for total in [0, 1, 2, 3, 4, 6, 7, 8, 10, 12, 16, 24, 30, 64]:
        g = torch.Generator().manual_seed(total)
        batch = {"hidden_states": torch.randn(1, total, 3 * H, generator=g).to(torch.bfloat16),
                 "input_ids": torch.arange(1, total + 1, dtype=torch.long)[None, :],
                 "verifier_last_hidden_states": torch.randn(1, total, H, generator=g),
                 "loss_mask": torch.randint(0, 2, (1, total), generator=g),
                 "position_ids": torch.randint(0, 99, (1, total), generator=g),
                 "document_ids": torch.randint(-1, 3, (1, total), generator=g)}
        for n in (2, 4, 8):
            ranks = []
            for r in range(n):
                try:
                    out = sp.split_batch_for_sp(dict(batch), r, n)
                except ValueError:
                    ranks.append("refused")
                    continue
                valid, first = _rows_of(out["input_ids"])
                ranks.append(_record(valid, first, out["input_ids"].shape[1], None, 0,
                                     out["input_ids"].shape[1]))
                s = sp_slice("speculators", total, n, r)
                want = {k: (batch[k] if k == "document_ids" else cut(batch[k], 1, s))
                        for k in batch}
                want["full_seq_len"] = torch.tensor(total)
                assert_same(out, want)
            table[(total, 0, n, 0, 0)] = ranks
    return golden


def _wrap(items: List[str], indent: str, width: int = 100) -> List[str]:
    """items joined by ", " into lines of at most `width` characters after `indent`."""
    lines: List[str] = []
    line = ""
    for item in items:
        if line and len(indent) + len(line) + len(item) + 4 > width:  # room for ", " and "],"
            lines.append(indent + line + ",")
            line = ""
        line = f"{line}, {item}" if line else item
    lines.append(indent + line)
    return lines


def _golden_text(golden) -> str:
    lines = ["GOLDEN: Dict[str, Dict[Tuple[int, int, int, int, int], Any]] = {"]
    for source, table in golden.items():
        where, commit, code = SOURCES[source]
        lines += ["    # " + line for line in textwrap.wrap(
            f"{where} {commit}: {code}", 94, break_long_words=False, break_on_hyphens=False)]
        lines.append("    # (L, max_len, N, ttt_length, ulysses_size): per rank (rows read, first "
                     "row, pad_to,")
        lines.append("    #   first position, positions, position_ids length, batch length)")
        lines.append(f"    {source!r}: {{")
        for key, ranks in table.items():
            lines.append(f"        {key!r}: [")
            lines += _wrap([repr(r) for r in ranks], "            ")
            lines[-1] += "],"
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--specforge-git", required=True)
    p.add_argument("--speculators-git", required=True)
    p.add_argument("--torchspec-git")
    p.add_argument("--torchspec-file")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite GOLDEN in this file")
    mode.add_argument("--check", action="store_true", help="exit 1 when GOLDEN differs")
    args = p.parse_args(argv)
    if not (args.torchspec_git or args.torchspec_file):
        p.error("give --torchspec-git or --torchspec-file")
    sys.path.insert(0, str(HERE.parent))
    text = _golden_text(generate(args))
    source = HERE.read_text()
    begin, end = "# BEGIN GOLDEN (the generator above writes it)\n", "# END GOLDEN\n"
    current = source[source.index(begin) + len(begin):source.index(end)]
    if args.write:
        HERE.write_text(source.replace(begin + current + end, begin + text + end))
        print(f"wrote GOLDEN ({sum(len(t) for t in GOLDEN.values())} cases before)")
    elif args.check:
        if current != text:
            print("GOLDEN differs from the trainers' code: rerun with --write", file=sys.stderr)
            return 1
        print("GOLDEN matches the trainers' code")
    else:
        print(text)
    return 0


# BEGIN GOLDEN (the generator above writes it)
GOLDEN: Dict[str, Dict[Tuple[int, int, int, int, int], Any]] = {
    # sgl-project/SpecForge (specforge 0.2.0 wheel = main a6b6b02)
    # a6b6b0230009d15ec2a97a57384e6f53f0f96946: specforge/data/preprocessing.py:
    # OfflineEagle3Dataset.process_data_usp; specforge/data/utils.py: DataCollatorWithPadding
    # (L, max_len, N, ttt_length, ulysses_size): per rank (rows read, first row, pad_to,
    #   first position, positions, position_ids length, batch length)
    'specforge-usp': {
        (0, 0, 2, 1, 1): [
            (0, 0, 1, 0, 0, 2, 2), (0, 0, 1, 0, 0, 2, 2)],
        (0, 0, 2, 1, 2): [
            (0, 0, 1, 0, 0, 4, 2), (0, 0, 1, 0, 0, 4, 2)],
        (0, 0, 2, 7, 1): [
            (0, 0, 7, 0, 0, 8, 8), (0, 0, 7, 0, 0, 8, 8)],
        (0, 0, 2, 7, 2): [
            (0, 0, 7, 0, 0, 16, 8), (0, 0, 7, 0, 0, 16, 8)],
        (0, 0, 4, 1, 1): [
            (0, 0, 1, 0, 0, 4, 4), (0, 0, 1, 0, 0, 4, 4), (0, 0, 1, 0, 0, 4, 4),
            (0, 0, 1, 0, 0, 4, 4)],
        (0, 0, 4, 1, 4): [
            (0, 0, 1, 0, 0, 16, 4), (0, 0, 1, 0, 0, 16, 4), (0, 0, 1, 0, 0, 16, 4),
            (0, 0, 1, 0, 0, 16, 4)],
        (0, 0, 4, 7, 1): [
            (0, 0, 7, 0, 0, 8, 8), (0, 0, 7, 0, 0, 8, 8), (0, 0, 7, 0, 0, 8, 8),
            (0, 0, 7, 0, 0, 8, 8)],
        (0, 0, 4, 7, 4): [
            (0, 0, 7, 0, 0, 32, 8), (0, 0, 7, 0, 0, 32, 8), (0, 0, 7, 0, 0, 32, 8),
            (0, 0, 7, 0, 0, 32, 8)],
        (0, 0, 8, 1, 1): [
            (0, 0, 1, 0, 0, 8, 8), (0, 0, 1, 0, 0, 8, 8), (0, 0, 1, 0, 0, 8, 8),
            (0, 0, 1, 0, 0, 8, 8), (0, 0, 1, 0, 0, 8, 8), (0, 0, 1, 0, 0, 8, 8),
            (0, 0, 1, 0, 0, 8, 8), (0, 0, 1, 0, 0, 8, 8)],
        (0, 0, 8, 1, 8): [
            (0, 0, 1, 0, 0, 64, 8), (0, 0, 1, 0, 0, 64, 8), (0, 0, 1, 0, 0, 64, 8),
            (0, 0, 1, 0, 0, 64, 8), (0, 0, 1, 0, 0, 64, 8), (0, 0, 1, 0, 0, 64, 8),
            (0, 0, 1, 0, 0, 64, 8), (0, 0, 1, 0, 0, 64, 8)],
        (0, 0, 8, 7, 1): [
            (0, 0, 7, 0, 0, 8, 8), (0, 0, 7, 0, 0, 8, 8), (0, 0, 7, 0, 0, 8, 8),
            (0, 0, 7, 0, 0, 8, 8), (0, 0, 7, 0, 0, 8, 8), (0, 0, 7, 0, 0, 8, 8),
            (0, 0, 7, 0, 0, 8, 8), (0, 0, 7, 0, 0, 8, 8)],
        (0, 0, 8, 7, 8): [
            (0, 0, 7, 0, 0, 64, 8), (0, 0, 7, 0, 0, 64, 8), (0, 0, 7, 0, 0, 64, 8),
            (0, 0, 7, 0, 0, 64, 8), (0, 0, 7, 0, 0, 64, 8), (0, 0, 7, 0, 0, 64, 8),
            (0, 0, 7, 0, 0, 64, 8), (0, 0, 7, 0, 0, 64, 8)],
        (1, 0, 2, 1, 1): [
            (1, 0, 2, 0, 1, 2, 2), (0, 0, 2, 1, 1, 2, 2)],
        (1, 0, 2, 1, 2): [
            (1, 0, 2, 0, 1, 4, 2), (0, 0, 2, 1, 1, 4, 2)],
        (1, 0, 2, 7, 1): [
            (1, 0, 8, 0, 1, 8, 8), (0, 0, 8, 1, 1, 8, 8)],
        (1, 0, 2, 7, 2): [
            (1, 0, 8, 0, 1, 16, 8), (0, 0, 8, 1, 1, 16, 8)],
        (1, 0, 4, 1, 1): [
            (1, 0, 2, 0, 1, 4, 4), (0, 0, 2, 1, 1, 4, 4), (0, 0, 2, 2, 1, 4, 4),
            (0, 0, 2, 3, 1, 4, 4)],
        (1, 0, 4, 1, 4): [
            (1, 0, 2, 0, 1, 16, 4), (0, 0, 2, 1, 1, 16, 4), (0, 0, 2, 2, 1, 16, 4),
            (0, 0, 2, 3, 1, 16, 4)],
        (1, 0, 4, 7, 1): [
            (1, 0, 8, 0, 1, 8, 8), (0, 0, 8, 1, 1, 8, 8), (0, 0, 8, 2, 1, 8, 8),
            (0, 0, 8, 3, 1, 8, 8)],
        (1, 0, 4, 7, 4): [
            (1, 0, 8, 0, 1, 32, 8), (0, 0, 8, 1, 1, 32, 8), (0, 0, 8, 2, 1, 32, 8),
            (0, 0, 8, 3, 1, 32, 8)],
        (1, 0, 8, 1, 1): [
            (1, 0, 2, 0, 1, 8, 8), (0, 0, 2, 1, 1, 8, 8), (0, 0, 2, 2, 1, 8, 8),
            (0, 0, 2, 3, 1, 8, 8), (0, 0, 2, 4, 1, 8, 8), (0, 0, 2, 5, 1, 8, 8),
            (0, 0, 2, 6, 1, 8, 8), (0, 0, 2, 7, 1, 8, 8)],
        (1, 0, 8, 1, 8): [
            (1, 0, 2, 0, 1, 64, 8), (0, 0, 2, 1, 1, 64, 8), (0, 0, 2, 2, 1, 64, 8),
            (0, 0, 2, 3, 1, 64, 8), (0, 0, 2, 4, 1, 64, 8), (0, 0, 2, 5, 1, 64, 8),
            (0, 0, 2, 6, 1, 64, 8), (0, 0, 2, 7, 1, 64, 8)],
        (1, 0, 8, 7, 1): [
            (1, 0, 8, 0, 1, 8, 8), (0, 0, 8, 1, 1, 8, 8), (0, 0, 8, 2, 1, 8, 8),
            (0, 0, 8, 3, 1, 8, 8), (0, 0, 8, 4, 1, 8, 8), (0, 0, 8, 5, 1, 8, 8),
            (0, 0, 8, 6, 1, 8, 8), (0, 0, 8, 7, 1, 8, 8)],
        (1, 0, 8, 7, 8): [
            (1, 0, 8, 0, 1, 64, 8), (0, 0, 8, 1, 1, 64, 8), (0, 0, 8, 2, 1, 64, 8),
            (0, 0, 8, 3, 1, 64, 8), (0, 0, 8, 4, 1, 64, 8), (0, 0, 8, 5, 1, 64, 8),
            (0, 0, 8, 6, 1, 64, 8), (0, 0, 8, 7, 1, 64, 8)],
        (3, 0, 2, 1, 1): [
            (3, 0, 3, 0, 2, 4, 4), (1, 2, 3, 2, 2, 4, 4)],
        (3, 0, 2, 1, 2): [
            (3, 0, 3, 0, 2, 8, 4), (1, 2, 3, 2, 2, 8, 4)],
        (3, 0, 2, 7, 1): [
            (3, 0, 9, 0, 2, 10, 10), (1, 2, 9, 2, 2, 10, 10)],
        (3, 0, 2, 7, 2): [
            (3, 0, 9, 0, 2, 20, 10), (1, 2, 9, 2, 2, 20, 10)],
        (3, 0, 4, 1, 1): [
            (2, 0, 2, 0, 1, 4, 4), (2, 1, 2, 1, 1, 4, 4), (1, 2, 2, 2, 1, 4, 4),
            (0, 0, 2, 3, 1, 4, 4)],
        (3, 0, 4, 1, 4): [
            (2, 0, 2, 0, 1, 16, 4), (2, 1, 2, 1, 1, 16, 4), (1, 2, 2, 2, 1, 16, 4),
            (0, 0, 2, 3, 1, 16, 4)],
        (3, 0, 4, 7, 1): [
            (3, 0, 8, 0, 1, 8, 8), (2, 1, 8, 1, 1, 8, 8), (1, 2, 8, 2, 1, 8, 8),
            (0, 0, 8, 3, 1, 8, 8)],
        (3, 0, 4, 7, 4): [
            (3, 0, 8, 0, 1, 32, 8), (2, 1, 8, 1, 1, 32, 8), (1, 2, 8, 2, 1, 32, 8),
            (0, 0, 8, 3, 1, 32, 8)],
        (3, 0, 8, 1, 1): [
            (2, 0, 2, 0, 1, 8, 8), (2, 1, 2, 1, 1, 8, 8), (1, 2, 2, 2, 1, 8, 8),
            (0, 0, 2, 3, 1, 8, 8), (0, 0, 2, 4, 1, 8, 8), (0, 0, 2, 5, 1, 8, 8),
            (0, 0, 2, 6, 1, 8, 8), (0, 0, 2, 7, 1, 8, 8)],
        (3, 0, 8, 1, 8): [
            (2, 0, 2, 0, 1, 64, 8), (2, 1, 2, 1, 1, 64, 8), (1, 2, 2, 2, 1, 64, 8),
            (0, 0, 2, 3, 1, 64, 8), (0, 0, 2, 4, 1, 64, 8), (0, 0, 2, 5, 1, 64, 8),
            (0, 0, 2, 6, 1, 64, 8), (0, 0, 2, 7, 1, 64, 8)],
        (3, 0, 8, 7, 1): [
            (3, 0, 8, 0, 1, 8, 8), (2, 1, 8, 1, 1, 8, 8), (1, 2, 8, 2, 1, 8, 8),
            (0, 0, 8, 3, 1, 8, 8), (0, 0, 8, 4, 1, 8, 8), (0, 0, 8, 5, 1, 8, 8),
            (0, 0, 8, 6, 1, 8, 8), (0, 0, 8, 7, 1, 8, 8)],
        (3, 0, 8, 7, 8): [
            (3, 0, 8, 0, 1, 64, 8), (2, 1, 8, 1, 1, 64, 8), (1, 2, 8, 2, 1, 64, 8),
            (0, 0, 8, 3, 1, 64, 8), (0, 0, 8, 4, 1, 64, 8), (0, 0, 8, 5, 1, 64, 8),
            (0, 0, 8, 6, 1, 64, 8), (0, 0, 8, 7, 1, 64, 8)],
        (5, 0, 2, 1, 1): [
            (4, 0, 4, 0, 3, 4, 4), (2, 3, 4, 3, 3, 4, 4)],
        (5, 0, 2, 1, 2): [
            (4, 0, 4, 0, 3, 8, 4), (2, 3, 4, 3, 3, 8, 4)],
        (5, 0, 2, 7, 1): [
            (5, 0, 10, 0, 3, 10, 10), (2, 3, 10, 3, 3, 10, 10)],
        (5, 0, 2, 7, 2): [
            (5, 0, 10, 0, 3, 20, 10), (2, 3, 10, 3, 3, 20, 10)],
        (5, 0, 4, 1, 1): [
            (3, 0, 3, 0, 2, 4, 4), (3, 2, 3, 2, 2, 4, 4), (1, 4, 3, 4, 2, 4, 4),
            (0, 0, 3, 6, 2, 4, 4)],
        (5, 0, 4, 1, 4): [
            (3, 0, 3, 0, 2, 16, 4), (3, 2, 3, 2, 2, 16, 4), (1, 4, 3, 4, 2, 16, 4),
            (0, 0, 3, 6, 2, 16, 4)],
        (5, 0, 4, 7, 1): [
            (5, 0, 9, 0, 2, 12, 12), (3, 2, 9, 2, 2, 12, 12), (1, 4, 9, 4, 2, 12, 12),
            (0, 0, 9, 6, 2, 12, 12)],
        (5, 0, 4, 7, 4): [
            (5, 0, 9, 0, 2, 48, 12), (3, 2, 9, 2, 2, 48, 12), (1, 4, 9, 4, 2, 48, 12),
            (0, 0, 9, 6, 2, 48, 12)],
        (5, 0, 8, 1, 1): [
            (2, 0, 2, 0, 1, 8, 8), (2, 1, 2, 1, 1, 8, 8), (2, 2, 2, 2, 1, 8, 8),
            (2, 3, 2, 3, 1, 8, 8), (1, 4, 2, 4, 1, 8, 8), (0, 0, 2, 5, 1, 8, 8),
            (0, 0, 2, 6, 1, 8, 8), (0, 0, 2, 7, 1, 8, 8)],
        (5, 0, 8, 1, 8): [
            (2, 0, 2, 0, 1, 64, 8), (2, 1, 2, 1, 1, 64, 8), (2, 2, 2, 2, 1, 64, 8),
            (2, 3, 2, 3, 1, 64, 8), (1, 4, 2, 4, 1, 64, 8), (0, 0, 2, 5, 1, 64, 8),
            (0, 0, 2, 6, 1, 64, 8), (0, 0, 2, 7, 1, 64, 8)],
        (5, 0, 8, 7, 1): [
            (5, 0, 8, 0, 1, 8, 8), (4, 1, 8, 1, 1, 8, 8), (3, 2, 8, 2, 1, 8, 8),
            (2, 3, 8, 3, 1, 8, 8), (1, 4, 8, 4, 1, 8, 8), (0, 0, 8, 5, 1, 8, 8),
            (0, 0, 8, 6, 1, 8, 8), (0, 0, 8, 7, 1, 8, 8)],
        (5, 0, 8, 7, 8): [
            (5, 0, 8, 0, 1, 64, 8), (4, 1, 8, 1, 1, 64, 8), (3, 2, 8, 2, 1, 64, 8),
            (2, 3, 8, 3, 1, 64, 8), (1, 4, 8, 4, 1, 64, 8), (0, 0, 8, 5, 1, 64, 8),
            (0, 0, 8, 6, 1, 64, 8), (0, 0, 8, 7, 1, 64, 8)],
        (13, 0, 2, 1, 1): [
            (8, 0, 8, 0, 7, 8, 8), (6, 7, 8, 7, 7, 8, 8)],
        (13, 0, 2, 1, 2): [
            (8, 0, 8, 0, 7, 16, 8), (6, 7, 8, 7, 7, 16, 8)],
        (13, 0, 2, 7, 1): [
            (13, 0, 14, 0, 7, 14, 14), (6, 7, 14, 7, 7, 14, 14)],
        (13, 0, 2, 7, 2): [
            (13, 0, 14, 0, 7, 28, 14), (6, 7, 14, 7, 7, 28, 14)],
        (13, 0, 4, 1, 1): [
            (5, 0, 5, 0, 4, 8, 8), (5, 4, 5, 4, 4, 8, 8), (5, 8, 5, 8, 4, 8, 8),
            (1, 12, 5, 12, 4, 8, 8)],
        (13, 0, 4, 1, 4): [
            (5, 0, 5, 0, 4, 32, 8), (5, 4, 5, 4, 4, 32, 8), (5, 8, 5, 8, 4, 32, 8),
            (1, 12, 5, 12, 4, 32, 8)],
        (13, 0, 4, 7, 1): [
            (11, 0, 11, 0, 4, 12, 12), (9, 4, 11, 4, 4, 12, 12), (5, 8, 11, 8, 4, 12, 12),
            (1, 12, 11, 12, 4, 12, 12)],
        (13, 0, 4, 7, 4): [
            (11, 0, 11, 0, 4, 48, 12), (9, 4, 11, 4, 4, 48, 12), (5, 8, 11, 8, 4, 48, 12),
            (1, 12, 11, 12, 4, 48, 12)],
        (13, 0, 8, 1, 1): [
            (3, 0, 3, 0, 2, 8, 8), (3, 2, 3, 2, 2, 8, 8), (3, 4, 3, 4, 2, 8, 8),
            (3, 6, 3, 6, 2, 8, 8), (3, 8, 3, 8, 2, 8, 8), (3, 10, 3, 10, 2, 8, 8),
            (1, 12, 3, 12, 2, 8, 8), (0, 0, 3, 14, 2, 8, 8)],
        (13, 0, 8, 1, 8): [
            (3, 0, 3, 0, 2, 64, 8), (3, 2, 3, 2, 2, 64, 8), (3, 4, 3, 4, 2, 64, 8),
            (3, 6, 3, 6, 2, 64, 8), (3, 8, 3, 8, 2, 64, 8), (3, 10, 3, 10, 2, 64, 8),
            (1, 12, 3, 12, 2, 64, 8), (0, 0, 3, 14, 2, 64, 8)],
        (13, 0, 8, 7, 1): [
            (9, 0, 9, 0, 2, 16, 16), (9, 2, 9, 2, 2, 16, 16), (9, 4, 9, 4, 2, 16, 16),
            (7, 6, 9, 6, 2, 16, 16), (5, 8, 9, 8, 2, 16, 16), (3, 10, 9, 10, 2, 16, 16),
            (1, 12, 9, 12, 2, 16, 16), (0, 0, 9, 14, 2, 16, 16)],
        (13, 0, 8, 7, 8): [
            (9, 0, 9, 0, 2, 128, 16), (9, 2, 9, 2, 2, 128, 16), (9, 4, 9, 4, 2, 128, 16),
            (7, 6, 9, 6, 2, 128, 16), (5, 8, 9, 8, 2, 128, 16), (3, 10, 9, 10, 2, 128, 16),
            (1, 12, 9, 12, 2, 128, 16), (0, 0, 9, 14, 2, 128, 16)],
        (100, 0, 2, 1, 1): [
            (51, 0, 51, 0, 50, 52, 52), (50, 50, 51, 50, 50, 52, 52)],
        (100, 0, 2, 1, 2): [
            (51, 0, 51, 0, 50, 104, 52), (50, 50, 51, 50, 50, 104, 52)],
        (100, 0, 2, 7, 1): [
            (57, 0, 57, 0, 50, 58, 58), (50, 50, 57, 50, 50, 58, 58)],
        (100, 0, 2, 7, 2): [
            (57, 0, 57, 0, 50, 116, 58), (50, 50, 57, 50, 50, 116, 58)],
        (100, 0, 4, 1, 1): [
            (26, 0, 26, 0, 25, 28, 28), (26, 25, 26, 25, 25, 28, 28), (26, 50, 26, 50, 25, 28, 28),
            (25, 75, 26, 75, 25, 28, 28)],
        (100, 0, 4, 1, 4): [
            (26, 0, 26, 0, 25, 112, 28), (26, 25, 26, 25, 25, 112, 28),
            (26, 50, 26, 50, 25, 112, 28), (25, 75, 26, 75, 25, 112, 28)],
        (100, 0, 4, 7, 1): [
            (32, 0, 32, 0, 25, 32, 32), (32, 25, 32, 25, 25, 32, 32), (32, 50, 32, 50, 25, 32, 32),
            (25, 75, 32, 75, 25, 32, 32)],
        (100, 0, 4, 7, 4): [
            (32, 0, 32, 0, 25, 128, 32), (32, 25, 32, 25, 25, 128, 32),
            (32, 50, 32, 50, 25, 128, 32), (25, 75, 32, 75, 25, 128, 32)],
        (100, 0, 8, 1, 1): [
            (14, 0, 14, 0, 13, 16, 16), (14, 13, 14, 13, 13, 16, 16), (14, 26, 14, 26, 13, 16, 16),
            (14, 39, 14, 39, 13, 16, 16), (14, 52, 14, 52, 13, 16, 16),
            (14, 65, 14, 65, 13, 16, 16), (14, 78, 14, 78, 13, 16, 16),
            (9, 91, 14, 91, 13, 16, 16)],
        (100, 0, 8, 1, 8): [
            (14, 0, 14, 0, 13, 128, 16), (14, 13, 14, 13, 13, 128, 16),
            (14, 26, 14, 26, 13, 128, 16), (14, 39, 14, 39, 13, 128, 16),
            (14, 52, 14, 52, 13, 128, 16), (14, 65, 14, 65, 13, 128, 16),
            (14, 78, 14, 78, 13, 128, 16), (9, 91, 14, 91, 13, 128, 16)],
        (100, 0, 8, 7, 1): [
            (20, 0, 20, 0, 13, 24, 24), (20, 13, 20, 13, 13, 24, 24), (20, 26, 20, 26, 13, 24, 24),
            (20, 39, 20, 39, 13, 24, 24), (20, 52, 20, 52, 13, 24, 24),
            (20, 65, 20, 65, 13, 24, 24), (20, 78, 20, 78, 13, 24, 24),
            (9, 91, 20, 91, 13, 24, 24)],
        (100, 0, 8, 7, 8): [
            (20, 0, 20, 0, 13, 192, 24), (20, 13, 20, 13, 13, 192, 24),
            (20, 26, 20, 26, 13, 192, 24), (20, 39, 20, 39, 13, 192, 24),
            (20, 52, 20, 52, 13, 192, 24), (20, 65, 20, 65, 13, 192, 24),
            (20, 78, 20, 78, 13, 192, 24), (9, 91, 20, 91, 13, 192, 24)],
    },
    # sgl-project/SpecForge#728 head 5ad56a1c4e125e655affcc5ab2c0fcb7fa57f7a8:
    # specforge/algorithms/common/dflash_family_data.py: normalize_dspark_offline_sample_usp,
    # build_dspark_collator
    # (L, max_len, N, ttt_length, ulysses_size): per rank (rows read, first row, pad_to,
    #   first position, positions, position_ids length, batch length)
    'specforge-dspark': {
        (0, 1, 2, 0, 0): [
            (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0)],
        (0, 1, 4, 0, 0): [
            (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0),
            (0, 0, 0, 0, 0, 0, 0)],
        (0, 1, 8, 0, 0): [
            (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0),
            (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0),
            (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0)],
        (0, 0, 2, 0, 0): [
            (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0)],
        (0, 0, 4, 0, 0): [
            (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0),
            (0, 0, 0, 0, 0, 0, 0)],
        (0, 0, 8, 0, 0): [
            (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0),
            (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0),
            (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0)],
        (1, 1, 2, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (0, 0, 1, 1, 1, 1, 1)],
        (1, 1, 4, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (0, 0, 1, 1, 1, 1, 1), (0, 0, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1)],
        (1, 1, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (0, 0, 1, 1, 1, 1, 1), (0, 0, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1), (0, 0, 1, 4, 1, 1, 1), (0, 0, 1, 5, 1, 1, 1),
            (0, 0, 1, 6, 1, 1, 1), (0, 0, 1, 7, 1, 1, 1)],
        (1, 0, 2, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (0, 0, 1, 1, 1, 1, 1)],
        (1, 0, 4, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (0, 0, 1, 1, 1, 1, 1), (0, 0, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1)],
        (1, 0, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (0, 0, 1, 1, 1, 1, 1), (0, 0, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1), (0, 0, 1, 4, 1, 1, 1), (0, 0, 1, 5, 1, 1, 1),
            (0, 0, 1, 6, 1, 1, 1), (0, 0, 1, 7, 1, 1, 1)],
        (2, 1, 2, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (0, 0, 1, 1, 1, 1, 1)],
        (2, 1, 4, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (0, 0, 1, 1, 1, 1, 1), (0, 0, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1)],
        (2, 1, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (0, 0, 1, 1, 1, 1, 1), (0, 0, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1), (0, 0, 1, 4, 1, 1, 1), (0, 0, 1, 5, 1, 1, 1),
            (0, 0, 1, 6, 1, 1, 1), (0, 0, 1, 7, 1, 1, 1)],
        (2, 0, 2, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1)],
        (2, 0, 4, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (0, 0, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1)],
        (2, 0, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (0, 0, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1), (0, 0, 1, 4, 1, 1, 1), (0, 0, 1, 5, 1, 1, 1),
            (0, 0, 1, 6, 1, 1, 1), (0, 0, 1, 7, 1, 1, 1)],
        (3, 1, 2, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (0, 0, 1, 1, 1, 1, 1)],
        (3, 1, 4, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (0, 0, 1, 1, 1, 1, 1), (0, 0, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1)],
        (3, 1, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (0, 0, 1, 1, 1, 1, 1), (0, 0, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1), (0, 0, 1, 4, 1, 1, 1), (0, 0, 1, 5, 1, 1, 1),
            (0, 0, 1, 6, 1, 1, 1), (0, 0, 1, 7, 1, 1, 1)],
        (3, 0, 2, 0, 0): [
            (2, 0, 2, 0, 2, 2, 2), (1, 2, 2, 2, 2, 2, 2)],
        (3, 0, 4, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (1, 2, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1)],
        (3, 0, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (1, 2, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1), (0, 0, 1, 4, 1, 1, 1), (0, 0, 1, 5, 1, 1, 1),
            (0, 0, 1, 6, 1, 1, 1), (0, 0, 1, 7, 1, 1, 1)],
        (4, 2, 2, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1)],
        (4, 2, 4, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (0, 0, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1)],
        (4, 2, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (0, 0, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1), (0, 0, 1, 4, 1, 1, 1), (0, 0, 1, 5, 1, 1, 1),
            (0, 0, 1, 6, 1, 1, 1), (0, 0, 1, 7, 1, 1, 1)],
        (4, 0, 2, 0, 0): [
            (2, 0, 2, 0, 2, 2, 2), (2, 2, 2, 2, 2, 2, 2)],
        (4, 0, 4, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (1, 2, 1, 2, 1, 1, 1),
            (1, 3, 1, 3, 1, 1, 1)],
        (4, 0, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (1, 2, 1, 2, 1, 1, 1),
            (1, 3, 1, 3, 1, 1, 1), (0, 0, 1, 4, 1, 1, 1), (0, 0, 1, 5, 1, 1, 1),
            (0, 0, 1, 6, 1, 1, 1), (0, 0, 1, 7, 1, 1, 1)],
        (5, 2, 2, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1)],
        (5, 2, 4, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (0, 0, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1)],
        (5, 2, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (0, 0, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1), (0, 0, 1, 4, 1, 1, 1), (0, 0, 1, 5, 1, 1, 1),
            (0, 0, 1, 6, 1, 1, 1), (0, 0, 1, 7, 1, 1, 1)],
        (5, 0, 2, 0, 0): [
            (3, 0, 3, 0, 3, 3, 3), (2, 3, 3, 3, 3, 3, 3)],
        (5, 0, 4, 0, 0): [
            (2, 0, 2, 0, 2, 2, 2), (2, 2, 2, 2, 2, 2, 2), (1, 4, 2, 4, 2, 2, 2),
            (0, 0, 2, 6, 2, 2, 2)],
        (5, 0, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (1, 2, 1, 2, 1, 1, 1),
            (1, 3, 1, 3, 1, 1, 1), (1, 4, 1, 4, 1, 1, 1), (0, 0, 1, 5, 1, 1, 1),
            (0, 0, 1, 6, 1, 1, 1), (0, 0, 1, 7, 1, 1, 1)],
        (7, 3, 2, 0, 0): [
            (2, 0, 2, 0, 2, 2, 2), (1, 2, 2, 2, 2, 2, 2)],
        (7, 3, 4, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (1, 2, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1)],
        (7, 3, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (1, 2, 1, 2, 1, 1, 1),
            (0, 0, 1, 3, 1, 1, 1), (0, 0, 1, 4, 1, 1, 1), (0, 0, 1, 5, 1, 1, 1),
            (0, 0, 1, 6, 1, 1, 1), (0, 0, 1, 7, 1, 1, 1)],
        (7, 0, 2, 0, 0): [
            (4, 0, 4, 0, 4, 4, 4), (3, 4, 4, 4, 4, 4, 4)],
        (7, 0, 4, 0, 0): [
            (2, 0, 2, 0, 2, 2, 2), (2, 2, 2, 2, 2, 2, 2), (2, 4, 2, 4, 2, 2, 2),
            (1, 6, 2, 6, 2, 2, 2)],
        (7, 0, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (1, 2, 1, 2, 1, 1, 1),
            (1, 3, 1, 3, 1, 1, 1), (1, 4, 1, 4, 1, 1, 1), (1, 5, 1, 5, 1, 1, 1),
            (1, 6, 1, 6, 1, 1, 1), (0, 0, 1, 7, 1, 1, 1)],
        (8, 4, 2, 0, 0): [
            (2, 0, 2, 0, 2, 2, 2), (2, 2, 2, 2, 2, 2, 2)],
        (8, 4, 4, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (1, 2, 1, 2, 1, 1, 1),
            (1, 3, 1, 3, 1, 1, 1)],
        (8, 4, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (1, 2, 1, 2, 1, 1, 1),
            (1, 3, 1, 3, 1, 1, 1), (0, 0, 1, 4, 1, 1, 1), (0, 0, 1, 5, 1, 1, 1),
            (0, 0, 1, 6, 1, 1, 1), (0, 0, 1, 7, 1, 1, 1)],
        (8, 0, 2, 0, 0): [
            (4, 0, 4, 0, 4, 4, 4), (4, 4, 4, 4, 4, 4, 4)],
        (8, 0, 4, 0, 0): [
            (2, 0, 2, 0, 2, 2, 2), (2, 2, 2, 2, 2, 2, 2), (2, 4, 2, 4, 2, 2, 2),
            (2, 6, 2, 6, 2, 2, 2)],
        (8, 0, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (1, 2, 1, 2, 1, 1, 1),
            (1, 3, 1, 3, 1, 1, 1), (1, 4, 1, 4, 1, 1, 1), (1, 5, 1, 5, 1, 1, 1),
            (1, 6, 1, 6, 1, 1, 1), (1, 7, 1, 7, 1, 1, 1)],
        (9, 4, 2, 0, 0): [
            (2, 0, 2, 0, 2, 2, 2), (2, 2, 2, 2, 2, 2, 2)],
        (9, 4, 4, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (1, 2, 1, 2, 1, 1, 1),
            (1, 3, 1, 3, 1, 1, 1)],
        (9, 4, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (1, 2, 1, 2, 1, 1, 1),
            (1, 3, 1, 3, 1, 1, 1), (0, 0, 1, 4, 1, 1, 1), (0, 0, 1, 5, 1, 1, 1),
            (0, 0, 1, 6, 1, 1, 1), (0, 0, 1, 7, 1, 1, 1)],
        (9, 0, 2, 0, 0): [
            (5, 0, 5, 0, 5, 5, 5), (4, 5, 5, 5, 5, 5, 5)],
        (9, 0, 4, 0, 0): [
            (3, 0, 3, 0, 3, 3, 3), (3, 3, 3, 3, 3, 3, 3), (3, 6, 3, 6, 3, 3, 3),
            (0, 0, 3, 9, 3, 3, 3)],
        (9, 0, 8, 0, 0): [
            (2, 0, 2, 0, 2, 2, 2), (2, 2, 2, 2, 2, 2, 2), (2, 4, 2, 4, 2, 2, 2),
            (2, 6, 2, 6, 2, 2, 2), (1, 8, 2, 8, 2, 2, 2), (0, 0, 2, 10, 2, 2, 2),
            (0, 0, 2, 12, 2, 2, 2), (0, 0, 2, 14, 2, 2, 2)],
        (15, 7, 2, 0, 0): [
            (4, 0, 4, 0, 4, 4, 4), (3, 4, 4, 4, 4, 4, 4)],
        (15, 7, 4, 0, 0): [
            (2, 0, 2, 0, 2, 2, 2), (2, 2, 2, 2, 2, 2, 2), (2, 4, 2, 4, 2, 2, 2),
            (1, 6, 2, 6, 2, 2, 2)],
        (15, 7, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (1, 2, 1, 2, 1, 1, 1),
            (1, 3, 1, 3, 1, 1, 1), (1, 4, 1, 4, 1, 1, 1), (1, 5, 1, 5, 1, 1, 1),
            (1, 6, 1, 6, 1, 1, 1), (0, 0, 1, 7, 1, 1, 1)],
        (15, 0, 2, 0, 0): [
            (8, 0, 8, 0, 8, 8, 8), (7, 8, 8, 8, 8, 8, 8)],
        (15, 0, 4, 0, 0): [
            (4, 0, 4, 0, 4, 4, 4), (4, 4, 4, 4, 4, 4, 4), (4, 8, 4, 8, 4, 4, 4),
            (3, 12, 4, 12, 4, 4, 4)],
        (15, 0, 8, 0, 0): [
            (2, 0, 2, 0, 2, 2, 2), (2, 2, 2, 2, 2, 2, 2), (2, 4, 2, 4, 2, 2, 2),
            (2, 6, 2, 6, 2, 2, 2), (2, 8, 2, 8, 2, 2, 2), (2, 10, 2, 10, 2, 2, 2),
            (2, 12, 2, 12, 2, 2, 2), (1, 14, 2, 14, 2, 2, 2)],
        (16, 8, 2, 0, 0): [
            (4, 0, 4, 0, 4, 4, 4), (4, 4, 4, 4, 4, 4, 4)],
        (16, 8, 4, 0, 0): [
            (2, 0, 2, 0, 2, 2, 2), (2, 2, 2, 2, 2, 2, 2), (2, 4, 2, 4, 2, 2, 2),
            (2, 6, 2, 6, 2, 2, 2)],
        (16, 8, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (1, 2, 1, 2, 1, 1, 1),
            (1, 3, 1, 3, 1, 1, 1), (1, 4, 1, 4, 1, 1, 1), (1, 5, 1, 5, 1, 1, 1),
            (1, 6, 1, 6, 1, 1, 1), (1, 7, 1, 7, 1, 1, 1)],
        (16, 0, 2, 0, 0): [
            (8, 0, 8, 0, 8, 8, 8), (8, 8, 8, 8, 8, 8, 8)],
        (16, 0, 4, 0, 0): [
            (4, 0, 4, 0, 4, 4, 4), (4, 4, 4, 4, 4, 4, 4), (4, 8, 4, 8, 4, 4, 4),
            (4, 12, 4, 12, 4, 4, 4)],
        (16, 0, 8, 0, 0): [
            (2, 0, 2, 0, 2, 2, 2), (2, 2, 2, 2, 2, 2, 2), (2, 4, 2, 4, 2, 2, 2),
            (2, 6, 2, 6, 2, 2, 2), (2, 8, 2, 8, 2, 2, 2), (2, 10, 2, 10, 2, 2, 2),
            (2, 12, 2, 12, 2, 2, 2), (2, 14, 2, 14, 2, 2, 2)],
        (17, 8, 2, 0, 0): [
            (4, 0, 4, 0, 4, 4, 4), (4, 4, 4, 4, 4, 4, 4)],
        (17, 8, 4, 0, 0): [
            (2, 0, 2, 0, 2, 2, 2), (2, 2, 2, 2, 2, 2, 2), (2, 4, 2, 4, 2, 2, 2),
            (2, 6, 2, 6, 2, 2, 2)],
        (17, 8, 8, 0, 0): [
            (1, 0, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (1, 2, 1, 2, 1, 1, 1),
            (1, 3, 1, 3, 1, 1, 1), (1, 4, 1, 4, 1, 1, 1), (1, 5, 1, 5, 1, 1, 1),
            (1, 6, 1, 6, 1, 1, 1), (1, 7, 1, 7, 1, 1, 1)],
        (17, 0, 2, 0, 0): [
            (9, 0, 9, 0, 9, 9, 9), (8, 9, 9, 9, 9, 9, 9)],
        (17, 0, 4, 0, 0): [
            (5, 0, 5, 0, 5, 5, 5), (5, 5, 5, 5, 5, 5, 5), (5, 10, 5, 10, 5, 5, 5),
            (2, 15, 5, 15, 5, 5, 5)],
        (17, 0, 8, 0, 0): [
            (3, 0, 3, 0, 3, 3, 3), (3, 3, 3, 3, 3, 3, 3), (3, 6, 3, 6, 3, 3, 3),
            (3, 9, 3, 9, 3, 3, 3), (3, 12, 3, 12, 3, 3, 3), (2, 15, 3, 15, 3, 3, 3),
            (0, 0, 3, 18, 3, 3, 3), (0, 0, 3, 21, 3, 3, 3)],
        (33, 16, 2, 0, 0): [
            (8, 0, 8, 0, 8, 8, 8), (8, 8, 8, 8, 8, 8, 8)],
        (33, 16, 4, 0, 0): [
            (4, 0, 4, 0, 4, 4, 4), (4, 4, 4, 4, 4, 4, 4), (4, 8, 4, 8, 4, 4, 4),
            (4, 12, 4, 12, 4, 4, 4)],
        (33, 16, 8, 0, 0): [
            (2, 0, 2, 0, 2, 2, 2), (2, 2, 2, 2, 2, 2, 2), (2, 4, 2, 4, 2, 2, 2),
            (2, 6, 2, 6, 2, 2, 2), (2, 8, 2, 8, 2, 2, 2), (2, 10, 2, 10, 2, 2, 2),
            (2, 12, 2, 12, 2, 2, 2), (2, 14, 2, 14, 2, 2, 2)],
        (33, 0, 2, 0, 0): [
            (17, 0, 17, 0, 17, 17, 17), (16, 17, 17, 17, 17, 17, 17)],
        (33, 0, 4, 0, 0): [
            (9, 0, 9, 0, 9, 9, 9), (9, 9, 9, 9, 9, 9, 9), (9, 18, 9, 18, 9, 9, 9),
            (6, 27, 9, 27, 9, 9, 9)],
        (33, 0, 8, 0, 0): [
            (5, 0, 5, 0, 5, 5, 5), (5, 5, 5, 5, 5, 5, 5), (5, 10, 5, 10, 5, 5, 5),
            (5, 15, 5, 15, 5, 5, 5), (5, 20, 5, 20, 5, 5, 5), (5, 25, 5, 25, 5, 5, 5),
            (3, 30, 5, 30, 5, 5, 5), (0, 0, 5, 35, 5, 5, 5)],
        (64, 32, 2, 0, 0): [
            (16, 0, 16, 0, 16, 16, 16), (16, 16, 16, 16, 16, 16, 16)],
        (64, 32, 4, 0, 0): [
            (8, 0, 8, 0, 8, 8, 8), (8, 8, 8, 8, 8, 8, 8), (8, 16, 8, 16, 8, 8, 8),
            (8, 24, 8, 24, 8, 8, 8)],
        (64, 32, 8, 0, 0): [
            (4, 0, 4, 0, 4, 4, 4), (4, 4, 4, 4, 4, 4, 4), (4, 8, 4, 8, 4, 4, 4),
            (4, 12, 4, 12, 4, 4, 4), (4, 16, 4, 16, 4, 4, 4), (4, 20, 4, 20, 4, 4, 4),
            (4, 24, 4, 24, 4, 4, 4), (4, 28, 4, 28, 4, 4, 4)],
        (64, 0, 2, 0, 0): [
            (32, 0, 32, 0, 32, 32, 32), (32, 32, 32, 32, 32, 32, 32)],
        (64, 0, 4, 0, 0): [
            (16, 0, 16, 0, 16, 16, 16), (16, 16, 16, 16, 16, 16, 16), (16, 32, 16, 32, 16, 16, 16),
            (16, 48, 16, 48, 16, 16, 16)],
        (64, 0, 8, 0, 0): [
            (8, 0, 8, 0, 8, 8, 8), (8, 8, 8, 8, 8, 8, 8), (8, 16, 8, 16, 8, 8, 8),
            (8, 24, 8, 24, 8, 8, 8), (8, 32, 8, 32, 8, 8, 8), (8, 40, 8, 40, 8, 8, 8),
            (8, 48, 8, 48, 8, 8, 8), (8, 56, 8, 56, 8, 8, 8)],
        (100, 50, 2, 0, 0): [
            (25, 0, 25, 0, 25, 25, 25), (25, 25, 25, 25, 25, 25, 25)],
        (100, 50, 4, 0, 0): [
            (13, 0, 13, 0, 13, 13, 13), (13, 13, 13, 13, 13, 13, 13), (13, 26, 13, 26, 13, 13, 13),
            (11, 39, 13, 39, 13, 13, 13)],
        (100, 50, 8, 0, 0): [
            (7, 0, 7, 0, 7, 7, 7), (7, 7, 7, 7, 7, 7, 7), (7, 14, 7, 14, 7, 7, 7),
            (7, 21, 7, 21, 7, 7, 7), (7, 28, 7, 28, 7, 7, 7), (7, 35, 7, 35, 7, 7, 7),
            (7, 42, 7, 42, 7, 7, 7), (1, 49, 7, 49, 7, 7, 7)],
        (100, 0, 2, 0, 0): [
            (50, 0, 50, 0, 50, 50, 50), (50, 50, 50, 50, 50, 50, 50)],
        (100, 0, 4, 0, 0): [
            (25, 0, 25, 0, 25, 25, 25), (25, 25, 25, 25, 25, 25, 25), (25, 50, 25, 50, 25, 25, 25),
            (25, 75, 25, 75, 25, 25, 25)],
        (100, 0, 8, 0, 0): [
            (13, 0, 13, 0, 13, 13, 13), (13, 13, 13, 13, 13, 13, 13), (13, 26, 13, 26, 13, 13, 13),
            (13, 39, 13, 39, 13, 13, 13), (13, 52, 13, 52, 13, 13, 13),
            (13, 65, 13, 65, 13, 13, 13), (13, 78, 13, 78, 13, 13, 13),
            (9, 91, 13, 91, 13, 13, 13)],
    },
    # lightseekorg/TorchSpec (after #93) 2c0f1eb197d70f7f825722af2c5b60c4fb35c2a0:
    # torchspec/utils/usp.py: split_usp_batch
    # (L, max_len, N, ttt_length, ulysses_size): per rank (rows read, first row, pad_to,
    #   first position, positions, position_ids length, batch length)
    'torchspec-usp': {
        (0, 0, 2, 1, 1): [
            (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1)],
        (0, 0, 2, 1, 2): [
            (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1)],
        (0, 0, 2, 7, 1): [
            (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7)],
        (0, 0, 2, 7, 2): [
            (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7)],
        (0, 0, 4, 1, 1): [
            (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1),
            (0, 0, 1, 0, 0, 0, 1)],
        (0, 0, 4, 1, 2): [
            (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1),
            (0, 0, 1, 0, 0, 0, 1)],
        (0, 0, 4, 1, 4): [
            (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1),
            (0, 0, 1, 0, 0, 0, 1)],
        (0, 0, 4, 7, 1): [
            (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7),
            (0, 0, 7, 0, 0, 0, 7)],
        (0, 0, 4, 7, 2): [
            (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7),
            (0, 0, 7, 0, 0, 0, 7)],
        (0, 0, 4, 7, 4): [
            (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7),
            (0, 0, 7, 0, 0, 0, 7)],
        (0, 0, 8, 1, 1): [
            (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1),
            (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1),
            (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1)],
        (0, 0, 8, 1, 2): [
            (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1),
            (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1),
            (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1)],
        (0, 0, 8, 1, 4): [
            (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1),
            (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1),
            (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1)],
        (0, 0, 8, 1, 8): [
            (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1),
            (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1),
            (0, 0, 1, 0, 0, 0, 1), (0, 0, 1, 0, 0, 0, 1)],
        (0, 0, 8, 7, 1): [
            (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7),
            (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7),
            (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7)],
        (0, 0, 8, 7, 2): [
            (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7),
            (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7),
            (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7)],
        (0, 0, 8, 7, 4): [
            (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7),
            (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7),
            (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7)],
        (0, 0, 8, 7, 8): [
            (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7),
            (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7),
            (0, 0, 7, 0, 0, 0, 7), (0, 0, 7, 0, 0, 0, 7)],
        (1, 0, 2, 1, 1): [
            (1, 0, 2, 0, 1, 1, 2), (0, 0, 2, 1, 1, 1, 2)],
        (1, 0, 2, 1, 2): [
            (1, 0, 2, 0, 2, 2, 2), (0, 0, 2, 0, 2, 2, 2)],
        (1, 0, 2, 7, 1): [
            (1, 0, 8, 0, 1, 1, 8), (0, 0, 8, 1, 1, 1, 8)],
        (1, 0, 2, 7, 2): [
            (1, 0, 8, 0, 2, 2, 8), (0, 0, 8, 0, 2, 2, 8)],
        (1, 0, 4, 1, 1): [
            (1, 0, 2, 0, 1, 1, 2), (0, 0, 2, 1, 1, 1, 2), (0, 0, 2, 2, 1, 1, 2),
            (0, 0, 2, 3, 1, 1, 2)],
        (1, 0, 4, 1, 2): [
            (1, 0, 2, 0, 2, 2, 2), (0, 0, 2, 0, 2, 2, 2), (0, 0, 2, 2, 2, 2, 2),
            (0, 0, 2, 2, 2, 2, 2)],
        (1, 0, 4, 1, 4): [
            (1, 0, 2, 0, 4, 4, 2), (0, 0, 2, 0, 4, 4, 2), (0, 0, 2, 0, 4, 4, 2),
            (0, 0, 2, 0, 4, 4, 2)],
        (1, 0, 4, 7, 1): [
            (1, 0, 8, 0, 1, 1, 8), (0, 0, 8, 1, 1, 1, 8), (0, 0, 8, 2, 1, 1, 8),
            (0, 0, 8, 3, 1, 1, 8)],
        (1, 0, 4, 7, 2): [
            (1, 0, 8, 0, 2, 2, 8), (0, 0, 8, 0, 2, 2, 8), (0, 0, 8, 2, 2, 2, 8),
            (0, 0, 8, 2, 2, 2, 8)],
        (1, 0, 4, 7, 4): [
            (1, 0, 8, 0, 4, 4, 8), (0, 0, 8, 0, 4, 4, 8), (0, 0, 8, 0, 4, 4, 8),
            (0, 0, 8, 0, 4, 4, 8)],
        (1, 0, 8, 1, 1): [
            (1, 0, 2, 0, 1, 1, 2), (0, 0, 2, 1, 1, 1, 2), (0, 0, 2, 2, 1, 1, 2),
            (0, 0, 2, 3, 1, 1, 2), (0, 0, 2, 4, 1, 1, 2), (0, 0, 2, 5, 1, 1, 2),
            (0, 0, 2, 6, 1, 1, 2), (0, 0, 2, 7, 1, 1, 2)],
        (1, 0, 8, 1, 2): [
            (1, 0, 2, 0, 2, 2, 2), (0, 0, 2, 0, 2, 2, 2), (0, 0, 2, 2, 2, 2, 2),
            (0, 0, 2, 2, 2, 2, 2), (0, 0, 2, 4, 2, 2, 2), (0, 0, 2, 4, 2, 2, 2),
            (0, 0, 2, 6, 2, 2, 2), (0, 0, 2, 6, 2, 2, 2)],
        (1, 0, 8, 1, 4): [
            (1, 0, 2, 0, 4, 4, 2), (0, 0, 2, 0, 4, 4, 2), (0, 0, 2, 0, 4, 4, 2),
            (0, 0, 2, 0, 4, 4, 2), (0, 0, 2, 4, 4, 4, 2), (0, 0, 2, 4, 4, 4, 2),
            (0, 0, 2, 4, 4, 4, 2), (0, 0, 2, 4, 4, 4, 2)],
        (1, 0, 8, 1, 8): [
            (1, 0, 2, 0, 8, 8, 2), (0, 0, 2, 0, 8, 8, 2), (0, 0, 2, 0, 8, 8, 2),
            (0, 0, 2, 0, 8, 8, 2), (0, 0, 2, 0, 8, 8, 2), (0, 0, 2, 0, 8, 8, 2),
            (0, 0, 2, 0, 8, 8, 2), (0, 0, 2, 0, 8, 8, 2)],
        (1, 0, 8, 7, 1): [
            (1, 0, 8, 0, 1, 1, 8), (0, 0, 8, 1, 1, 1, 8), (0, 0, 8, 2, 1, 1, 8),
            (0, 0, 8, 3, 1, 1, 8), (0, 0, 8, 4, 1, 1, 8), (0, 0, 8, 5, 1, 1, 8),
            (0, 0, 8, 6, 1, 1, 8), (0, 0, 8, 7, 1, 1, 8)],
        (1, 0, 8, 7, 2): [
            (1, 0, 8, 0, 2, 2, 8), (0, 0, 8, 0, 2, 2, 8), (0, 0, 8, 2, 2, 2, 8),
            (0, 0, 8, 2, 2, 2, 8), (0, 0, 8, 4, 2, 2, 8), (0, 0, 8, 4, 2, 2, 8),
            (0, 0, 8, 6, 2, 2, 8), (0, 0, 8, 6, 2, 2, 8)],
        (1, 0, 8, 7, 4): [
            (1, 0, 8, 0, 4, 4, 8), (0, 0, 8, 0, 4, 4, 8), (0, 0, 8, 0, 4, 4, 8),
            (0, 0, 8, 0, 4, 4, 8), (0, 0, 8, 4, 4, 4, 8), (0, 0, 8, 4, 4, 4, 8),
            (0, 0, 8, 4, 4, 4, 8), (0, 0, 8, 4, 4, 4, 8)],
        (1, 0, 8, 7, 8): [
            (1, 0, 8, 0, 8, 8, 8), (0, 0, 8, 0, 8, 8, 8), (0, 0, 8, 0, 8, 8, 8),
            (0, 0, 8, 0, 8, 8, 8), (0, 0, 8, 0, 8, 8, 8), (0, 0, 8, 0, 8, 8, 8),
            (0, 0, 8, 0, 8, 8, 8), (0, 0, 8, 0, 8, 8, 8)],
        (3, 0, 2, 1, 1): [
            (3, 0, 3, 0, 2, 2, 3), (1, 2, 3, 2, 2, 2, 3)],
        (3, 0, 2, 1, 2): [
            (3, 0, 3, 0, 4, 4, 3), (1, 2, 3, 0, 4, 4, 3)],
        (3, 0, 2, 7, 1): [
            (3, 0, 9, 0, 2, 2, 9), (1, 2, 9, 2, 2, 2, 9)],
        (3, 0, 2, 7, 2): [
            (3, 0, 9, 0, 4, 4, 9), (1, 2, 9, 0, 4, 4, 9)],
        (3, 0, 4, 1, 1): [
            (2, 0, 2, 0, 1, 1, 2), (2, 1, 2, 1, 1, 1, 2), (1, 2, 2, 2, 1, 1, 2),
            (0, 0, 2, 3, 1, 1, 2)],
        (3, 0, 4, 1, 2): [
            (2, 0, 2, 0, 2, 2, 2), (2, 1, 2, 0, 2, 2, 2), (1, 2, 2, 2, 2, 2, 2),
            (0, 0, 2, 2, 2, 2, 2)],
        (3, 0, 4, 1, 4): [
            (2, 0, 2, 0, 4, 4, 2), (2, 1, 2, 0, 4, 4, 2), (1, 2, 2, 0, 4, 4, 2),
            (0, 0, 2, 0, 4, 4, 2)],
        (3, 0, 4, 7, 1): [
            (3, 0, 8, 0, 1, 1, 8), (2, 1, 8, 1, 1, 1, 8), (1, 2, 8, 2, 1, 1, 8),
            (0, 0, 8, 3, 1, 1, 8)],
        (3, 0, 4, 7, 2): [
            (3, 0, 8, 0, 2, 2, 8), (2, 1, 8, 0, 2, 2, 8), (1, 2, 8, 2, 2, 2, 8),
            (0, 0, 8, 2, 2, 2, 8)],
        (3, 0, 4, 7, 4): [
            (3, 0, 8, 0, 4, 4, 8), (2, 1, 8, 0, 4, 4, 8), (1, 2, 8, 0, 4, 4, 8),
            (0, 0, 8, 0, 4, 4, 8)],
        (3, 0, 8, 1, 1): [
            (2, 0, 2, 0, 1, 1, 2), (2, 1, 2, 1, 1, 1, 2), (1, 2, 2, 2, 1, 1, 2),
            (0, 0, 2, 3, 1, 1, 2), (0, 0, 2, 4, 1, 1, 2), (0, 0, 2, 5, 1, 1, 2),
            (0, 0, 2, 6, 1, 1, 2), (0, 0, 2, 7, 1, 1, 2)],
        (3, 0, 8, 1, 2): [
            (2, 0, 2, 0, 2, 2, 2), (2, 1, 2, 0, 2, 2, 2), (1, 2, 2, 2, 2, 2, 2),
            (0, 0, 2, 2, 2, 2, 2), (0, 0, 2, 4, 2, 2, 2), (0, 0, 2, 4, 2, 2, 2),
            (0, 0, 2, 6, 2, 2, 2), (0, 0, 2, 6, 2, 2, 2)],
        (3, 0, 8, 1, 4): [
            (2, 0, 2, 0, 4, 4, 2), (2, 1, 2, 0, 4, 4, 2), (1, 2, 2, 0, 4, 4, 2),
            (0, 0, 2, 0, 4, 4, 2), (0, 0, 2, 4, 4, 4, 2), (0, 0, 2, 4, 4, 4, 2),
            (0, 0, 2, 4, 4, 4, 2), (0, 0, 2, 4, 4, 4, 2)],
        (3, 0, 8, 1, 8): [
            (2, 0, 2, 0, 8, 8, 2), (2, 1, 2, 0, 8, 8, 2), (1, 2, 2, 0, 8, 8, 2),
            (0, 0, 2, 0, 8, 8, 2), (0, 0, 2, 0, 8, 8, 2), (0, 0, 2, 0, 8, 8, 2),
            (0, 0, 2, 0, 8, 8, 2), (0, 0, 2, 0, 8, 8, 2)],
        (3, 0, 8, 7, 1): [
            (3, 0, 8, 0, 1, 1, 8), (2, 1, 8, 1, 1, 1, 8), (1, 2, 8, 2, 1, 1, 8),
            (0, 0, 8, 3, 1, 1, 8), (0, 0, 8, 4, 1, 1, 8), (0, 0, 8, 5, 1, 1, 8),
            (0, 0, 8, 6, 1, 1, 8), (0, 0, 8, 7, 1, 1, 8)],
        (3, 0, 8, 7, 2): [
            (3, 0, 8, 0, 2, 2, 8), (2, 1, 8, 0, 2, 2, 8), (1, 2, 8, 2, 2, 2, 8),
            (0, 0, 8, 2, 2, 2, 8), (0, 0, 8, 4, 2, 2, 8), (0, 0, 8, 4, 2, 2, 8),
            (0, 0, 8, 6, 2, 2, 8), (0, 0, 8, 6, 2, 2, 8)],
        (3, 0, 8, 7, 4): [
            (3, 0, 8, 0, 4, 4, 8), (2, 1, 8, 0, 4, 4, 8), (1, 2, 8, 0, 4, 4, 8),
            (0, 0, 8, 0, 4, 4, 8), (0, 0, 8, 4, 4, 4, 8), (0, 0, 8, 4, 4, 4, 8),
            (0, 0, 8, 4, 4, 4, 8), (0, 0, 8, 4, 4, 4, 8)],
        (3, 0, 8, 7, 8): [
            (3, 0, 8, 0, 8, 8, 8), (2, 1, 8, 0, 8, 8, 8), (1, 2, 8, 0, 8, 8, 8),
            (0, 0, 8, 0, 8, 8, 8), (0, 0, 8, 0, 8, 8, 8), (0, 0, 8, 0, 8, 8, 8),
            (0, 0, 8, 0, 8, 8, 8), (0, 0, 8, 0, 8, 8, 8)],
        (5, 0, 2, 1, 1): [
            (4, 0, 4, 0, 3, 3, 4), (2, 3, 4, 3, 3, 3, 4)],
        (5, 0, 2, 1, 2): [
            (4, 0, 4, 0, 6, 6, 4), (2, 3, 4, 0, 6, 6, 4)],
        (5, 0, 2, 7, 1): [
            (5, 0, 10, 0, 3, 3, 10), (2, 3, 10, 3, 3, 3, 10)],
        (5, 0, 2, 7, 2): [
            (5, 0, 10, 0, 6, 6, 10), (2, 3, 10, 0, 6, 6, 10)],
        (5, 0, 4, 1, 1): [
            (3, 0, 3, 0, 2, 2, 3), (3, 2, 3, 2, 2, 2, 3), (1, 4, 3, 4, 2, 2, 3),
            (0, 0, 3, 6, 2, 2, 3)],
        (5, 0, 4, 1, 2): [
            (3, 0, 3, 0, 4, 4, 3), (3, 2, 3, 0, 4, 4, 3), (1, 4, 3, 4, 4, 4, 3),
            (0, 0, 3, 4, 4, 4, 3)],
        (5, 0, 4, 1, 4): [
            (3, 0, 3, 0, 8, 8, 3), (3, 2, 3, 0, 8, 8, 3), (1, 4, 3, 0, 8, 8, 3),
            (0, 0, 3, 0, 8, 8, 3)],
        (5, 0, 4, 7, 1): [
            (5, 0, 9, 0, 2, 2, 9), (3, 2, 9, 2, 2, 2, 9), (1, 4, 9, 4, 2, 2, 9),
            (0, 0, 9, 6, 2, 2, 9)],
        (5, 0, 4, 7, 2): [
            (5, 0, 9, 0, 4, 4, 9), (3, 2, 9, 0, 4, 4, 9), (1, 4, 9, 4, 4, 4, 9),
            (0, 0, 9, 4, 4, 4, 9)],
        (5, 0, 4, 7, 4): [
            (5, 0, 9, 0, 8, 8, 9), (3, 2, 9, 0, 8, 8, 9), (1, 4, 9, 0, 8, 8, 9),
            (0, 0, 9, 0, 8, 8, 9)],
        (5, 0, 8, 1, 1): [
            (2, 0, 2, 0, 1, 1, 2), (2, 1, 2, 1, 1, 1, 2), (2, 2, 2, 2, 1, 1, 2),
            (2, 3, 2, 3, 1, 1, 2), (1, 4, 2, 4, 1, 1, 2), (0, 0, 2, 5, 1, 1, 2),
            (0, 0, 2, 6, 1, 1, 2), (0, 0, 2, 7, 1, 1, 2)],
        (5, 0, 8, 1, 2): [
            (2, 0, 2, 0, 2, 2, 2), (2, 1, 2, 0, 2, 2, 2), (2, 2, 2, 2, 2, 2, 2),
            (2, 3, 2, 2, 2, 2, 2), (1, 4, 2, 4, 2, 2, 2), (0, 0, 2, 4, 2, 2, 2),
            (0, 0, 2, 6, 2, 2, 2), (0, 0, 2, 6, 2, 2, 2)],
        (5, 0, 8, 1, 4): [
            (2, 0, 2, 0, 4, 4, 2), (2, 1, 2, 0, 4, 4, 2), (2, 2, 2, 0, 4, 4, 2),
            (2, 3, 2, 0, 4, 4, 2), (1, 4, 2, 4, 4, 4, 2), (0, 0, 2, 4, 4, 4, 2),
            (0, 0, 2, 4, 4, 4, 2), (0, 0, 2, 4, 4, 4, 2)],
        (5, 0, 8, 1, 8): [
            (2, 0, 2, 0, 8, 8, 2), (2, 1, 2, 0, 8, 8, 2), (2, 2, 2, 0, 8, 8, 2),
            (2, 3, 2, 0, 8, 8, 2), (1, 4, 2, 0, 8, 8, 2), (0, 0, 2, 0, 8, 8, 2),
            (0, 0, 2, 0, 8, 8, 2), (0, 0, 2, 0, 8, 8, 2)],
        (5, 0, 8, 7, 1): [
            (5, 0, 8, 0, 1, 1, 8), (4, 1, 8, 1, 1, 1, 8), (3, 2, 8, 2, 1, 1, 8),
            (2, 3, 8, 3, 1, 1, 8), (1, 4, 8, 4, 1, 1, 8), (0, 0, 8, 5, 1, 1, 8),
            (0, 0, 8, 6, 1, 1, 8), (0, 0, 8, 7, 1, 1, 8)],
        (5, 0, 8, 7, 2): [
            (5, 0, 8, 0, 2, 2, 8), (4, 1, 8, 0, 2, 2, 8), (3, 2, 8, 2, 2, 2, 8),
            (2, 3, 8, 2, 2, 2, 8), (1, 4, 8, 4, 2, 2, 8), (0, 0, 8, 4, 2, 2, 8),
            (0, 0, 8, 6, 2, 2, 8), (0, 0, 8, 6, 2, 2, 8)],
        (5, 0, 8, 7, 4): [
            (5, 0, 8, 0, 4, 4, 8), (4, 1, 8, 0, 4, 4, 8), (3, 2, 8, 0, 4, 4, 8),
            (2, 3, 8, 0, 4, 4, 8), (1, 4, 8, 4, 4, 4, 8), (0, 0, 8, 4, 4, 4, 8),
            (0, 0, 8, 4, 4, 4, 8), (0, 0, 8, 4, 4, 4, 8)],
        (5, 0, 8, 7, 8): [
            (5, 0, 8, 0, 8, 8, 8), (4, 1, 8, 0, 8, 8, 8), (3, 2, 8, 0, 8, 8, 8),
            (2, 3, 8, 0, 8, 8, 8), (1, 4, 8, 0, 8, 8, 8), (0, 0, 8, 0, 8, 8, 8),
            (0, 0, 8, 0, 8, 8, 8), (0, 0, 8, 0, 8, 8, 8)],
        (13, 0, 2, 1, 1): [
            (8, 0, 8, 0, 7, 7, 8), (6, 7, 8, 7, 7, 7, 8)],
        (13, 0, 2, 1, 2): [
            (8, 0, 8, 0, 14, 14, 8), (6, 7, 8, 0, 14, 14, 8)],
        (13, 0, 2, 7, 1): [
            (13, 0, 14, 0, 7, 7, 14), (6, 7, 14, 7, 7, 7, 14)],
        (13, 0, 2, 7, 2): [
            (13, 0, 14, 0, 14, 14, 14), (6, 7, 14, 0, 14, 14, 14)],
        (13, 0, 4, 1, 1): [
            (5, 0, 5, 0, 4, 4, 5), (5, 4, 5, 4, 4, 4, 5), (5, 8, 5, 8, 4, 4, 5),
            (1, 12, 5, 12, 4, 4, 5)],
        (13, 0, 4, 1, 2): [
            (5, 0, 5, 0, 8, 8, 5), (5, 4, 5, 0, 8, 8, 5), (5, 8, 5, 8, 8, 8, 5),
            (1, 12, 5, 8, 8, 8, 5)],
        (13, 0, 4, 1, 4): [
            (5, 0, 5, 0, 16, 16, 5), (5, 4, 5, 0, 16, 16, 5), (5, 8, 5, 0, 16, 16, 5),
            (1, 12, 5, 0, 16, 16, 5)],
        (13, 0, 4, 7, 1): [
            (11, 0, 11, 0, 4, 4, 11), (9, 4, 11, 4, 4, 4, 11), (5, 8, 11, 8, 4, 4, 11),
            (1, 12, 11, 12, 4, 4, 11)],
        (13, 0, 4, 7, 2): [
            (11, 0, 11, 0, 8, 8, 11), (9, 4, 11, 0, 8, 8, 11), (5, 8, 11, 8, 8, 8, 11),
            (1, 12, 11, 8, 8, 8, 11)],
        (13, 0, 4, 7, 4): [
            (11, 0, 11, 0, 16, 16, 11), (9, 4, 11, 0, 16, 16, 11), (5, 8, 11, 0, 16, 16, 11),
            (1, 12, 11, 0, 16, 16, 11)],
        (13, 0, 8, 1, 1): [
            (3, 0, 3, 0, 2, 2, 3), (3, 2, 3, 2, 2, 2, 3), (3, 4, 3, 4, 2, 2, 3),
            (3, 6, 3, 6, 2, 2, 3), (3, 8, 3, 8, 2, 2, 3), (3, 10, 3, 10, 2, 2, 3),
            (1, 12, 3, 12, 2, 2, 3), (0, 0, 3, 14, 2, 2, 3)],
        (13, 0, 8, 1, 2): [
            (3, 0, 3, 0, 4, 4, 3), (3, 2, 3, 0, 4, 4, 3), (3, 4, 3, 4, 4, 4, 3),
            (3, 6, 3, 4, 4, 4, 3), (3, 8, 3, 8, 4, 4, 3), (3, 10, 3, 8, 4, 4, 3),
            (1, 12, 3, 12, 4, 4, 3), (0, 0, 3, 12, 4, 4, 3)],
        (13, 0, 8, 1, 4): [
            (3, 0, 3, 0, 8, 8, 3), (3, 2, 3, 0, 8, 8, 3), (3, 4, 3, 0, 8, 8, 3),
            (3, 6, 3, 0, 8, 8, 3), (3, 8, 3, 8, 8, 8, 3), (3, 10, 3, 8, 8, 8, 3),
            (1, 12, 3, 8, 8, 8, 3), (0, 0, 3, 8, 8, 8, 3)],
        (13, 0, 8, 1, 8): [
            (3, 0, 3, 0, 16, 16, 3), (3, 2, 3, 0, 16, 16, 3), (3, 4, 3, 0, 16, 16, 3),
            (3, 6, 3, 0, 16, 16, 3), (3, 8, 3, 0, 16, 16, 3), (3, 10, 3, 0, 16, 16, 3),
            (1, 12, 3, 0, 16, 16, 3), (0, 0, 3, 0, 16, 16, 3)],
        (13, 0, 8, 7, 1): [
            (9, 0, 9, 0, 2, 2, 9), (9, 2, 9, 2, 2, 2, 9), (9, 4, 9, 4, 2, 2, 9),
            (7, 6, 9, 6, 2, 2, 9), (5, 8, 9, 8, 2, 2, 9), (3, 10, 9, 10, 2, 2, 9),
            (1, 12, 9, 12, 2, 2, 9), (0, 0, 9, 14, 2, 2, 9)],
        (13, 0, 8, 7, 2): [
            (9, 0, 9, 0, 4, 4, 9), (9, 2, 9, 0, 4, 4, 9), (9, 4, 9, 4, 4, 4, 9),
            (7, 6, 9, 4, 4, 4, 9), (5, 8, 9, 8, 4, 4, 9), (3, 10, 9, 8, 4, 4, 9),
            (1, 12, 9, 12, 4, 4, 9), (0, 0, 9, 12, 4, 4, 9)],
        (13, 0, 8, 7, 4): [
            (9, 0, 9, 0, 8, 8, 9), (9, 2, 9, 0, 8, 8, 9), (9, 4, 9, 0, 8, 8, 9),
            (7, 6, 9, 0, 8, 8, 9), (5, 8, 9, 8, 8, 8, 9), (3, 10, 9, 8, 8, 8, 9),
            (1, 12, 9, 8, 8, 8, 9), (0, 0, 9, 8, 8, 8, 9)],
        (13, 0, 8, 7, 8): [
            (9, 0, 9, 0, 16, 16, 9), (9, 2, 9, 0, 16, 16, 9), (9, 4, 9, 0, 16, 16, 9),
            (7, 6, 9, 0, 16, 16, 9), (5, 8, 9, 0, 16, 16, 9), (3, 10, 9, 0, 16, 16, 9),
            (1, 12, 9, 0, 16, 16, 9), (0, 0, 9, 0, 16, 16, 9)],
        (100, 0, 2, 1, 1): [
            (51, 0, 51, 0, 50, 50, 51), (50, 50, 51, 50, 50, 50, 51)],
        (100, 0, 2, 1, 2): [
            (51, 0, 51, 0, 100, 100, 51), (50, 50, 51, 0, 100, 100, 51)],
        (100, 0, 2, 7, 1): [
            (57, 0, 57, 0, 50, 50, 57), (50, 50, 57, 50, 50, 50, 57)],
        (100, 0, 2, 7, 2): [
            (57, 0, 57, 0, 100, 100, 57), (50, 50, 57, 0, 100, 100, 57)],
        (100, 0, 4, 1, 1): [
            (26, 0, 26, 0, 25, 25, 26), (26, 25, 26, 25, 25, 25, 26), (26, 50, 26, 50, 25, 25, 26),
            (25, 75, 26, 75, 25, 25, 26)],
        (100, 0, 4, 1, 2): [
            (26, 0, 26, 0, 50, 50, 26), (26, 25, 26, 0, 50, 50, 26), (26, 50, 26, 50, 50, 50, 26),
            (25, 75, 26, 50, 50, 50, 26)],
        (100, 0, 4, 1, 4): [
            (26, 0, 26, 0, 100, 100, 26), (26, 25, 26, 0, 100, 100, 26),
            (26, 50, 26, 0, 100, 100, 26), (25, 75, 26, 0, 100, 100, 26)],
        (100, 0, 4, 7, 1): [
            (32, 0, 32, 0, 25, 25, 32), (32, 25, 32, 25, 25, 25, 32), (32, 50, 32, 50, 25, 25, 32),
            (25, 75, 32, 75, 25, 25, 32)],
        (100, 0, 4, 7, 2): [
            (32, 0, 32, 0, 50, 50, 32), (32, 25, 32, 0, 50, 50, 32), (32, 50, 32, 50, 50, 50, 32),
            (25, 75, 32, 50, 50, 50, 32)],
        (100, 0, 4, 7, 4): [
            (32, 0, 32, 0, 100, 100, 32), (32, 25, 32, 0, 100, 100, 32),
            (32, 50, 32, 0, 100, 100, 32), (25, 75, 32, 0, 100, 100, 32)],
        (100, 0, 8, 1, 1): [
            (14, 0, 14, 0, 13, 13, 14), (14, 13, 14, 13, 13, 13, 14), (14, 26, 14, 26, 13, 13, 14),
            (14, 39, 14, 39, 13, 13, 14), (14, 52, 14, 52, 13, 13, 14),
            (14, 65, 14, 65, 13, 13, 14), (14, 78, 14, 78, 13, 13, 14),
            (9, 91, 14, 91, 13, 13, 14)],
        (100, 0, 8, 1, 2): [
            (14, 0, 14, 0, 26, 26, 14), (14, 13, 14, 0, 26, 26, 14), (14, 26, 14, 26, 26, 26, 14),
            (14, 39, 14, 26, 26, 26, 14), (14, 52, 14, 52, 26, 26, 14),
            (14, 65, 14, 52, 26, 26, 14), (14, 78, 14, 78, 26, 26, 14),
            (9, 91, 14, 78, 26, 26, 14)],
        (100, 0, 8, 1, 4): [
            (14, 0, 14, 0, 52, 52, 14), (14, 13, 14, 0, 52, 52, 14), (14, 26, 14, 0, 52, 52, 14),
            (14, 39, 14, 0, 52, 52, 14), (14, 52, 14, 52, 52, 52, 14),
            (14, 65, 14, 52, 52, 52, 14), (14, 78, 14, 52, 52, 52, 14),
            (9, 91, 14, 52, 52, 52, 14)],
        (100, 0, 8, 1, 8): [
            (14, 0, 14, 0, 104, 104, 14), (14, 13, 14, 0, 104, 104, 14),
            (14, 26, 14, 0, 104, 104, 14), (14, 39, 14, 0, 104, 104, 14),
            (14, 52, 14, 0, 104, 104, 14), (14, 65, 14, 0, 104, 104, 14),
            (14, 78, 14, 0, 104, 104, 14), (9, 91, 14, 0, 104, 104, 14)],
        (100, 0, 8, 7, 1): [
            (20, 0, 20, 0, 13, 13, 20), (20, 13, 20, 13, 13, 13, 20), (20, 26, 20, 26, 13, 13, 20),
            (20, 39, 20, 39, 13, 13, 20), (20, 52, 20, 52, 13, 13, 20),
            (20, 65, 20, 65, 13, 13, 20), (20, 78, 20, 78, 13, 13, 20),
            (9, 91, 20, 91, 13, 13, 20)],
        (100, 0, 8, 7, 2): [
            (20, 0, 20, 0, 26, 26, 20), (20, 13, 20, 0, 26, 26, 20), (20, 26, 20, 26, 26, 26, 20),
            (20, 39, 20, 26, 26, 26, 20), (20, 52, 20, 52, 26, 26, 20),
            (20, 65, 20, 52, 26, 26, 20), (20, 78, 20, 78, 26, 26, 20),
            (9, 91, 20, 78, 26, 26, 20)],
        (100, 0, 8, 7, 4): [
            (20, 0, 20, 0, 52, 52, 20), (20, 13, 20, 0, 52, 52, 20), (20, 26, 20, 0, 52, 52, 20),
            (20, 39, 20, 0, 52, 52, 20), (20, 52, 20, 52, 52, 52, 20),
            (20, 65, 20, 52, 52, 52, 20), (20, 78, 20, 52, 52, 52, 20),
            (9, 91, 20, 52, 52, 52, 20)],
        (100, 0, 8, 7, 8): [
            (20, 0, 20, 0, 104, 104, 20), (20, 13, 20, 0, 104, 104, 20),
            (20, 26, 20, 0, 104, 104, 20), (20, 39, 20, 0, 104, 104, 20),
            (20, 52, 20, 0, 104, 104, 20), (20, 65, 20, 0, 104, 104, 20),
            (20, 78, 20, 0, 104, 104, 20), (9, 91, 20, 0, 104, 104, 20)],
    },
    # vllm-project/speculators#871 head 49c8aac7404f470df1ec57df38d52b2cc05f9c4e:
    # src/speculators/train/sequence_parallel.py: split_batch_for_sp
    # (L, max_len, N, ttt_length, ulysses_size): per rank (rows read, first row, pad_to,
    #   first position, positions, position_ids length, batch length)
    'speculators': {
        (0, 0, 2, 0, 0): [
            (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0)],
        (0, 0, 4, 0, 0): [
            (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0),
            (0, 0, 0, 0, 0, 0, 0)],
        (0, 0, 8, 0, 0): [
            (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0),
            (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0),
            (0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0)],
        (1, 0, 2, 0, 0): [
            'refused', 'refused'],
        (1, 0, 4, 0, 0): [
            'refused', 'refused', 'refused', 'refused'],
        (1, 0, 8, 0, 0): [
            'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused'],
        (2, 0, 2, 0, 0): [
            (1, 0, 1, 0, 0, 0, 1), (1, 1, 1, 0, 0, 0, 1)],
        (2, 0, 4, 0, 0): [
            'refused', 'refused', 'refused', 'refused'],
        (2, 0, 8, 0, 0): [
            'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused'],
        (3, 0, 2, 0, 0): [
            'refused', 'refused'],
        (3, 0, 4, 0, 0): [
            'refused', 'refused', 'refused', 'refused'],
        (3, 0, 8, 0, 0): [
            'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused'],
        (4, 0, 2, 0, 0): [
            (2, 0, 2, 0, 0, 0, 2), (2, 2, 2, 0, 0, 0, 2)],
        (4, 0, 4, 0, 0): [
            (1, 0, 1, 0, 0, 0, 1), (1, 1, 1, 0, 0, 0, 1), (1, 2, 1, 0, 0, 0, 1),
            (1, 3, 1, 0, 0, 0, 1)],
        (4, 0, 8, 0, 0): [
            'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused'],
        (6, 0, 2, 0, 0): [
            (3, 0, 3, 0, 0, 0, 3), (3, 3, 3, 0, 0, 0, 3)],
        (6, 0, 4, 0, 0): [
            'refused', 'refused', 'refused', 'refused'],
        (6, 0, 8, 0, 0): [
            'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused'],
        (7, 0, 2, 0, 0): [
            'refused', 'refused'],
        (7, 0, 4, 0, 0): [
            'refused', 'refused', 'refused', 'refused'],
        (7, 0, 8, 0, 0): [
            'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused'],
        (8, 0, 2, 0, 0): [
            (4, 0, 4, 0, 0, 0, 4), (4, 4, 4, 0, 0, 0, 4)],
        (8, 0, 4, 0, 0): [
            (2, 0, 2, 0, 0, 0, 2), (2, 2, 2, 0, 0, 0, 2), (2, 4, 2, 0, 0, 0, 2),
            (2, 6, 2, 0, 0, 0, 2)],
        (8, 0, 8, 0, 0): [
            (1, 0, 1, 0, 0, 0, 1), (1, 1, 1, 0, 0, 0, 1), (1, 2, 1, 0, 0, 0, 1),
            (1, 3, 1, 0, 0, 0, 1), (1, 4, 1, 0, 0, 0, 1), (1, 5, 1, 0, 0, 0, 1),
            (1, 6, 1, 0, 0, 0, 1), (1, 7, 1, 0, 0, 0, 1)],
        (10, 0, 2, 0, 0): [
            (5, 0, 5, 0, 0, 0, 5), (5, 5, 5, 0, 0, 0, 5)],
        (10, 0, 4, 0, 0): [
            'refused', 'refused', 'refused', 'refused'],
        (10, 0, 8, 0, 0): [
            'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused'],
        (12, 0, 2, 0, 0): [
            (6, 0, 6, 0, 0, 0, 6), (6, 6, 6, 0, 0, 0, 6)],
        (12, 0, 4, 0, 0): [
            (3, 0, 3, 0, 0, 0, 3), (3, 3, 3, 0, 0, 0, 3), (3, 6, 3, 0, 0, 0, 3),
            (3, 9, 3, 0, 0, 0, 3)],
        (12, 0, 8, 0, 0): [
            'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused'],
        (16, 0, 2, 0, 0): [
            (8, 0, 8, 0, 0, 0, 8), (8, 8, 8, 0, 0, 0, 8)],
        (16, 0, 4, 0, 0): [
            (4, 0, 4, 0, 0, 0, 4), (4, 4, 4, 0, 0, 0, 4), (4, 8, 4, 0, 0, 0, 4),
            (4, 12, 4, 0, 0, 0, 4)],
        (16, 0, 8, 0, 0): [
            (2, 0, 2, 0, 0, 0, 2), (2, 2, 2, 0, 0, 0, 2), (2, 4, 2, 0, 0, 0, 2),
            (2, 6, 2, 0, 0, 0, 2), (2, 8, 2, 0, 0, 0, 2), (2, 10, 2, 0, 0, 0, 2),
            (2, 12, 2, 0, 0, 0, 2), (2, 14, 2, 0, 0, 0, 2)],
        (24, 0, 2, 0, 0): [
            (12, 0, 12, 0, 0, 0, 12), (12, 12, 12, 0, 0, 0, 12)],
        (24, 0, 4, 0, 0): [
            (6, 0, 6, 0, 0, 0, 6), (6, 6, 6, 0, 0, 0, 6), (6, 12, 6, 0, 0, 0, 6),
            (6, 18, 6, 0, 0, 0, 6)],
        (24, 0, 8, 0, 0): [
            (3, 0, 3, 0, 0, 0, 3), (3, 3, 3, 0, 0, 0, 3), (3, 6, 3, 0, 0, 0, 3),
            (3, 9, 3, 0, 0, 0, 3), (3, 12, 3, 0, 0, 0, 3), (3, 15, 3, 0, 0, 0, 3),
            (3, 18, 3, 0, 0, 0, 3), (3, 21, 3, 0, 0, 0, 3)],
        (30, 0, 2, 0, 0): [
            (15, 0, 15, 0, 0, 0, 15), (15, 15, 15, 0, 0, 0, 15)],
        (30, 0, 4, 0, 0): [
            'refused', 'refused', 'refused', 'refused'],
        (30, 0, 8, 0, 0): [
            'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused', 'refused'],
        (64, 0, 2, 0, 0): [
            (32, 0, 32, 0, 0, 0, 32), (32, 32, 32, 0, 0, 0, 32)],
        (64, 0, 4, 0, 0): [
            (16, 0, 16, 0, 0, 0, 16), (16, 16, 16, 0, 0, 0, 16), (16, 32, 16, 0, 0, 0, 16),
            (16, 48, 16, 0, 0, 0, 16)],
        (64, 0, 8, 0, 0): [
            (8, 0, 8, 0, 0, 0, 8), (8, 8, 8, 0, 0, 0, 8), (8, 16, 8, 0, 0, 0, 8),
            (8, 24, 8, 0, 0, 0, 8), (8, 32, 8, 0, 0, 0, 8), (8, 40, 8, 0, 0, 0, 8),
            (8, 48, 8, 0, 0, 0, 8), (8, 56, 8, 0, 0, 0, 8)],
    },
}
# END GOLDEN

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
