"""Every public keyword of ``libshard.open``, ``libshard.Loader``, the factories of
``libshard.Order`` and the dataset and loader constructors of the trainer modules
(``libshard.specforge`` / ``.speculators`` / ``.modelopt`` / ``.automodel``), in combination with
follow mode (a dataset whose ``libshard.Writer`` is still open, and one it closed), ``s3://``
datasets and the node-local order, and with every other keyword (pairwise).

Each call gives samples or an error the docs name (docs/guide/hostile-input.md#errors: a
``libshard.Error``, which is also the built-in ``ValueError`` / ``FileNotFoundError`` / ``OSError``
/ ``MemoryError`` / ``FileExistsError`` it stands for; ``InternalError`` is "a libshard bug", so
it fails here too), never another exception: ``Loader(path, follow=True, expect={...})`` on a
closed dataset once raised a ``TypeError`` from ``_core.Dataset.open`` because no test combined
those keywords. tests/python/test_follow_keywords.py checks what follow mode serves with the
dataset keywords in each state of a write; this file checks that no combination of any keyword
escapes the documented errors.

The keywords are read from the signatures (``inspect.signature``; the trainer modules' from
their source, so the check runs without the trainers' packages), so a new keyword is included
at once, and fails :func:`test_every_keyword_has_a_value` until the tables below give it a
value. The calls of the trainer modules are in test_trainer_keywords.py (the trainers'
environment runs them: scripts/test.sh)."""

from __future__ import annotations

import ast
import inspect
import itertools
import threading
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest
import torch

import libshard

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "bindings" / "python" / "libshard"
ATTRS = {"target_model": "org/model", "hidden_size": 8}
N = 6
BUCKET = "libshard-keywords"


class Ctx:
    """Where a call runs: the dataset (its path or URL and its state), follow or not, an order."""

    def __init__(self, name: str, path: str, *, complete: bool, follow: bool,
                 order: Dict[str, Any], cache: Path) -> None:
        self.name, self.path, self.complete, self.follow = name, path, complete, follow
        self.order, self.cache = order, cache

    def __repr__(self) -> str:
        return self.name


def _sample(i: int) -> Dict[str, Any]:
    return {"input_ids": torch.arange(i, i + 3 + i % 3), "ident": torch.tensor([i]), "sid": i}


def _write(out: str, *, close: bool) -> libshard.Writer:
    w = libshard.Writer(out, attrs=ATTRS, commit_interval=0.01, fsync=False)
    for i in range(N):
        w.write(_sample(i), key=f"s{i}")
    if close:
        w.close()
    else:
        w.flush()  # journaled: what a follower sees of a write in progress
    return w


#: The value of a `cache=` keyword: the context's cache directory.
CACHE = object()

# A value per keyword, valid on its own for the datasets of this file.
# Values that conflict in a combination (``order`` and ``shuffle``, ``follow`` and ``sampler``,
# ``expect`` on a dataset still being written) must give a documented error, never another one.
LOADER_VALUES: Dict[str, Any] = {
    "batch_size": 2,
    "order": libshard.Order.unshuffled(),
    "shuffle": False,
    "seed": 7,
    "rank": 0,
    "world_size": 2,
    "drop_last": True,
    "locality": "node",
    "nodes": 1,
    "node_rank": 0,
    "fields": ["input_ids", "ident"],
    "max_len": 3,
    "max_tokens": 16,
    "collate": "pad",
    "bucket_window": 4,
    "token_budget": "padded",
    "oversized": "error",
    "padding_value": -1,
    "padding_values": {"input_ids": 0},
    "recipe_len": 8,
    "memory_budget": "64MiB",
    "verify": False,
    "on_error": "skip",
    "return_index": True,
    "device": "cpu",
    "metadata": False,
    "queue_depth": 8,
    "read_size": "1MiB",
    "engine": "pread",
    "io_mode": "buffered",
    "pin_memory": False,
    "worker_threads": 2,
    "slow_wait_warning_seconds": 30.0,
    "stats_interval_seconds": 60.0,
    "expect": ATTRS,
    "follow": True,
    "shuffle_window": 4,
    "cache": CACHE,
    "cache_size": "1GiB",
    "sampler": torch.utils.data.SequentialSampler(range(4)),
    "batch_sampler": torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(4)),
                                                   2, False),
    "sequence_parallel": 2,
    "sp_rule": "specforge-usp",
}
# More values of some keywords, each tried in every context (the first one above is the one
# paired with every other keyword).
LOADER_MORE: Dict[str, List[Any]] = {
    "collate": ["pack", libshard.pad_collate, libshard.pack_collate, lambda s: len(s), "none"],
    "order": [2, libshard.Order.shuffled(seed=1, version=1),
              libshard.Order.node_local(nodes=1, node_rank=0, seed=3, shuffle=True),
              libshard.Order.follow(shuffle_window=4, seed=2, shuffle=True, version=2),
              libshard.Order.sampler(torch.utils.data.SequentialSampler(range(4))),
              libshard.Order.batch_sampler([[0, 1], [2]])],
    "expect": [{}, None, {"target_model": "org/model"}],
    "bucket_window": ["auto", None, 0],
    "verify": [True, None],
    "token_budget": ["sum", "auto"],
    "sequence_parallel": [libshard.SequenceParallel(2, rule="torchspec-usp", ttt_length=1), 1,
                          None],
}
# Keywords that apply only beside others (the library refuses them alone, naming them): called
# with these too, so that the value is used.
LOADER_NEEDS: Dict[str, Dict[str, Any]] = {
    "padding_value": {"collate": "pad", "batch_size": 2},
    "padding_values": {"collate": "pad", "batch_size": 2},
    "recipe_len": {"collate": "specforge-eagle3", "batch_size": 2},  # refused: no loss_mask
    "nodes": {"locality": "node"},
    "sequence_parallel": {"world_size": 2},  # a group of 2 ranks, this one rank 0
    "sp_rule": {"sequence_parallel": 2, "world_size": 2},
    "node_rank": {"locality": "node"},
}


def _with_needs(kw: Dict[str, Any]) -> Dict[str, Any]:
    """`kw` with the keywords its keywords apply beside (kw's own values win)."""
    out: Dict[str, Any] = {}
    for k in kw:
        out.update(LOADER_NEEDS.get(k, {}))
    out.update(kw)
    return out


OPEN_VALUES: Dict[str, Any] = {
    "verify": False,
    "metadata": False,
    "cache": CACHE,
    "cache_size": "1GiB",
    "read_ahead": {"memory_budget": "64MiB", "engine": "pread"},
    "follow": True,
}
# The keywords of Order's factories (each factory is called with each of its keywords, then with
# all of them).
ORDER_VALUES: Dict[str, Any] = {
    "seed": 3,
    "version": 1,
    "nodes": 1,
    "node_rank": 0,
    "shuffle": False,
    "shuffle_window": 4,
    "sampler": torch.utils.data.SequentialSampler(range(4)),
    "batch_sampler": [[0, 1], [2, 3]],
}
# Given by the context, not by a table: the dataset.
POSITIONAL = {"data", "path"}


def _signature(fn: Callable[..., Any]) -> List[inspect.Parameter]:
    return [p for p in inspect.signature(fn).parameters.values()
            if p.name not in POSITIONAL and p.name != "self"
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _factories() -> Dict[str, Callable[..., libshard.Order]]:
    return {n: getattr(libshard.Order, n) for n, v in vars(libshard.Order).items()
            if isinstance(v, staticmethod) and not n.startswith("_")}


def _value(v: Any, ctx: Ctx) -> Any:
    return ctx.cache if v is CACHE else v


# ---- the documented errors -----------------------------------------------------------------

def documented(e: BaseException, extra: Tuple[type, ...] = ()) -> bool:
    """An error the docs name: a libshard.Error other than InternalError (a libshard bug)."""
    return (isinstance(e, libshard.Error) and not isinstance(e, libshard.InternalError)) or \
        isinstance(e, extra)


class Outcomes:
    """What the calls of one test gave: successes, documented errors, and the failures (another
    exception, or a call that hung), each named by its call."""

    def __init__(self) -> None:
        self.ok = 0
        self.errors = 0
        self.failures: List[str] = []

    def run(self, what: str, call: Callable[[], Any], extra: Tuple[type, ...] = ()) -> bool:
        try:
            call()
        except BaseException as e:  # noqa: BLE001 - every exception is judged here
            if documented(e, extra):
                self.errors += 1
                return False
            self.failures.append(f"{what}: {type(e).__name__}: {e}")
            return False
        self.ok += 1
        return True

    def check(self, served: bool = True) -> None:
        assert not self.failures, f"{len(self.failures)} undocumented outcome(s):\n" + \
            "\n".join(self.failures[:40])
        assert self.ok or not served, "no call served: the table's values do not apply here"


# ---- the datasets --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def local(tmp_path_factory) -> Iterator[Dict[str, str]]:
    """A closed dataset and one whose Writer is still open (samples committed)."""
    root = tmp_path_factory.mktemp("kw")
    _write(str(root / "closed"), close=True)
    w = _write(str(root / "writing"), close=False)
    yield {"closed": str(root / "closed"), "writing": str(root / "writing"),
           "cache": str(root / "cache")}
    w.abort()


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Iterator[Optional[Dict[str, str]]]:
    """The same over s3:// (moto on 127.0.0.1, tests/python/s3_server.py), or None without moto:
    the s3:// contexts are then left out and said so."""
    try:
        import boto3  # noqa: F401
        from s3_server import MotoServer, apply_env, s3_env
        server = MotoServer()
    except (ImportError, RuntimeError):
        yield None
        return
    root = tmp_path_factory.mktemp("kw_s3")
    mp = pytest.MonkeyPatch()
    writer = None
    try:
        server.s3().create_bucket(Bucket=BUCKET)
        apply_env(mp, s3_env(server.endpoint, server.access_key, server.secret_key,
                             LIBSHARD_S3_STAGING=str(root / "staging"),
                             LIBSHARD_CACHE_DIR=str(root / "cache")))
        _write(f"s3://{BUCKET}/closed", close=True)
        writer = _write(f"s3://{BUCKET}/writing", close=False)
        yield {"closed": f"s3://{BUCKET}/closed", "writing": f"s3://{BUCKET}/writing",
               "cache": str(root / "cache2")}
    finally:
        if writer is not None:
            writer.abort()
        mp.undo()
        server.stop()


NODE_LOCAL = {"order": libshard.Order.node_local(nodes=1, seed=5)}


def contexts(local, s3) -> List[Ctx]:
    """Every dataset state x follow x order: the local closed dataset plain and followed, the
    one being written followed and not, the same over s3://; each with the default order and
    the node-local one."""
    out: List[Ctx] = []
    places = [("local", local)] + ([("s3", s3)] if s3 else [])
    for (where, p), (state, complete), follow, (oname, order) in itertools.product(
            places, [("closed", True), ("writing", False)], [False, True],
            [("", {}), ("+node_local", NODE_LOCAL)]):
        name = f"{where}-{state}{'+follow' if follow else ''}{oname}"
        out.append(Ctx(name, p[state], complete=complete, follow=follow, order=order,
                       cache=Path(p["cache"])))
    return out


# ---- calls -----------------------------------------------------------------------------------

def _first_step(loader: libshard.Loader, what: str) -> None:
    """One step of the loader, on a thread: a call that hangs fails naming itself."""
    got: List[BaseException] = []

    def step() -> None:
        try:
            next(iter(loader), None)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            got.append(e)
    t = threading.Thread(target=step, daemon=True)
    t.start()
    t.join(30)
    if t.is_alive():
        loader.close()
        raise AssertionError(f"{what}: the first step did not come within 30 s")
    if got:
        raise got[0]


def call_loader(ctx: Ctx, kw: Dict[str, Any], what: str) -> None:
    kwargs: Dict[str, Any] = {**ctx.order, "slow_wait_warning_seconds": 60}
    if ctx.follow:
        kwargs["follow"] = True
    kwargs.update({k: _value(v, ctx) for k, v in kw.items()})
    loader = libshard.Loader(ctx.path, **kwargs)
    try:
        # A step of what is there: a complete dataset, or the committed samples of one being
        # written (a follower of an s3:// write waits for its manifest: not iterated).
        if ctx.complete or (kwargs.get("follow") and not ctx.path.startswith("s3://")):
            _first_step(loader, what)
        loader.state_dict()
    finally:
        loader.close()


def call_open(ctx: Ctx, kw: Dict[str, Any], what: str) -> None:
    kwargs: Dict[str, Any] = {"follow": True} if ctx.follow else {}
    kwargs.update({k: _value(v, ctx) for k, v in kw.items()})
    ds = libshard.open(ctx.path, **kwargs)
    if isinstance(ds, libshard.FollowedDataset):
        ds.check(None)
        if ds.complete:
            ds.check(ATTRS)  # where issue 45's TypeError was
        else:
            with pytest.raises(libshard.InvalidArgumentError, match="being written"):
                ds.check(ATTRS)
    if len(ds):
        ds[0]


# ---- the tables are complete -------------------------------------------------------------------

def _module_entry_points(module: str, names: List[str]) -> Dict[str, List[str]]:
    """The keywords of `names` in a trainer module, read from its source (without importing it:
    the trainers' packages are not needed for this check). A class: its __init__'s."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found: Dict[str, List[str]] = {}
    for node in tree.body:
        fn = node
        if isinstance(node, ast.ClassDef):
            fn = next((f for f in node.body
                       if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        if getattr(node, "name", None) in names and isinstance(fn, ast.FunctionDef):
            a = fn.args
            found[node.name] = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs
                                if p.arg not in POSITIONAL and p.arg != "self"]
    missing = set(names) - set(found)
    assert not missing, f"libshard.{module} has no {sorted(missing)} (TRAINER_ENTRIES is stale)"
    return found


def test_every_keyword_has_a_value():
    """A keyword added to a signature fails here until the tables above give it a value."""
    missing = [f"Loader({p.name}=)" for p in _signature(libshard.Loader.__init__)
               if p.name not in LOADER_VALUES]
    missing += [f"open({p.name}=)" for p in _signature(libshard.open)
                if p.name not in OPEN_VALUES]
    for name, fn in _factories().items():
        missing += [f"Order.{name}({p.name}=)" for p in _signature(fn)
                    if p.name not in ORDER_VALUES]
    for module, entries in TRAINER_ENTRIES.items():
        for name, keywords in _module_entry_points(module, list(entries)).items():
            missing += [f"libshard.{module}.{name}({k}=)" for k in keywords
                        if k not in entries[name]]
    assert not missing, ("keywords without a value in tests/python/test_public_keywords.py "
                         f"(give each one a valid value): {missing}")
    stale = sorted((set(LOADER_VALUES) | set(LOADER_NEEDS))
                   - {p.name for p in _signature(libshard.Loader.__init__)})
    assert not stale, f"LOADER_VALUES names keywords Loader does not take: {stale}"


# ---- Loader -----------------------------------------------------------------------------------

def _loader_keywords() -> List[str]:
    return [p.name for p in _signature(libshard.Loader.__init__)]


def test_loader_without_keywords_in_every_context(local, s3):
    """The baseline: every context serves, except a dataset being written read without follow,
    and follow mode asked for with the node-local order (documented errors)."""
    out = Outcomes()
    for ctx in contexts(local, s3):
        served = out.run(f"Loader({ctx})", lambda: call_loader(ctx, {}, str(ctx)))
        assert served == ((ctx.complete or ctx.follow) and not (ctx.follow and ctx.order)), ctx
    out.check()
    if s3 is None:
        pytest.skip("s3:// contexts left out: no moto_server (scripts/deps.sh installs it)")


@pytest.mark.filterwarnings("ignore:libshard.Loader.*does not split")  # sampler, world_size 2
@pytest.mark.parametrize("keyword", _loader_keywords())
def test_loader_keyword_in_every_context_and_with_every_other(keyword, local, s3):
    """`keyword` (each of its values) in every context, then with every later keyword of the
    signature (pairwise: each pair once), in the local contexts in turn."""
    out = Outcomes()
    values = [LOADER_VALUES[keyword]] + LOADER_MORE.get(keyword, [])
    for ctx in contexts(local, s3):
        for v in values:
            what = f"Loader({ctx}, {keyword}={v!r})"
            out.run(what, lambda: call_loader(ctx, _with_needs({keyword: v}), what))
    names = _loader_keywords()
    local_ctxs = [c for c in contexts(local, None) if c.complete or c.follow]
    for i, other in enumerate(names[names.index(keyword) + 1:]):
        ctx = local_ctxs[(names.index(keyword) + i) % len(local_ctxs)]
        kw = _with_needs({keyword: LOADER_VALUES[keyword], other: LOADER_VALUES[other]})
        what = f"Loader({ctx}, {keyword}=, {other}=)"
        out.run(what, lambda: call_loader(ctx, kw, what))
    out.check()


@pytest.mark.parametrize("factory", sorted(_factories()))
def test_order_factory_keywords_in_every_context(factory, local, s3):
    """Each factory of libshard.Order with each of its keywords, and with all of them, as the
    Loader's order= in every context (without the context's own order)."""
    fn = _factories()[factory]
    keywords = [p.name for p in _signature(fn)]
    required = [p.name for p in _signature(fn) if p.default is inspect.Parameter.empty]
    calls = [{k: ORDER_VALUES[k] for k in required}]
    calls += [{**calls[0], k: ORDER_VALUES[k]} for k in keywords if k not in required]
    calls.append({k: ORDER_VALUES[k] for k in keywords})
    out = Outcomes()
    for ctx in contexts(local, s3):
        if ctx.order:
            continue
        for kw in calls:
            what = f"Loader({ctx}, order=Order.{factory}(**{kw}))"
            order = fn(**kw)
            assert repr(order).startswith("Order.") and order == order and hash(order) == hash(order)
            out.run(what, lambda: call_loader(ctx, {"order": order}, what))
    out.check()


# ---- libshard.open -----------------------------------------------------------------------------

def test_open_keywords_in_every_context_and_pairwise(local, s3):
    """Each keyword of libshard.open alone and with every other one, in every context (the
    order does not apply to a dataset: those contexts are left out)."""
    names = [p.name for p in _signature(libshard.open)]
    combos = [{}] + [{k: OPEN_VALUES[k]} for k in names] + \
        [{a: OPEN_VALUES[a], b: OPEN_VALUES[b]} for a, b in itertools.combinations(names, 2)]
    out = Outcomes()
    for ctx in contexts(local, s3):
        if ctx.order:
            continue
        for kw in combos:
            what = f"open({ctx}, {sorted(kw)})"
            opened = out.run(what, lambda: call_open(ctx, kw, what))
            if not kw:
                # Plain: the closed datasets open; one being written opens only when followed.
                assert opened == (ctx.complete or ctx.follow), what
    out.check()


# ---- the trainer modules ---------------------------------------------------------------------

# The dataset and loader constructors of each trainer module with a value for each keyword (a
# CACHE: the context's). The datasets of this file lack the trainers' fields: each constructor
# must open them and refuse with an InvalidArgumentError naming the field, or serve.
TRAINER_ENTRIES: Dict[str, Dict[str, Dict[str, Any]]] = {
    "specforge": {
        "order": {"cache": CACHE, "cache_size": "1GiB"},
        "refs": {"run_id": "run", "strategy": "eagle3", "target_model_version": "v1",
                 "tokenizer_version": "v1", "feature_keys": ("input_ids",), "ttt_length": 2,
                 "max_len": 8, "target_repr": None, "limit": 2,
                 "cache": CACHE, "cache_size": "1GiB"},
        "FeatureStore": {"store_id": "kw", "verify": False, "cache": CACHE,
                         "cache_size": "1GiB", "read_ahead": {"memory_budget": "64MiB"}},
    },
    "speculators": {
        "LibshardTransfer": {"dequantize_dtype": torch.float32, "verify": False,
                             "cache": CACHE, "cache_size": "1GiB",
                             "read_ahead": {"memory_budget": "64MiB"}},
    },
    "modelopt": {
        "OfflineDataset": {"answer_only_loss": True, "tokenizer": None, "sample_size": 2,
                           "verify": False, "cache": CACHE,
                           "cache_size": "1GiB", "read_ahead": {"memory_budget": "64MiB"}},
        "data_module": {"train_len": 8, "answer_only_loss": True, "tokenizer": None,
                        "sample_size": 2},
    },
    "automodel": {
        "manifest": {},
        "CachedEagle3Dataset": {"verify": False},
        "CachedDSparkDataset": {"verify": False},
        "build_cached_eagle3_dataloader": {"batch_size": 2, "shuffle": False, "num_workers": 0,
                                           "distributed": False},
        "build_cached_dspark_dataloader": {"batch_size": 2, "shuffle": False, "num_workers": 0,
                                           "distributed": False},
    },
}
# Keywords a call needs (no default): passed in every call of that entry point.
TRAINER_REQUIRED = {"data_module": ["train_len"],
                    "build_cached_eagle3_dataloader": ["batch_size", "shuffle"],
                    "build_cached_dspark_dataloader": ["batch_size", "shuffle"]}


# ---- the public branches the coverage report found untested -----------------------------------

def test_followed_dataset_methods_in_each_state(local, tmp_path):
    """FollowedDataset's own methods on a dataset not started, being written and closed: prefetch
    refuses (documented), it pickles as a followed dataset, wait() and its timeout, an index and
    the schema before the first sample, repr."""
    import pickle
    not_started = str(tmp_path / "not-started")
    for path, complete, n in ((not_started, False, 0), (local["writing"], False, N),
                              (local["closed"], True, N)):
        ds = libshard.open(path, follow=True)
        with pytest.raises(libshard.InvalidArgumentError, match="prefetch does not apply"):
            ds.prefetch([0])
        again = pickle.loads(pickle.dumps(ds))
        assert isinstance(again, libshard.FollowedDataset) and len(again) == n
        assert ds.wait(timeout=0.05) == complete
        assert ds.wait(samples=n, timeout=0.05)
        assert f"samples={n}" in repr(ds) and path in repr(ds)
        if n == 0:
            with pytest.raises(IndexError, match="has no sample yet"):
                ds[0]
            with pytest.raises(libshard.NotFoundError, match="no schema yet"):
                ds.schema
        else:
            assert ds.schema.names and int(ds[n - 1]["ident"][0]) == n - 1


def test_loader_data_that_is_no_dataset_and_a_closed_loader(local):
    """Loader(data) of neither a path nor a Dataset (followed or not) is an InvalidArgumentError
    naming the type; a closed Loader says so; `dataset` and repr of each kind of Loader."""
    for follow in (False, True):
        with pytest.raises(libshard.InvalidArgumentError, match="got int"):
            libshard.Loader(3, follow=follow)
    loader = libshard.Loader(local["closed"], batch_size=2)
    assert isinstance(loader.dataset, libshard.Dataset) and "steps_per_epoch=3" in repr(loader)
    loader.close()
    assert "steps_per_epoch=closed" in repr(loader)
    with pytest.raises(libshard.InvalidArgumentError, match="the Loader is closed"):
        loader.state_dict()
    following = libshard.Loader(local["writing"], follow=True)
    assert isinstance(following.dataset, libshard.FollowedDataset)
    assert "unknown (following a write)" in repr(following)
    following.close()


def test_dataset_branches(local):
    """A schema field that is not there (KeyError, as a dict's), rows= that is no window,
    read_ahead_stats before any prefetch, repr."""
    ds = libshard.open(local["closed"])
    with pytest.raises(KeyError):
        ds.schema["absent"]
    with pytest.raises(libshard.InvalidArgumentError, match="rows="):
        ds.read(0, rows=(1, 2, 3))
    assert ds.read_ahead_stats() is None
    assert repr(ds).startswith("libshard.Dataset(") and f"samples={N}" in repr(ds)
