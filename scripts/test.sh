#!/usr/bin/env bash
# Runs every test suite: the C++ suites (ctest), the Python suites (pytest, against the build
# tree), an ASan+UBSan build of the C++ suites, a TSan build of the loader suite, and the
# installed-package check. Prints one closing line "test: N passed, N failed".
set -uo pipefail
BUILD=${1:-build}
PY=${2:-python3}
JOBS=$(nproc)
TORCH_PREFIX=$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')
passed=0
failed=0
failures=()

step() {  # step NAME COMMAND...
  local name=$1; shift
  echo "=== $name"
  local t0=$SECONDS
  if "$@"; then
    passed=$((passed + 1)); echo "=== $name: ok ($((SECONDS - t0)) s)"
  else
    failed=$((failed + 1)); failures+=("$name"); echo "=== $name: FAILED ($((SECONDS - t0)) s)"
  fi
}

export LIBSHARD_CLI="$PWD/$BUILD/converters/libshard"
export PYTHONPATH="$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"

step "C++ suites (ctest)" ctest --test-dir "$BUILD" --output-on-failure -j"$JOBS" --timeout 600

if [ -d tests/python ]; then
  step "Python suites (pytest)" $PY -m pytest -q tests/python -p no:cacheprovider
fi

sanitizer_suite() {  # sanitizer_suite KIND DIR TEST_REGEX
  cmake -S . -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DLIBSHARD_SANITIZE="$1" \
    -DLIBSHARD_BUILD_BENCH=OFF -DLIBSHARD_BUILD_TORCH=OFF -DLIBSHARD_BUILD_PYTHON=OFF >/dev/null &&
  cmake --build "$2" -j"$JOBS" &&
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  TSAN_OPTIONS=halt_on_error=1 ctest --test-dir "$2" --output-on-failure -j"$JOBS" -R "$3" --timeout 900
}
step "ASan+UBSan suites" sanitizer_suite address build-asan '.'
step "TSan loader suites" sanitizer_suite thread build-tsan 'Loader|Arena|Io|Engine'

if [ -x scripts/test_install.sh ]; then
  step "installed package + examples" bash scripts/test_install.sh "$BUILD" "$PY"
fi

echo
if ((failed)); then echo "failed steps: ${failures[*]}"; fi
echo "test: $passed passed, $failed failed"
((failed == 0))
