"""The version has one source, project(VERSION) in CMakeLists.txt: `libshard --version`, the
Python package's __version__ and the manifest's created_by all say the same."""
# suite: check (make check runs this file: scripts/check.sh)
import json
import re
import subprocess

import pytest

import libshard
from conftest import REPO, _cli, write_eagle_dir


def _cmake_version() -> str:
    text = (REPO / "CMakeLists.txt").read_text()
    match = re.search(r"project\(libshard VERSION ([0-9][0-9.]*)", text)
    assert match, "CMakeLists.txt has no project(libshard VERSION ...)"
    return match.group(1)


def _created_by(dataset) -> str:
    manifest = json.loads((dataset / "manifest.json").read_text())

    def find(node):
        if isinstance(node, dict):
            if "created_by" in node:
                return node["created_by"]
            for value in node.values():
                found = find(value)
                if found is not None:
                    return found
        return None

    created_by = find(manifest)
    assert created_by is not None, f"{dataset}/manifest.json records no created_by"
    return created_by


def test_python_version_is_the_cmake_version():
    assert libshard.__version__ == _cmake_version()


def test_cli_version_and_created_by_agree_with_python(tmp_path):
    cli = _cli()
    if cli is None:
        pytest.skip("the libshard command is not built")
    out = subprocess.run([cli, "--version"], check=True, capture_output=True, text=True).stdout
    assert out.strip() == f"libshard {libshard.__version__}"

    src = tmp_path / "src"
    write_eagle_dir(src, 2)
    subprocess.run([cli, "pack", str(src), "-o", str(tmp_path / "cli_ds")], check=True,
                   capture_output=True)
    assert _created_by(tmp_path / "cli_ds") == f"libshard pack {libshard.__version__}"


def test_python_pack_created_by_agrees(tmp_path):
    if not getattr(libshard._core, "HAVE_PACK", False):
        pytest.skip("the extension was built without libshard.pack")
    src = tmp_path / "src"
    write_eagle_dir(src, 2)
    libshard.pack(src, tmp_path / "ds")
    assert _created_by(tmp_path / "ds") == f"libshard pack {libshard.__version__}"
