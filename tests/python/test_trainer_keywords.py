"""The dataset and loader constructors of the trainer modules (``libshard.specforge`` /
``.speculators`` / ``.modelopt`` / ``.automodel``) with each of their keywords and with all of
them, on the datasets of test_public_keywords.py (closed, and being written; local and
``s3://``): each call serves or raises an error the docs name, never another exception. The
keywords and their values are test_public_keywords.py's (TRAINER_ENTRIES, whose completeness it
checks without the trainers). Run with the trainers' environment (tests/python/trainers_util.py);
a trainer that is not installed skips its module."""

from __future__ import annotations

import importlib
import inspect

import pytest

from test_public_keywords import (TRAINER_ENTRIES, TRAINER_REQUIRED, Outcomes, _signature,
                                  _value, contexts, local, s3)  # noqa: F401 - fixtures


@pytest.mark.parametrize("module", sorted(TRAINER_ENTRIES))
def test_trainer_entry_point_keywords(module, request):
    """Each entry point of `module` with each keyword alone and with all of them, on the closed
    datasets (local and s3://) and the one being written (none of them follows a write): served
    or a libshard error the docs name (a missing field is an InvalidArgumentError, also the
    KeyError the trainers' readers raise), never a bare KeyError or another exception."""
    try:
        mod = importlib.import_module(f"libshard.{module}")
    except ImportError as e:
        pytest.skip(f"libshard.{module} needs its trainer ({e}); run with "
                    ".venv-trainers/bin/python (scripts/test.sh does)")
    out = Outcomes()
    local, s3 = request.getfixturevalue("local"), request.getfixturevalue("s3")  # once importable
    ctxs = [c for c in contexts(local, s3) if not c.follow and not c.order]
    for name, table in TRAINER_ENTRIES[module].items():
        fn = getattr(mod, name)
        names = [p.name for p in _signature(fn)]
        base = {k: table[k] for k in TRAINER_REQUIRED.get(name, [])}
        calls = [base] + [{**base, k: table[k]} for k in names if k not in base] + \
            [{k: table[k] for k in names}]
        for ctx in ctxs:
            for kw in calls:
                what = f"libshard.{module}.{name}({ctx}, {sorted(kw)})"
                kwargs = {k: _value(v, ctx) for k, v in kw.items()}
                if "path" in inspect.signature(fn).parameters:
                    kwargs["path"] = ctx.path
                    out.run(what, lambda: fn(**kwargs))
                else:
                    out.run(what, lambda: fn(ctx.path, **kwargs))
    # Their datasets' fields are not these; test_trainer_*.py check what they serve.
    out.check(served=False)
