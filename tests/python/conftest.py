"""Shared fixtures for the Python tests: real torch.save directories (EAGLE-3-like and every dtype),
packed with libshard, plus helpers to compare samples bit for bit.

`import libshard` works either with the package installed (`pip install .`) or from a CMake build
tree: when the import fails, the newest `<repo>/build*/python` holding `libshard/_core*.so` (or
$LIBSHARD_PYTHONPATH) is put on sys.path and on PYTHONPATH for child processes.
"""

from __future__ import annotations

import glob
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


def _find_build_python() -> str | None:
    env = os.environ.get("LIBSHARD_PYTHONPATH")
    if env:
        return env
    candidates = glob.glob(str(REPO / "build*" / "python" / "libshard" / "_core*.so"))
    if not candidates:
        return None
    newest = max(candidates, key=os.path.getmtime)
    return str(Path(newest).parent.parent)


def _ensure_importable() -> None:
    try:
        import libshard  # noqa: F401
        if getattr(libshard, "__file__", None) is not None:
            return
        # The repository's C++ `libshard/` directory imports as an empty namespace package
        # when the repository root is on sys.path; that is not the Python package.
        del sys.modules["libshard"]
    except ImportError:
        pass
    path = _find_build_python()
    if path is None:
        return
    sys.path.insert(0, path)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [path] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


_ensure_importable()
import libshard  # noqa: E402

# Pure-Python EAGLE-3 sample layout: keys in SpecForge's insertion order.
HIDDEN = 16
N_EAGLE = 24  # divisible by 1, 2, 3, 4, 6, 8: resume tests can check "exactly once"


def make_eagle_sample(gen: torch.Generator, length: int, hidden: int = HIDDEN) -> Dict[str, torch.Tensor]:
    return {
        "input_ids": torch.randint(0, 32000, (length,), generator=gen, dtype=torch.int64),
        "loss_mask": torch.randint(0, 2, (length,), generator=gen, dtype=torch.int64),
        "aux_hidden_state": torch.randn(1, length, 3 * hidden, generator=gen).to(torch.bfloat16),
        "hidden_state": torch.randn(1, length, hidden, generator=gen).to(torch.bfloat16),
    }


def write_eagle_dir(root: Path, n: int, seed: int = 0, min_len: int = 4, max_len: int = 40) -> List[Path]:
    """SpecForge layout: rows_{g}-{g+10}/data_{i}.ckpt (natural order differs from lexical)."""
    gen = torch.Generator().manual_seed(seed)
    rnd = random.Random(seed)
    paths = []
    for i in range(n):
        group = (i // 10) * 10
        path = root / f"rows_{group}-{group + 10}" / f"data_{i}.ckpt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(make_eagle_sample(gen, rnd.randint(min_len, max_len)), path)
        paths.append(path)
    return paths


ALL_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.uint16, torch.uint32, torch.uint64, torch.float16, torch.bfloat16,
              torch.float32, torch.float64, torch.float8_e4m3fn, torch.float8_e5m2]


def _random_tensor(gen: torch.Generator, shape, dtype: torch.dtype) -> torch.Tensor:
    """Random bytes of any dtype (NaN and inf bit patterns included: comparisons are by bytes)."""
    n = 1
    for s in shape:
        n *= s
    if dtype == torch.bool:
        return torch.randint(0, 2, tuple(shape), generator=gen).bool()
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * size,), generator=gen, dtype=torch.uint8)
    return raw.view(dtype).reshape(tuple(shape))


def make_all_dtypes_sample(gen: torch.Generator, length: int) -> Dict[str, object]:
    sample: Dict[str, object] = {"input_ids": torch.arange(length, dtype=torch.int64)}
    for dt in ALL_DTYPES:
        name = str(dt).replace("torch.", "")
        sample[f"t_{name}"] = _random_tensor(gen, (length, 3), dt)
    sample["scalar_f32"] = _random_tensor(gen, (), torch.float32)          # 0-d
    sample["scalar_bf16"] = _random_tensor(gen, (), torch.bfloat16)        # 0-d, 2 bytes
    sample["empty_f32"] = torch.empty(0, 5, dtype=torch.float32)           # zero-size
    # Views torch.save stores with storage offsets / strides: materialised by the reader.
    base = _random_tensor(gen, (3, length), torch.float16)
    sample["view_transposed"] = base.t()
    sample["view_sliced"] = _random_tensor(gen, (length + 2,), torch.int32)[2:]
    return sample


def write_all_dtypes_dir(root: Path, n: int = 5, seed: int = 1) -> List[Path]:
    gen = torch.Generator().manual_seed(seed)
    paths = []
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        path = root / f"sample_{i}.pt"
        torch.save(make_all_dtypes_sample(gen, 3 + 2 * i), path)
        paths.append(path)
    return paths


def _cli() -> str | None:
    env = os.environ.get("LIBSHARD_CLI")
    if env:
        return env
    found = shutil.which("libshard")
    if found:
        return found
    candidates = glob.glob(str(REPO / "build*" / "converters" / "libshard"))
    return max(candidates, key=os.path.getmtime) if candidates else None


def pack_dir(src: Path, out: Path, **options) -> Path:
    """Packs with libshard.pack when the extension has it, else with the `libshard` command."""
    if getattr(libshard._core, "HAVE_PACK", False):
        libshard.pack(src, out, **options)
        return out
    cli = _cli()
    if cli is None:
        pytest.skip("neither libshard.pack nor the libshard command is available")
    args = [cli, "pack", str(src), "-o", str(out)]
    for key, value in options.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    subprocess.run(args, check=True, capture_output=True)
    return out


def tensor_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def assert_sample_equal(got: Dict[str, object], want: Dict[str, object], where: str = "") -> None:
    """Same keys in the same order, same dtypes, shapes and bytes (non-tensors: equal values)."""
    assert list(got.keys()) == list(want.keys()), where
    for key, w in want.items():
        g = got[key]
        if isinstance(w, torch.Tensor):
            assert isinstance(g, torch.Tensor), f"{where} {key}"
            assert g.dtype == w.dtype, f"{where} {key}: {g.dtype} != {w.dtype}"
            assert g.shape == w.shape, f"{where} {key}: {tuple(g.shape)} != {tuple(w.shape)}"
            assert tensor_bytes(g) == tensor_bytes(w), f"{where} {key}: bytes differ"
        else:
            assert g == w, f"{where} {key}: {g!r} != {w!r}"


@pytest.fixture(scope="session")
def eagle_src(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("eagle_src")
    write_eagle_dir(root, N_EAGLE)
    return root


@pytest.fixture(scope="session")
def eagle_dataset(eagle_src, tmp_path_factory) -> Path:
    """The EAGLE-3-like directory packed into several small shards."""
    out = tmp_path_factory.mktemp("eagle_packed") / "ds"
    return pack_dir(eagle_src, out, shard_size="64KiB")


@pytest.fixture(scope="session")
def eagle_sources(eagle_src) -> List[Path]:
    """Source files in libshard's sample order (natural sort of relative paths)."""
    return [eagle_src / f"rows_{(i // 10) * 10}-{(i // 10) * 10 + 10}" / f"data_{i}.ckpt"
            for i in range(N_EAGLE)]


@pytest.fixture(scope="session")
def all_dtypes_src(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dtypes_src")
    write_all_dtypes_dir(root)
    return root


@pytest.fixture(scope="session")
def all_dtypes_dataset(all_dtypes_src, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dtypes_packed") / "ds"
    return pack_dir(all_dtypes_src, out)


@pytest.fixture
def copy_dataset(tmp_path):
    """Returns a function that copies a packed dataset directory (for corruption tests)."""
    def copy(src: Path) -> Path:
        dst = tmp_path / ("copy_" + src.name)
        shutil.copytree(src, dst)
        return dst
    return copy


@pytest.fixture(scope="session", autouse=True)
def smollm2_cache(tmp_path_factory):
    """examples/smollm2.py keeps the dequantized SmolLM2 in one directory of this session, so the
    generators the suites run (each a process of its own) parse its GGUF file once, not each
    time (SMOLLM2_CACHE_DIR; a directory the caller set is kept)."""
    if os.environ.get("SMOLLM2_CACHE_DIR"):
        yield
        return
    path = tmp_path_factory.mktemp("smollm2_cache")
    os.environ["SMOLLM2_CACHE_DIR"] = str(path)
    try:
        yield
    finally:
        os.environ.pop("SMOLLM2_CACHE_DIR", None)
        shutil.rmtree(path, ignore_errors=True)
