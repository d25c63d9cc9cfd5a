"""Helpers shared by the Python benchmarks in bench/ (imported as `benchlib`: each script runs as
`python3 bench/NAME.py`, which puts bench/ first on sys.path)."""
from __future__ import annotations

import subprocess


def drop_caches() -> bool:
    """Writes back dirty pages and drops the page cache; False when not allowed (not root)."""
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False
