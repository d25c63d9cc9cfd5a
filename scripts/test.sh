#!/usr/bin/env bash
# Runs every test suite: `make check`'s quick C++ and Python suites (scripts/check.sh), then the
# rest of the C++ suites (ctest) and of the Python suites (pytest, against the build tree), an
# ASan+UBSan build of the C++ suites, a TSan build of the loader suite, and the fuzz targets'
# replay and brief run, the installed-package check, the portable wheel (when `make wheel` built
# one for this interpreter, or in CI) also beside decoy libshards, and `make demo` on a small
# directory. The Python steps run under coverage.py (pytest-cov, when installed: `make deps`) and
# against a _core whose C++ is instrumented for gcov (LIBSHARD_BINDINGS_COVERAGE), and the last
# steps print the line coverage of the Python package and of the bindings' C++
# (scripts/coverage.sh). Prints one closing line "test: N passed, N failed".
#
#   scripts/test.sh [BUILD] [PYTHON] [all|python]   python: only the Python steps and the coverage
#                                                   report (`make coverage`, scripts/coverage.sh)
set -uo pipefail  # pipefail: a step fails when its command fails, not tee
BUILD=${1:-build}
PY=${2:-python3}
PART=${3:-all}
case $PART in all | python) ;; *) echo "test: PART=$PART: use all or python" >&2; exit 2 ;; esac
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

case $BUILD in /*) BUILD_DIR=$BUILD ;; *) BUILD_DIR=$PWD/$BUILD ;; esac  # relative or absolute
export LIBSHARD_CLI="$BUILD_DIR/converters/libshard"
export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"

# Line coverage of the Python package: every Python step appends to one data file
# (scripts/coverage.sh --pytest-opts: pytest-cov's options, none without it), reported last.
export COVERAGE_FILE="$BUILD_DIR/coverage/data"
rm -rf "$BUILD_DIR/coverage" && mkdir -p "$BUILD_DIR/coverage"
cov_opts() { bash scripts/coverage.sh --pytest-opts "$1"; }  # cov_opts PYTHON
# Line coverage of the bindings' C++ (bindings/src): BUILD's _core built with gcov's
# instrumentation (`make test` and `make coverage` configure it so; a tree configured without it
# has its bindings rebuilt here), and the counts of a previous run deleted, so the report is this
# run's: every process of every step that loads _core and exits adds its counts.
if grep -qx 'LIBSHARD_BINDINGS_COVERAGE:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
  bash scripts/coverage.sh --bindings-setup "$BUILD"
else
  step "bindings: instrumented build for coverage" bash scripts/coverage.sh --bindings-setup "$BUILD"
fi

# `make check` first (its two halves, so each step's count is ctest's or pytest's), then the rest:
# together every C++ and Python suite, each once.
if [ "$PART" = all ]; then
  step "make check: C++ suites (ctest -L check)" bash scripts/check.sh "$BUILD" "$PY" cpp
  step "C++ suites, the rest (ctest -LE check)" ctest --test-dir "$BUILD" --output-on-failure \
    -j"$JOBS" --timeout 600 -LE check
fi

# The longer pytest steps run their files on several workers (pytest-xdist, `make deps` installs
# it; each file on one worker, so its module fixtures are made once): many of their tests wait on
# child processes, servers or the disk, and one worker leaves a core idle. At most 4 workers.
pytest_workers() {  # pytest_workers PYTHON: the options, when that python has pytest-xdist
  if "$1" -c 'import xdist' 2>/dev/null; then echo "-n $((JOBS < 4 ? JOBS : 4)) --dist loadfile"; fi
}

# The trainer integrations' suites run in their own step, with the trainers' environment, when it
# is there (below); the plain step then leaves them out instead of running what it can of them.
TRAINERS_PY=${LIBSHARD_TRAINERS_VENV:-$PWD/.venv-trainers}/bin/python

if [ -d tests/python ]; then
  step "make check: Python suites" env PYTEST_ADDOPTS="$(cov_opts "$PY")" \
    bash scripts/check.sh "$BUILD" "$PY" python
  quick=()
  while read -r f; do quick+=(--ignore "tests/python/$f"); done < <(bash scripts/check.sh --list-python)
  [ -x "$TRAINERS_PY" ] && quick+=(--ignore-glob "tests/python/test_trainer_*.py")
  [ -x "$TRAINERS_PY" ] && quick+=(--ignore tests/python/test_sp_rules.py)  # the SP split rules
  step "Python suites, the rest (pytest)" $PY -m pytest -q tests/python -p no:cacheprovider \
    --durations=10 $(pytest_workers "$PY") $(cov_opts "$PY") "${quick[@]}"
fi

# The trainer integrations (libshard.specforge / .speculators / .modelopt) against the trainers'
# own code, with the python of their environment (scripts/trainers_env.sh; `make deps` builds it).
# The plain pytest step above leaves those files out.
if [ -x "$TRAINERS_PY" ]; then
  step "trainer integrations (pytest, trainers' venv)" env TORCHDYNAMO_DISABLE=1 \
    "$TRAINERS_PY" -m pytest -q tests/python/test_trainer_*.py tests/python/test_sp_rules.py \
    -p no:cacheprovider --durations=10 \
    $(pytest_workers "$TRAINERS_PY") $(cov_opts "$TRAINERS_PY")
else
  echo "=== trainer integrations: skipped (no $TRAINERS_PY; bash scripts/trainers_env.sh builds it)"
fi

# The last steps: the line coverage of the Python package and of the bindings' C++, measured by the
# Python steps above (the C++ also by `make demo`'s run) (scripts/coverage.sh), then the totals.
# Without gcovr or without counts the bindings' step fails rather than report nothing.
finish() {
  if [ -n "$(cov_opts "$PY")" ]; then
    step "Python package line coverage" bash scripts/coverage.sh --report "$BUILD" "$PY"
  else
    echo "=== Python package line coverage: skipped (no pytest-cov for $PY; make deps installs it)"
  fi
  step "Bindings line coverage" bash scripts/coverage.sh --bindings-report "$BUILD" "$PY"
  echo
  echo "steps: $passed ok, $failed failed${failures:+ (${failures[*]})}"
  echo "test: $tests_passed passed, $tests_failed failed"
  ((failed == 0))
}
if [ "$PART" = python ]; then finish; exit; fi

# The sanitizer builds use clang when it is there (`make deps` installs it for the fuzzers): at -O0
# under ASan it compiles the suites in half GCC's time (the release build and `make check` stay
# GCC's), with line tables only, which is what the sanitizers' reports print.
sanitizer_compiler=()
if command -v clang++ >/dev/null && command -v clang >/dev/null; then
  sanitizer_compiler=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
                      "-DCMAKE_C_FLAGS_DEBUG=-O0 -gline-tables-only"
                      "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -gline-tables-only")
fi
sanitizer_suite() {  # sanitizer_suite KIND DIR TEST_REGEX [TARGET...]
  local kind=$1 dir=$2 regex=$3; shift 3
  local targets=(); for t in "$@"; do targets+=(--target "$t"); done
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DLIBSHARD_SANITIZE="$kind" \
    "${sanitizer_compiler[@]}" \
    -DLIBSHARD_BUILD_BENCH=OFF -DLIBSHARD_BUILD_TORCH=OFF -DLIBSHARD_BUILD_PYTHON=OFF >/dev/null &&
  cmake --build "$dir" -j"$JOBS" "${targets[@]}" &&
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  TSAN_OPTIONS=halt_on_error=1 ctest --test-dir "$dir" --output-on-failure -j"$JOBS" -R "$regex" -E NOT_BUILT --timeout 900
}
step "ASan+UBSan suites" sanitizer_suite address build-asan '.'
# The threaded parts: the loader (and its diagnostics), its engines, the arena, the prefaulter,
# concurrent Dataset reads, a caller-given order and the read-ahead, follow mode (a follower and
# its loaders beside a writing thread); the s3:// cache's fetcher threads, pins, eviction and
# healing, the stores and the S3 client, in-process against the memory store and the S3 front
# over it (objstore/memory_store.h, tests/testutil/fake_s3.h); one Writer and one ParallelWriter
# shared by several threads (writer_concurrency_test, its suites named *Concurrency*).
step "TSan loader suites" sanitizer_suite thread build-tsan \
  'Loader|Arena|Engine|File|Concurrency|Prefaulter|CallerOrder|ReadAhead|Follow|S3Client|S3CacheHeal|S3Uploader|CacheHostile|CacheEvict|ObjectStore' \
  loader_test loader_diagnostics_test io_engine_test io_file_test arena_test dataset_test \
  dataset_block_index_test prefaulter_test caller_order_test read_ahead_test follow_test \
  follow_order_test s3_client_test s3_cache_heal_test s3_uploader_test cache_hostile_test \
  cache_evict_test object_store_test cache_store_faults_test writer_concurrency_test

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
  step "portable wheel beside decoy libshards" bash scripts/test_wheel_decoys.sh "$PY"
else
  echo "=== portable wheel: skipped (no dist/libshard-*-$wheel_tag-*manylinux*.whl; make wheel, make test-wheel, or LIBSHARD_TEST_WHEEL=1)"
fi

# `make demo` as a newcomer runs it (its targeted build: already built here), on a small directory.
# BINDINGS_COVERAGE=ON keeps the tree's instrumented _core (no rebuild of the bindings; the
# demo's counts join the bindings' report); a plain `make demo` or `make build` configures it OFF.
step "make demo (small)" make --no-print-directory demo BUILD="$BUILD" PYTHON="$PY" BINDINGS_COVERAGE=ON \
  DEMO_DIR="$BUILD/demo_data" DEMO_SAMPLES=12 DEMO_HIDDEN=256 DEMO_MIN_LEN=64 DEMO_MAX_LEN=256

finish
