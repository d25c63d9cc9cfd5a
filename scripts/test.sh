#!/usr/bin/env bash
# Runs every test suite: the C++ suites (ctest), the Python suites (pytest, against the build
# tree), an ASan+UBSan build of the C++ suites, a TSan build of the loader suite, and the
# fuzz targets' replay and brief run, the installed-package check, and the portable wheel (when
# `make wheel` built one for this interpreter). Prints one closing line
# "test: N passed, N failed".
set -uo pipefail  # pipefail: a step fails when its command fails, not tee
BUILD=${1:-build}
PY=${2:-python3}
JOBS=$(nproc)
TORCH_PREFIX=$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')
passed=0
failed=0
failures=()

LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT

# Adds the test counts a step printed (ctest and pytest summaries) to the totals; a step that
# prints none counts as one test.
count_tests() {  # count_tests OK
  local p f n
  if n=$(grep -oE '[0-9]+ tests failed out of [0-9]+' "$LOG" | tail -1) && [ -n "$n" ]; then
    f=${n%% *}; p=$(( ${n##* } - f ))
  elif n=$(grep -oE 'tests passed out of [0-9]+' "$LOG" | tail -1) && [ -n "$n" ]; then
    p=${n##* }; f=0
  elif grep -qE '^[0-9]+ (passed|failed)|[0-9]+ passed' "$LOG"; then
    local line; line=$(grep -E '[0-9]+ (passed|failed)' "$LOG" | tail -1)
    p=0; f=0
    for n in $(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+'); do p=$((p + n)); done
    for n in $(grep -oE '[0-9]+ (failed|errors?)' <<<"$line" | grep -oE '[0-9]+'); do f=$((f + n)); done
  elif [ "$1" = 1 ]; then p=1; f=0; else p=0; f=1; fi
  f=${f:-0}
  if [ "$1" = 0 ] && [ "$f" -eq 0 ]; then f=1; fi  # a failed step counts as at least one failure
  tests_passed=$((tests_passed + p)); tests_failed=$((tests_failed + f))
}
tests_passed=0
tests_failed=0

step() {  # step NAME COMMAND...
  local name=$1; shift
  echo "=== $name"
  local t0=$SECONDS
  if "$@" 2>&1 | tee "$LOG"; then
    passed=$((passed + 1)); count_tests 1; echo "=== $name: ok ($((SECONDS - t0)) s)"
  else
    failed=$((failed + 1)); failures+=("$name"); count_tests 0
    echo "=== $name: FAILED ($((SECONDS - t0)) s)"
  fi
}

export LIBSHARD_CLI="$PWD/$BUILD/converters/libshard"
export PYTHONPATH="$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"

step "C++ suites (ctest)" ctest --test-dir "$BUILD" --output-on-failure -j"$JOBS" --timeout 600

if [ -d tests/python ]; then
  step "Python suites (pytest)" $PY -m pytest -q tests/python -p no:cacheprovider
fi

# The trainer integrations (libshard.specforge / .speculators / .modelopt) against the trainers'
# own code, with the python of their environment (scripts/trainers_env.sh; `make deps` builds it).
# The plain pytest step above skips those files, saying so.
TRAINERS_PY=${LIBSHARD_TRAINERS_VENV:-$PWD/.venv-trainers}/bin/python
if [ -x "$TRAINERS_PY" ]; then
  step "trainer integrations (pytest, trainers' venv)" env TORCHDYNAMO_DISABLE=1 \
    "$TRAINERS_PY" -m pytest -q tests/python/test_trainer_*.py -p no:cacheprovider
else
  echo "=== trainer integrations: skipped (no $TRAINERS_PY; bash scripts/trainers_env.sh builds it)"
fi

sanitizer_suite() {  # sanitizer_suite KIND DIR TEST_REGEX [TARGET...]
  local kind=$1 dir=$2 regex=$3; shift 3
  local targets=(); for t in "$@"; do targets+=(--target "$t"); done
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DLIBSHARD_SANITIZE="$kind" \
    -DLIBSHARD_BUILD_BENCH=OFF -DLIBSHARD_BUILD_TORCH=OFF -DLIBSHARD_BUILD_PYTHON=OFF >/dev/null &&
  cmake --build "$dir" -j"$JOBS" "${targets[@]}" &&
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  TSAN_OPTIONS=halt_on_error=1 ctest --test-dir "$dir" --output-on-failure -j"$JOBS" -R "$regex" -E NOT_BUILT --timeout 900
}
step "ASan+UBSan suites" sanitizer_suite address build-asan '.'
# The threaded parts: the loader (and its diagnostics), its engines, the arena, the prefaulter,
# concurrent Dataset reads, follow mode (a follower and its loaders beside a writing thread).
step "TSan loader suites" sanitizer_suite thread build-tsan 'Loader|Arena|Engine|File|Concurrency|Prefaulter|Follow' \
  loader_test loader_diagnostics_test io_engine_test io_file_test arena_test dataset_test \
  dataset_v2_test prefaulter_test follow_test follow_order_test

# Every parser of untrusted bytes: the committed fuzz corpus and crash reproducers replayed under
# ASan+UBSan (clang, build-fuzz), then a brief libFuzzer run per target (scripts/fuzz.sh).
step "fuzz replay + brief run" bash scripts/fuzz.sh replay build-fuzz

if [ -x scripts/test_install.sh ]; then
  step "installed package + examples" bash scripts/test_install.sh "$BUILD" "$PY"
fi

# The portable wheel (scripts/test_wheel.sh): this interpreter's manylinux wheel in a fresh venv
# with the system's liburing, zstd, xxHash and libdeflate hidden. CI (CI=true) or
# LIBSHARD_TEST_WHEEL=1 builds the wheel first when dist/ has none (a few minutes: its own CMake
# build); elsewhere the step runs only when `make wheel` left one, and says how otherwise.
py_version=$($PY -c 'import sys; print("%d.%d" % sys.version_info[:2])')
wheel_tag=$($PY -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
have_wheel() { ls dist/libshard-*-"$wheel_tag-$wheel_tag"-*manylinux*.whl >/dev/null 2>&1; }
if ! have_wheel && { [ "${CI:-}" = true ] || [ "${LIBSHARD_TEST_WHEEL:-}" = 1 ]; }; then
  step "portable wheel: build for $py_version" bash scripts/build_wheels.sh "$py_version"
fi
if have_wheel; then
  step "portable wheel, system libraries hidden" bash scripts/test_wheel.sh "$PY"
else
  echo "=== portable wheel: skipped (no dist/libshard-*-$wheel_tag-*manylinux*.whl; make wheel, make test-wheel, or LIBSHARD_TEST_WHEEL=1)"
fi

echo
echo "steps: $passed ok, $failed failed${failures:+ (${failures[*]})}"
echo "test: $tests_passed passed, $tests_failed failed"
((failed == 0))
