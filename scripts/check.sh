#!/usr/bin/env bash
# `make check`: the quick suites of the library, against a built tree, in a few minutes on 2 cores:
#   - C++: every GoogleTest suite labelled `check` (tests/CMakeLists.txt: all but the scale ones);
#   - Python: the suites of the library's own behaviour that declare themselves quick (below).
# Left to `make test` (scripts/test.sh, which runs these first, then the rest): the scale suites,
# the S3 server suites, the Writer's multi-process, kill -9 and torchrun runs, the address-space
# limit run, write-path fault injection, multi-process loading, the LIBSHARD_PLANES_KERNEL child
# processes, the example's real model, the trainers' environment, the sanitizer builds, fuzzing,
# the installed package and the portable wheel.
#
#   scripts/check.sh [BUILD] [PYTHON] [all|cpp|python]     default: build python3 all
#   scripts/check.sh --list-python                         the Python suites, one file a line
# Prints ctest's and pytest's summaries; exit 0 when every test passed.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Which suites are quick is declared in each file, so a new suite lands in the right set by what
# it says of itself, not by a list kept here:
#   - C++: every GoogleTest suite is labelled `check` unless its source has a line
#     `// suite: full` (tests/CMakeLists.txt reads it; the scale suites have it);
#   - Python: the files of tests/python with a line `# suite: check` (after the docstring),
#     chosen by their times (pytest --durations, 2 cores): each takes seconds, and together they
#     cover the library from Python broadly (units and errors, the CLI, pack and its messages,
#     datasets, the Loader, batching and collation, codecs, the Writer's API and refusals,
#     upgrades, hostile datasets and sources). Every other file is left to `make test`.
PYTHON_SUITES=()
while IFS= read -r f; do PYTHON_SUITES+=("$f"); done < <(
  cd "$ROOT/tests/python" && grep -l -m1 -E '^# suite: check([^a-z_]|$)' test_*.py | LC_ALL=C sort)

if [ "${1:-}" = --list-python ]; then
  printf '%s\n' "${PYTHON_SUITES[@]}"
  exit 0
fi
BUILD=${1:-build}
PY=${2:-python3}
PART=${3:-all}
JOBS=${JOBS:-$(nproc)}
cd "$ROOT"
[ -d "$BUILD" ] || { echo "check: no build tree $BUILD (make build first)" >&2; exit 2; }
case $BUILD in /*) BUILD_DIR=$BUILD ;; *) BUILD_DIR=$ROOT/$BUILD ;; esac  # relative or absolute
export LIBSHARD_CLI="$BUILD_DIR/converters/libshard"
export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"

rc=0
if [ "$PART" = all ] || [ "$PART" = cpp ]; then
  echo "=== check: C++ suites (ctest -L check)"
  ctest --test-dir "$BUILD" --output-on-failure -j"$JOBS" --timeout 600 -L check || rc=1
fi
if [ "$PART" = all ] || [ "$PART" = python ]; then
  echo "=== check: Python suites (${#PYTHON_SUITES[@]} files)"
  "$PY" -m pytest -q -p no:cacheprovider "${PYTHON_SUITES[@]/#/tests/python/}" || rc=1
fi
exit $rc
