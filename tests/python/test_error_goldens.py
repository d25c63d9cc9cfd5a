"""The main user-facing error messages equal the committed golden file
(tests/python/golden/error_messages.txt, written by scripts/error_goldens.py --update): a change
to a message is then a visible diff in review, made on purpose."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import conftest

SCRIPT = conftest.REPO / "scripts" / "error_goldens.py"


def test_error_messages_equal_the_golden_file():
    if conftest._cli() is None:
        pytest.skip("the libshard command-line tool is not built (its usage errors are golden)")
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                       timeout=600, env=dict(os.environ, LIBSHARD_CLI=conftest._cli()))
    assert r.returncode == 0, (
        "an error message changed; if on purpose, run scripts/error_goldens.py --update and "
        "commit the golden file:\n" + r.stdout[-6000:] + r.stderr[-2000:])
