"""The ``libshard`` console script of the Python package ([project.scripts] in pyproject.toml).

It runs the C++ command line (``converters/cli``, the code of the CMake build's ``libshard``
executable) inside the extension, ``libshard._core.cli_main``, so a wheel carries one native module
and the command needs nothing outside it. This module sits beside the package, not in it: it loads
the extension without running ``libshard/__init__.py``, which imports torch (seconds of start-up,
and torch is not a pip dependency), since the command line is C++ only.

Output, exit codes (0 ok, 1 failure, 2 usage) and signals behave as the executable's: Python's own
SIGINT handler, and the SIGPIPE and SIGXFSZ it ignores, are set back to the defaults first, so
Ctrl-C stops a long ``pack`` at once (exit by SIGINT) and ``libshard info ... | head`` ends as it
does for the executable.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import signal
import sys
from types import ModuleType
from typing import Optional, Sequence


def load_core() -> ModuleType:
    """``libshard._core``, loaded from the installed package without importing the package."""
    core = sys.modules.get("libshard._core")
    if core is not None:
        return core
    spec = importlib.util.find_spec("libshard")  # finds, does not run, libshard/__init__.py
    for directory in (spec.submodule_search_locations or []) if spec else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(directory, "_core" + suffix)
            if os.path.isfile(path):
                loader = importlib.machinery.ExtensionFileLoader("libshard._core", path)
                core_spec = importlib.util.spec_from_file_location("libshard._core", path,
                                                                   loader=loader)
                core = importlib.util.module_from_spec(core_spec)
                loader.exec_module(core)
                return core
    raise SystemExit("libshard: the libshard package's extension (libshard/_core*.so) is not "
                     "installed for this Python; reinstall the libshard wheel")


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Runs ``libshard`` with ``argv`` (default ``sys.argv``) and exits with its exit code."""
    for name in ("SIGINT", "SIGPIPE", "SIGXFSZ"):
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, signal.SIG_DFL)
    sys.exit(load_core().cli_main(list(sys.argv if argv is None else argv)))


if __name__ == "__main__":
    main()
