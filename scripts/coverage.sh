#!/usr/bin/env bash
# Line coverage of the Python package, bindings/python/libshard/*.py (coverage.py through
# pytest-cov; settings in .coveragerc). `make test` measures it while its Python steps run and
# prints the report last; `make coverage` runs only those steps (make check's Python suites, the
# rest, the trainer integrations with the trainers' environment) and prints it.
#
#   scripts/coverage.sh [BUILD] [PYTHON]   the Python steps under coverage, then the report
#   scripts/coverage.sh --report [BUILD]   the report of the last measurement: per file and total
#   scripts/coverage.sh --pytest-opts PY   the pytest options that measure (none when that python
#                                          has no pytest-cov); scripts/test.sh adds them
#
# The data: $COVERAGE_FILE, by default BUILD/coverage/data (cleared when a measured run starts).
# Not measured: the package in child processes (the Writer's and loaders' child scripts,
# DataLoader workers, torchrun), and the C++ of the bindings (bindings/src/*.cc): see
# docs/testing.md.
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
esac

BUILD=${1:-build}
PY=${2:-python3}
exec bash "$ROOT/scripts/test.sh" "$BUILD" "$PY" python
