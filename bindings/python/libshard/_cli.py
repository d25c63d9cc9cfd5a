"""The ``libshard`` console script of the Python package ([project.scripts] in pyproject.toml).

It runs the C++ command line (``converters/cli``, the code of the CMake build's ``libshard``
executable) inside the extension, ``libshard._core.cli_main``, so a wheel carries one native module
and the command needs nothing outside it. Output, exit codes (0 ok, 1 failure, 2 usage) and signals
behave as the executable's: Python's own SIGINT handler, and the SIGPIPE and SIGXFSZ it ignores, are
set back to the defaults first, so Ctrl-C stops a long ``pack`` at once (exit by SIGINT) and
``libshard info ... | head`` ends quietly, as they do for the executable.
"""

from __future__ import annotations

import signal
import sys
from typing import Optional, Sequence


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Runs ``libshard`` with ``argv`` (default ``sys.argv``) and exits with its exit code."""
    for name in ("SIGINT", "SIGPIPE", "SIGXFSZ"):
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, signal.SIG_DFL)
    from . import _core

    sys.exit(_core.cli_main(list(sys.argv if argv is None else argv)))


if __name__ == "__main__":
    main()
