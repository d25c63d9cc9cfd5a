"""LIBSHARD_PLANES_KERNEL (codec/plane_kernel_select.h): sse2 and auto decode bit-exact; avx2
decodes bit-exact where the CPU has AVX2 and is otherwise an error naming the variable and the
missing feature (never SIGILL); an unknown value is an error listing the choices. Each setting
runs in a child process (the variable is read once per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import torch

import libshard
from conftest import _cli

_CHILD = textwrap.dedent("""
    import json, sys
    import torch, libshard
    try:
        ds = libshard.open(sys.argv[1])
        got = [ds[i]["hidden_state"].view(torch.int16).flatten().tolist() for i in range(len(ds))]
        print(json.dumps({"ok": got}))
    except Exception as e:
        print(json.dumps({"error": type(e).__name__, "message": str(e),
                          "value_error": isinstance(e, ValueError)}))
""")


def _cpu_has_avx2() -> bool:
    # The kernel also needs the OS to save the YMM registers; Linux does wherever it lists avx2.
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx2" in line for line in f)
    except OSError:
        return False


def _read(path, setting):
    env = dict(os.environ, LIBSHARD_PLANES_KERNEL=setting)
    r = subprocess.run([sys.executable, "-c", _CHILD, str(path)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, f"LIBSHARD_PLANES_KERNEL={setting}: rc {r.returncode}\n{r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_plane_kernel_setting(tmp_path):
    gen = torch.Generator().manual_seed(3)
    want = []
    out = tmp_path / "planes2"
    with libshard.Writer(out, compress="planes2", fsync=False) as w:
        for i in range(4):
            # Rows of 96 elements (the channel base is used); any bf16 bits round-trip.
            hs = torch.randint(-2**15, 2**15, (1, 40 + 7 * i, 96), generator=gen,
                               dtype=torch.int16).view(torch.bfloat16)
            w.write({"hidden_state": hs}, key=f"s{i}")
            want.append(hs.view(torch.int16).flatten().tolist())
    info = json.loads(subprocess.run([_cli(), "info", str(out), "--json"], capture_output=True,
                                     text=True, check=True).stdout)
    assert info["schema"]["fields"][0]["codec"] == "planes2"  # codec 5: the fused kernel

    for setting in ("sse2", "auto", ""):
        assert _read(out, setting) == {"ok": want}, setting

    got = _read(out, "avx2")
    if _cpu_has_avx2():
        assert got == {"ok": want}
    else:
        assert got["error"] == "UnsupportedError" and got["value_error"], got
        assert "LIBSHARD_PLANES_KERNEL=avx2" in got["message"] and "AVX2" in got["message"], got

    # A word the variables' table refuses: refused where the dataset is opened, as every entry
    # point refuses a bad LIBSHARD_* variable (docs/guide/environment.md).
    got = _read(out, "avx-512")
    assert got.get("error") == "InvalidArgumentError" and got["value_error"], got
    assert "environment variable 'LIBSHARD_PLANES_KERNEL' = 'avx-512'" in got["message"], got
    assert "auto, sse2, avx2" in got["message"], got
