#!/usr/bin/env bash
# The GPU check (issue 13): on a machine with an NVIDIA GPU and a CUDA build of PyTorch, install
# libshard without a package manager, run the CUDA-marked tests and the GPU benchmark, and write
# the figures to one file. Finishes in under 8 minutes on one GPU.
#
#   here (any machine with pip and apt):   bash scripts/gpu_check.sh --prepare
#       builds the CPython wheel for PYVER (default 3.12, the GPU image's Python) into dist/ with
#       `make wheel` (repaired: liburing, zstd and xxHash travel inside), and downloads the Debian
#       packages of those libraries into .gpu-deps/ for a build from source when no wheel fits.
#   there (the GPU machine):               bash scripts/gpu_check.sh [OUT_DIR]
#       installs the wheel from dist/ (or builds from source with .gpu-deps/), then runs
#       `pytest -m cuda`, the loader suites, the C++ adapter's non_blocking check
#       (tests/gpu/torch_nonblocking_check.cc, built with CMake against the GPU's LibTorch and
#       the libraries of .gpu-deps/), and bench/gpu_bench.py; the report lands in
#       OUT_DIR/gpu_figures.md, the logs beside it.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
PYTHON="${PYTHON:-python3}"
PYVER="${PYVER:-3.12}"

if [[ "${1:-}" == "--prepare" ]]; then
  bash scripts/build_wheels.sh "$PYVER"
  mkdir -p .gpu-deps
  (cd .gpu-deps && apt-get download liburing-dev liburing2 libzstd-dev libzstd1 libxxhash-dev libxxhash0 \
     pkgconf-bin libpkgconf3)
  grep -qx '/.gpu-deps/' .git/info/exclude 2>/dev/null || echo '/.gpu-deps/' >> .git/info/exclude
  ls -la dist/ .gpu-deps/
  echo "prepared: carry 'dist' and '.gpu-deps' to the GPU machine"
  exit 0
fi

OUT_DIR="${1:-${OUT:-$REPO/gpu-check-out}}"
mkdir -p "$OUT_DIR"
WORK="${WORK:-/tmp/libshard-gpu-check}"
rm -rf "$WORK"; mkdir -p "$WORK"
SITE="$WORK/site"
START=$(date +%s)
step() { echo "== [$(( $(date +%s) - START ))s] $*"; }

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PYTHON" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'
tag="cp$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')"

step "install libshard into $SITE"
wheel=$(ls dist/libshard-*-"$tag"-"$tag"-*manylinux*.whl 2>/dev/null | head -n1 || true)
if [[ -n "$wheel" ]]; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$wheel"
  echo "installed $wheel"
elif compgen -G ".gpu-deps/*.deb" >/dev/null; then
  DEPS="$WORK/deps"
  for f in .gpu-deps/*.deb; do dpkg -x "$f" "$DEPS"; done
  multiarch=$(ls -d "$DEPS"/usr/lib/*-linux-gnu | head -n1)
  export PKG_CONFIG_PATH="$multiarch/pkgconfig:$DEPS/usr/share/pkgconfig"
  export CMAKE_PREFIX_PATH="$DEPS/usr"
  export CPATH="$DEPS/usr/include" LIBRARY_PATH="$multiarch"
  export LD_LIBRARY_PATH="$multiarch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # pkg-config files name /usr as their prefix; point them at the unpacked tree.
  export PKG_CONFIG_SYSROOT_DIR="$DEPS"
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$PYTHON" -m pip install -q --no-build-isolation --no-deps \
    --target "$SITE" "$REPO" 2>&1 | tail -n 20
  echo "built from source with the libraries of .gpu-deps/"
else
  echo "no wheel for $tag in dist/ and no .gpu-deps/: run 'bash scripts/gpu_check.sh --prepare'" \
       "where pip and apt work, and carry dist/ and .gpu-deps/" >&2
  exit 2
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$SITE/bin:$PATH"
"$PYTHON" -c 'import libshard; print("libshard", libshard.__version__, libshard.__file__)'

step "CUDA-marked tests and the loader suites"
set +e
( cd "$REPO" && "$PYTHON" -m pytest -q -p no:cacheprovider -m cuda -rs tests/python/test_cuda.py ) \
  2>&1 | tee "$OUT_DIR/pytest_cuda.log"
cuda_rc=${PIPESTATUS[0]}
( cd "$REPO" && timeout 240 "$PYTHON" -m pytest -q -p no:cacheprovider -x \
    tests/python/test_loader.py tests/python/test_dataset.py ) 2>&1 | tail -n 15 \
  | tee "$OUT_DIR/pytest_loader.log"
set -e

step "C++ adapter: non_blocking copy from a dropped tensor while the arena is reused"
# Builds libshard, libshard::torch and tests/gpu/torch_nonblocking_check against this machine's
# CUDA LibTorch (the libraries of .gpu-deps/ where the system lacks them); exit 77 = skipped.
set +e
(
  set -e
  CXX_DEPS="$WORK/cxx-deps"
  if compgen -G ".gpu-deps/*.deb" >/dev/null; then
    for f in .gpu-deps/*.deb; do dpkg -x "$f" "$CXX_DEPS"; done
    multiarch=$(ls -d "$CXX_DEPS"/usr/lib/*-linux-gnu | head -n1)
    export PKG_CONFIG_PATH="$multiarch/pkgconfig:$CXX_DEPS/usr/share/pkgconfig"
    export PKG_CONFIG_SYSROOT_DIR="$CXX_DEPS" CPATH="$CXX_DEPS/usr/include"
    export LIBRARY_PATH="$multiarch"
    export LD_LIBRARY_PATH="$multiarch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if ! command -v pkg-config >/dev/null && [[ -x "$CXX_DEPS/usr/bin/pkgconf" ]]; then
      mkdir -p "$CXX_DEPS/bin"; ln -sf "$CXX_DEPS/usr/bin/pkgconf" "$CXX_DEPS/bin/pkg-config"
      export PATH="$CXX_DEPS/bin:$PATH"
    fi
  fi
  command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"  # TorchConfig wants it
  export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"  # no kernels are built; skips probing
  torch_prefix=$("$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')
  generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S "$REPO" -B "$WORK/cxx" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_prefix" -DLIBSHARD_BUILD_TESTS=OFF -DLIBSHARD_BUILD_TOOLS=OFF \
    -DLIBSHARD_BUILD_BENCH=OFF -DLIBSHARD_BUILD_PYTHON=OFF >"$OUT_DIR/cxx_build.log" 2>&1
  cmake --build "$WORK/cxx" -j"$(nproc)" --target torch_nonblocking_check \
    >>"$OUT_DIR/cxx_build.log" 2>&1
  timeout 300 "$WORK/cxx/tests/gpu/torch_nonblocking_check"
) 2>&1 | tee "$OUT_DIR/cxx_nonblocking.log"
cxx_rc=${PIPESTATUS[0]}
[[ $cxx_rc -ne 0 ]] && tail -n 30 "$OUT_DIR/cxx_build.log" 2>/dev/null
echo "torch_nonblocking_check exit status: $cxx_rc (0 passed, 77 skipped)" \
  | tee -a "$OUT_DIR/cxx_nonblocking.log"
set -e

step "data for the benchmark"
SRC="$WORK/src"; PACKED="$WORK/packed"
"$PYTHON" examples/make_eagle3_data.py "$SRC" --samples "${GPU_CHECK_SAMPLES:-48}" --hidden 4096 \
  --min-len 1000 --max-len 3000 --quiet
"$PYTHON" -c "import libshard, sys; libshard.pack(sys.argv[1], sys.argv[2])" "$SRC" "$PACKED"

step "GPU benchmark"
"$PYTHON" bench/gpu_bench.py --src "$SRC" --packed "$PACKED" --out "$OUT_DIR/gpu_figures.md" \
  2>&1 | tee "$OUT_DIR/gpu_bench.log"
{
  echo
  echo "## Tests"
  echo
  echo '```'
  tail -n 5 "$OUT_DIR/pytest_cuda.log"
  tail -n 3 "$OUT_DIR/pytest_loader.log"
  tail -n 2 "$OUT_DIR/cxx_nonblocking.log"
  echo '```'
} >> "$OUT_DIR/gpu_figures.md"
step "done: $OUT_DIR/gpu_figures.md"
rm -rf "$WORK"
[[ $cuda_rc -eq 0 && $cxx_rc -ne 0 && $cxx_rc -ne 77 ]] && exit "$cxx_rc"
exit "$cuda_rc"
