#!/usr/bin/env bash
# Line coverage of the Python package, bindings/python/libshard/*.py (coverage.py through
# pytest-cov; settings in .coveragerc), and of the bindings' C++, bindings/src/* (the extension
# libshard._core built with gcov's instrumentation, LIBSHARD_BINDINGS_COVERAGE; gcovr reports).
# `make test` measures both while its Python steps run and prints the reports last; `make
# coverage` runs only those steps (make check's Python suites, the rest, the trainer integrations
# with the trainers' environment) and prints them.
#
#   scripts/coverage.sh [BUILD] [PYTHON]   the Python steps under coverage, then the reports
#   scripts/coverage.sh --report [BUILD]   the Python package's report of the last measurement:
#                                          per file and total
#   scripts/coverage.sh --pytest-opts PY   the pytest options that measure (none when that python
#                                          has no pytest-cov); scripts/test.sh adds them
#   scripts/coverage.sh --bindings-setup [BUILD]
#                                          before a measured run: BUILD's _core instrumented
#                                          (reconfigured and rebuilt when it is not), the last
#                                          run's counts (.gcda files) deleted
#   scripts/coverage.sh --bindings-report [BUILD] [PYTHON]
#                                          the bindings' report: per file and total, and each
#                                          file's missed lines in BUILD/coverage/bindings.txt
#
# The data: $COVERAGE_FILE, by default BUILD/coverage/data (cleared when a measured run starts),
# and the .gcda files beside the bindings' objects in BUILD/bindings (every process that loads
# _core and exits normally adds its counts; libgcov locks and merges them).
# Not measured: the package in child processes (the Writer's and loaders' child scripts,
# DataLoader workers, torchrun), and the bindings' C++ in processes that end without exiting
# (os._exit, a signal): see docs/testing.md.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

case ${1:-} in
  --pytest-opts)
    PY=${2:-python3}
    if "$PY" -c 'import pytest_cov' 2>/dev/null; then
      # --cov-report=: nothing printed per step; the data of every step is appended to one file.
      echo "--cov --cov-config=$ROOT/.coveragerc --cov-append --cov-report="
    fi
    exit 0 ;;
  --report)
    BUILD=${2:-build}
    PY=${3:-python3}
    case $BUILD in /*) BUILD_DIR=$BUILD ;; *) BUILD_DIR=$ROOT/$BUILD ;; esac
    export COVERAGE_FILE=${COVERAGE_FILE:-$BUILD_DIR/coverage/data}
    exec "$PY" - "$ROOT" <<'PYEOF'
"""Per file of bindings/python/libshard: statements, missed, percent, and the total. A file no
measured test imported counts as missed whole (the trainer modules without their environment)."""
import glob
import os
import sys

import coverage

root = sys.argv[1]
data_file = os.environ["COVERAGE_FILE"]
if not glob.glob(data_file + "*"):
    sys.exit(f"coverage: no data in {data_file} (run the Python suites with scripts/coverage.sh)")
cov = coverage.Coverage(data_file=data_file, config_file=os.path.join(root, ".coveragerc"))
cov.combine()  # what a step left in parallel files (nothing when pytest-cov combined)
cov.load()
data = cov.get_data()
# Lines run, by file name: the tests import the copies in <build>/python/libshard.
executed = {}
for f in data.measured_files():
    parts = f.replace(os.sep, "/").split("/")
    if len(parts) >= 3 and parts[-3:-1] == ["python", "libshard"]:
        executed.setdefault(parts[-1], set()).update(data.lines(f) or ())
rows = []
total_s = total_m = 0
for path in sorted(glob.glob(os.path.join(root, "bindings", "python", "libshard", "*.py"))):
    name = os.path.basename(path)
    _, statements, _, _, _ = cov.analysis2(path)
    statements = set(statements)
    if not statements:
        continue
    missed = statements - executed.get(name, set())
    total_s += len(statements)
    total_m += len(missed)
    rows.append((name, len(statements), len(missed)))
width = max(len(r[0]) for r in rows) + len("bindings/python/libshard/")
print(f"{'Python package line coverage':<{width}} {'lines':>6} {'missed':>6} {'cover':>7}")
for name, s, m in rows:
    print(f"{'bindings/python/libshard/' + name:<{width}} {s:>6} {m:>6} {100 * (s - m) / s:>6.1f}%")
print(f"{'TOTAL':<{width}} {total_s:>6} {total_m:>6} {100 * (total_s - total_m) / total_s:>6.1f}%")
PYEOF
    ;;
  --bindings-setup)
    BUILD=${2:-build}
    case $BUILD in /*) BUILD_DIR=$BUILD ;; *) BUILD_DIR=$ROOT/$BUILD ;; esac
    [ -f "$BUILD_DIR/CMakeCache.txt" ] || { echo "coverage: no build tree $BUILD" >&2; exit 2; }
    if ! grep -qx 'LIBSHARD_BINDINGS_COVERAGE:BOOL=ON' "$BUILD_DIR/CMakeCache.txt"; then
      # A tree `make build` configured (OFF): the bindings' dozen files rebuilt instrumented; the
      # next `make build` rebuilds them without.
      echo "coverage: instrumenting $BUILD's bindings (-DLIBSHARD_BINDINGS_COVERAGE=ON)"
      cmake -S "$ROOT" -B "$BUILD_DIR" -DLIBSHARD_BINDINGS_COVERAGE=ON >/dev/null &&
        cmake --build "$BUILD_DIR" -j"${JOBS:-$(nproc)}" --target libshard_python >/dev/null ||
        { echo "coverage: the instrumented build of $BUILD's bindings failed" >&2; exit 1; }
    fi
    find "$BUILD_DIR/bindings" -name '*.gcda' -delete
    exit 0 ;;
  --bindings-report)
    BUILD=${2:-build}
    PY=${3:-python3}
    case $BUILD in /*) BUILD_DIR=$BUILD ;; *) BUILD_DIR=$ROOT/$BUILD ;; esac
    if ! "$PY" -c 'import gcovr' 2>/dev/null; then
      echo "coverage: no gcovr for $PY (make deps installs it): the bindings' coverage cannot be read" >&2
      exit 1
    fi
    if [ -z "$(find "$BUILD_DIR/bindings" -name '*.gcno' -print -quit 2>/dev/null)" ]; then
      echo "coverage: $BUILD's bindings are not instrumented (configure -DLIBSHARD_BINDINGS_COVERAGE=ON; make test and make coverage do)" >&2
      exit 1
    fi
    if [ -z "$(find "$BUILD_DIR/bindings" -name '*.gcda' -print -quit)" ]; then
      echo "coverage: no counts (.gcda) under $BUILD/bindings: no process loaded the instrumented _core and exited since scripts/coverage.sh --bindings-setup" >&2
      exit 1
    fi
    mkdir -p "$BUILD_DIR/coverage"
    # --merge-lines: a line of a template (the option tables) counts once, not once per instance.
    "$PY" -m gcovr --root "$ROOT" --filter "$ROOT/bindings/src/" --merge-lines \
      --json-summary "$BUILD_DIR/coverage/bindings.json" --txt "$BUILD_DIR/coverage/bindings.txt" \
      "$BUILD_DIR/bindings" || { echo "coverage: gcovr failed" >&2; exit 1; }
    exec "$PY" - "$ROOT" "$BUILD_DIR/coverage/bindings.json" <<'PYEOF'
"""Per file of bindings/src: lines, missed, percent, and the total. Every .cc file must have data."""
import glob
import json
import os
import sys

root, summary = sys.argv[1], sys.argv[2]
files = {f["filename"]: f for f in json.load(open(summary))["files"]}
missing = [os.path.relpath(p, root) for p in sorted(glob.glob(os.path.join(root, "bindings", "src", "*.cc")))
           if os.path.relpath(p, root) not in files]
if missing:
    sys.exit(f"coverage: no data for {', '.join(missing)} (is it in libshard._core?)")
rows = [(name, f["line_total"], f["line_total"] - f["line_covered"]) for name, f in sorted(files.items())
        if f["line_total"]]
total_s = sum(r[1] for r in rows)
total_m = sum(r[2] for r in rows)
if not total_s:
    sys.exit("coverage: gcovr found no lines of bindings/src")
width = max(len(r[0]) for r in rows + [("Bindings line coverage (C++)", 0, 0)])
print(f"{'Bindings line coverage (C++)':<{width}} {'lines':>6} {'missed':>6} {'cover':>7}")
for name, s, m in rows:
    print(f"{name:<{width}} {s:>6} {m:>6} {100 * (s - m) / s:>6.1f}%")
print(f"{'TOTAL':<{width}} {total_s:>6} {total_m:>6} {100 * (total_s - total_m) / total_s:>6.1f}%")
print(f"(missed lines per file: {os.path.relpath(os.path.join(os.path.dirname(summary), 'bindings.txt'), root)})")
PYEOF
    ;;
esac

BUILD=${1:-build}
PY=${2:-python3}
exec bash "$ROOT/scripts/test.sh" "$BUILD" "$PY" python
