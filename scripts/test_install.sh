#!/usr/bin/env bash
# The installed-package check: installs libshard from a build tree into a temporary prefix, moves
# the prefix (the package must be relocatable), then builds examples/cpp_minimal (CMake, and
# pkg-config) and examples/cpp_trainer (CMake + LibTorch) against it as outside projects and runs
# them on a small dataset written with the installed Writer:
#   - cpp_minimal reads part of an epoch, checkpoints, resumes, and must read every sample once;
#   - cpp_trainer trains 10 steps straight, and 6 + 4 steps with a resume from its checkpoint:
#     the final losses must be identical (model, optimizer and loader position all restored);
#     one more run as RANK=1 of WORLD_SIZE=2.
#
# It checks the package it installed, whatever libshard is installed elsewhere: CMake is pointed
# at the prefix's libshardConfig.cmake itself (libshard_DIR, no package registry), pkg-config
# finds the prefix's libshard.pc first, and each is checked to have resolved into the prefix.
#
#   scripts/test_install.sh [BUILD] [PYTHON]     BUILD: a configured build tree (default: build)
# Builds the installable targets in BUILD if needed. Exit 0 when everything passed.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
PY=${2:-python3}
JOBS=${JOBS:-$(nproc)}
T0=$SECONDS
WORK=$(mktemp -d "${TMPDIR:-/tmp}/libshard_install.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

say() { echo "--- test_install: $* ($((SECONDS - T0)) s)"; }
fail() { echo "test_install: FAILED: $*" >&2; exit 1; }

# 1. Install, then move the prefix: nothing in it may point back to where it was installed.
targets=(libshard)
known=$(cmake --build "$BUILD" --target help 2>/dev/null || true)
for t in libshard_torch libshard_cli; do
  if grep -Eq "^(\.\.\. )?$t(:| |$)" <<<"$known"; then targets+=("$t"); fi
done
say "building ${targets[*]} in $BUILD"
cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}" >/dev/null
cmake --install "$BUILD" --prefix "$WORK/staging" >/dev/null
mv "$WORK/staging" "$WORK/prefix"
PREFIX=$WORK/prefix
if grep -rIl "$WORK/staging" "$PREFIX" >/dev/null 2>&1; then
  fail "installed files name the install-time prefix: $(grep -rIl "$WORK/staging" "$PREFIX")"
fi
CMAKEDIR=$(dirname "$(find "$PREFIX" -name libshardConfig.cmake | head -1)")
[ -f "$CMAKEDIR/libshardConfigVersion.cmake" ] || fail "no libshardConfigVersion.cmake"
PCDIR=$(dirname "$(find "$PREFIX" -name libshard.pc | head -1)")
[ -f "$PCDIR/libshard.pc" ] || fail "no libshard.pc"
say "installed to $PREFIX (moved after install)"

# The outside projects find this prefix's package, never another libshard on the machine.
FIND_THIS=(-Dlibshard_DIR="$CMAKEDIR" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
found_here() {  # found_here BUILD_DIR: the project's libshard_DIR is the prefix's
  local dir
  dir=$(sed -n 's/^libshard_DIR:[A-Z]*=//p' "$1/CMakeCache.txt")
  [ "$(cd "$dir" 2>/dev/null && pwd -P)" = "$(cd "$CMAKEDIR" && pwd -P)" ] ||
    fail "$(basename "$1") found libshard at '$dir', not in $PREFIX"
}

# 2. cpp_minimal: core only, no LibTorch on the search path.
cmake -S "$ROOT/examples/cpp_minimal" -B "$WORK/minimal" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$PREFIX" "${FIND_THIS[@]}" >/dev/null
found_here "$WORK/minimal"
cmake --build "$WORK/minimal" -j"$JOBS" >/dev/null
say "cpp_minimal built with CMake"
pc_libdir=$(PKG_CONFIG_PATH="$PCDIR" pkg-config --variable=libdir libshard)
case $(cd "$pc_libdir" 2>/dev/null && pwd -P) in
  "$(cd "$PREFIX" && pwd -P)"/*) ;;
  *) fail "pkg-config found libshard with libdir '$pc_libdir', not in $PREFIX" ;;
esac
# shellcheck disable=SC2046
${CXX:-c++} -std=c++20 -O1 "$ROOT/examples/cpp_minimal/main.cc" -o "$WORK/cpp_minimal_pc" \
  $(PKG_CONFIG_PATH="$PCDIR" pkg-config --cflags --libs libshard)
say "cpp_minimal built with pkg-config"

# 3. cpp_trainer: libshard::torch and LibTorch from the torch wheel.
if [ ! -f "$CMAKEDIR/libshardTorchTargets.cmake" ]; then
  fail "$BUILD was built without libshard::torch (configure it with CMAKE_PREFIX_PATH=\$($PY -c 'import torch;print(torch.utils.cmake_prefix_path)'))"
fi
TORCH_PREFIX=$($PY -c 'import torch;print(torch.utils.cmake_prefix_path)')
cmake -S "$ROOT/examples/cpp_trainer" -B "$WORK/trainer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$PREFIX;$TORCH_PREFIX" "${FIND_THIS[@]}" >/dev/null \
  2>"$WORK/trainer_configure.log" || { cat "$WORK/trainer_configure.log"; fail "cpp_trainer configure"; }
found_here "$WORK/trainer"
cmake --build "$WORK/trainer" -j"$JOBS" >/dev/null
say "cpp_trainer built"

# 4. A small dataset, written by the installed Writer through the trainer.
DATA=$WORK/data
"$WORK/trainer/cpp_trainer" make-data "$DATA" --samples 48 --hidden 32
if [ -x "$PREFIX/bin/libshard" ]; then "$PREFIX/bin/libshard" info "$DATA" >/dev/null; fi

# 5. cpp_minimal (both builds): 2 batches, checkpoint, resume to the end of the epoch.
for exe in "$WORK/minimal/cpp_minimal" "$WORK/cpp_minimal_pc"; do
  rm -f "$WORK/state.txt"
  first=$("$exe" "$DATA" "$WORK/state.txt" 2)
  rest=$("$exe" "$DATA" "$WORK/state.txt")
  n1=$(awk '{print $2}' <<<"$first"); n2=$(awk '{print $2}' <<<"$rest")
  echo "$(basename "$exe"): $first | resumed: $rest"
  [ "$((n1 + n2))" -eq 48 ] || fail "$(basename "$exe") read $n1 + $n2 samples, want 48"
done

# 6. cpp_trainer: straight vs. interrupted-and-resumed training must end on the same loss. One
# intra-op thread: reductions then run in one order (and 2 shared CI cores go no faster with more).
export OMP_NUM_THREADS=1
TRAIN=("$WORK/trainer/cpp_trainer" train "$DATA" --device cpu --max-tokens 1024 --log-every 2)
"${TRAIN[@]}" --steps 10 --checkpoint "$WORK/a.ckpt" | tee "$WORK/a.log"
"${TRAIN[@]}" --steps 6 --checkpoint "$WORK/b.ckpt" --save-every 3 >"$WORK/b1.log"
"${TRAIN[@]}" --steps 10 --checkpoint "$WORK/b.ckpt" | tee "$WORK/b2.log"
grep -q "^resumed from .*step 6," "$WORK/b2.log" || fail "cpp_trainer did not resume from step 6"
loss_a=$(sed -n 's/.*final loss \([0-9.]*\).*/\1/p' "$WORK/a.log")
loss_b=$(sed -n 's/.*final loss \([0-9.]*\).*/\1/p' "$WORK/b2.log")
first_loss=$(sed -n 's/^step 2 .* loss \([0-9.]*\).*/\1/p' "$WORK/a.log")
# A resume on another batch, or without the optimizer state, moves the loss far more than 1e-5.
[ -n "$loss_a" ] && [ -n "$loss_b" ] &&
  awk -v a="$loss_a" -v b="$loss_b" 'BEGIN { d = a - b; exit !(d < 1e-5 && d > -1e-5) }' ||
  fail "final loss after resume ($loss_b) differs from the straight run ($loss_a)"
awk -v a="$first_loss" -v b="$loss_a" 'BEGIN { exit !(b < a) }' ||
  fail "loss did not fall in 10 steps ($first_loss -> $loss_a)"
RANK=1 WORLD_SIZE=2 "${TRAIN[@]}" --steps 3 >"$WORK/rank1.log" || fail "cpp_trainer as rank 1 of 2"
grep -q "^rank 1/2, 48 samples" "$WORK/rank1.log" || fail "RANK/WORLD_SIZE ignored: $(cat "$WORK/rank1.log")"

say "passed"
