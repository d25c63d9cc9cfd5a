"""libshard.Writer's queue is bounded by what queued samples hold, not by their bytes alone:
10^5 tiny samples (two small int64 tensors each) write under a low address-space limit
(RLIMIT_AS, as `ulimit -v` on a shared cluster sets it), and the address space stays flat.

Before the bound counted each sample's buffer, every queued tiny sample held a 1 MiB writer
buffer while counting its 112 bytes: address space grew by gigabytes with the samples queued and
the write failed with "cannot allocate 112 bytes for the sample".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import libshard

# What the child may add to the address space it had after importing torch and libshard: the
# encode and commit threads (stacks, malloc arenas), the index of 10^5 samples, the keys. The
# unbounded queue needed several GiB more.
_HEADROOM = 1 << 30

_CHILD = textwrap.dedent("""
    import json, os, resource, sys
    import torch, libshard

    def vm_kib():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1])

    out, n, headroom = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    base = vm_kib() * 1024
    resource.setrlimit(resource.RLIMIT_AS, (base + headroom, base + headroom))
    peak = base
    with libshard.Writer(out, fsync=False) as w:
        for i in range(n):
            w.write({"input_ids": torch.arange(6, dtype=torch.int64) + i,
                     "loss_mask": torch.ones(8, dtype=torch.int64)}, key=f"s{i:06d}")
            if i % 5000 == 0:
                peak = max(peak, vm_kib() * 1024)
    peak = max(peak, vm_kib() * 1024)
    print(json.dumps({"base": base, "peak": peak, "samples": w.summary["samples"]}))
""")


def test_tiny_samples_write_under_a_low_address_space_limit(tmp_path):
    n = 100_000
    out = tmp_path / "tiny"
    r = subprocess.run([sys.executable, "-c", _CHILD, str(out), str(n), str(_HEADROOM)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"the writer failed under RLIMIT_AS:\n{r.stdout}\n{r.stderr[-3000:]}"
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["samples"] == n
    # Flat: well inside the limit, not pressed against it.
    assert got["peak"] - got["base"] < _HEADROOM // 2, got
    ds = libshard.open(str(out))
    assert len(ds) == n
    for i in (0, 1, n // 2, n - 1):
        s = ds[i]
        assert ds.source(i) == f"s{i:06d}"
        assert s["input_ids"].tolist() == [i + k for k in range(6)]
        assert s["loss_mask"].tolist() == [1] * 8
