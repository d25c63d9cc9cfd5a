"""The trainer integrations are optional: `import libshard` imports no trainer, and importing an
integration without its trainer says what to install (pyproject's extras never pull torch,
sglang or vllm). Runs under any interpreter; the trainers are hidden in a child process."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TRAINERS = ("specforge", "speculators", "hs_connectors", "modelopt", "transformers", "sglang",
            "vllm", "nemo_automodel")


def _child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_import_libshard_imports_no_trainer():
    r = _child("import sys, libshard\n"
               f"bad = [m for m in sys.modules if m.split('.')[0] in {TRAINERS!r}]\n"
               "assert not bad, bad\n")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("module,trainer", [("libshard.specforge", "specforge"),
                                            ("libshard.speculators", "hs_connectors"),
                                            ("libshard.modelopt", "modelopt"),
                                            ("libshard.automodel", "nemo_automodel")])
def test_integration_without_its_trainer_says_what_to_install(module, trainer):
    # A meta-path finder that refuses the trainer, as if it were not installed.
    code = (
        "import sys, importlib.abc\n"
        "class Hide(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] == {trainer!r}:\n"
        "            raise ImportError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, Hide())\n"
        "try:\n"
        f"    import {module}\n"
        "except ImportError as e:\n"
        "    print(e)\n"
        "else:\n"
        "    raise SystemExit('imported')\n")
    r = _child(code)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "pip install" in r.stdout and f"libshard[{module.split('.')[1]}]" in r.stdout, r.stdout


def test_extras_never_pull_torch_sglang_or_vllm():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for name in ("specforge", "speculators", "modelopt", "automodel"):
        assert name in extras, name
        for req in extras[name]:
            base = req.split(";")[0].split("[")[0]
            for sep in "<>=!~ ":
                base = base.split(sep)[0]
            assert base.lower() not in ("torch", "sglang", "vllm", "torchvision", "torchaudio",
                                        "specforge", "speculators", "nvidia-modelopt",
                                        "accelerate"), (name, req)
