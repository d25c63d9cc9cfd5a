#!/usr/bin/env bash
# The wheel check checks the wheel it names, whatever libshard is installed elsewhere: runs
# scripts/test_wheel.sh with two decoy libshards where the interpreter sees them, neither of them
# installed into the machine's Python:
#   - libshard 0.1.0, the wheel's own version (what `pip install .` leaves in an interpreter's
#     site-packages), in the user's site directory (PYTHONUSERBASE, a temporary one), which
#     Python puts before a venv's own site-packages;
#   - libshard 0.0.1 in a throwaway base venv (it sees the interpreter's torch and numpy) whose
#     python runs the check.
# Each decoy's package, console-script module and dist-info say "decoy" when used. Before the
# check isolated its venv, pip found the user's 0.1.0 "already satisfied", installed nothing from
# the wheel, and the check failed (or, with another version, imported the decoy).
#
#   scripts/test_wheel_decoys.sh [PYTHON] [WHEEL]     as scripts/test_wheel.sh
set -euo pipefail
unset PYTHONPATH LIBSHARD_PYTHONPATH
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${1:-python3}
WHEEL=${2:-}
fail() { echo "test_wheel_decoys: FAILED: $*" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/libshard_decoys.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# decoy SITE_DIR VERSION: a libshard package, _libshard_cli module and dist-info in SITE_DIR.
decoy() {
  local site=$1 version=$2
  mkdir -p "$site/libshard" "$site/libshard-$version.dist-info"
  cat >"$site/libshard/__init__.py" <<EOF
__version__ = "$version"
raise ImportError("the decoy libshard $version in $site was imported instead of the wheel's")
EOF
  cat >"$site/_libshard_cli.py" <<EOF
import sys
def main():
    sys.exit("the decoy libshard $version's console script ran instead of the wheel's")
def load_core():
    main()
EOF
  printf 'Metadata-Version: 2.1\nName: libshard\nVersion: %s\n' "$version" \
    >"$site/libshard-$version.dist-info/METADATA"
  printf '[console_scripts]\nlibshard = _libshard_cli:main\n' \
    >"$site/libshard-$version.dist-info/entry_points.txt"
  echo pip >"$site/libshard-$version.dist-info/INSTALLER"
  printf 'libshard/__init__.py,,\n_libshard_cli.py,,\nlibshard-%s.dist-info/METADATA,,\nlibshard-%s.dist-info/RECORD,,\n' \
    "$version" "$version" >"$site/libshard-$version.dist-info/RECORD"
}

wheel_version=0.1.0
if [ -n "$WHEEL" ]; then wheel_version=$(basename "$WHEEL" | cut -d- -f2); fi
export PYTHONUSERBASE=$WORK/userbase
user_site=$("$PY" -c 'import site; print(site.getusersitepackages())')
decoy "$user_site" "$wheel_version"
"$PY" -m venv --system-site-packages "$WORK/base"
base_site=$("$WORK/base/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
decoy "$base_site" 0.0.1

# The decoys are really where the interpreters look (else this proves nothing).
"$PY" -c 'import importlib.metadata as m, sys; sys.exit(m.version("libshard") != sys.argv[1])' \
  "$wheel_version" || fail "the user-site decoy is not visible to $PY"
"$WORK/base/bin/python" -c 'import importlib.metadata as m, sys
sys.exit(m.version("libshard") not in ("0.0.1", sys.argv[1]))' "$wheel_version" ||
  fail "the decoys are not visible to the base venv"

bash "$ROOT/scripts/test_wheel.sh" "$WORK/base/bin/python" ${WHEEL:+"$WHEEL"} ||
  fail "the wheel check did not check the wheel alone with decoy libshards installed"
echo "--- test_wheel_decoys: passed (decoy libshard $wheel_version in the user's site, 0.0.1 in the base venv)"
