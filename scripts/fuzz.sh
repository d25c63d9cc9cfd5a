#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang under ASan+UBSan and runs them.
#
#   scripts/fuzz.sh replay [BUILD_DIR]   `make fuzz-replay` and the fuzz step of `make test`: replays
#       every committed seed (fuzz/corpus/<target>/) and crash reproducer
#       (fuzz/regressions/<target>/) once, then fuzzes each target for FUZZ_BRIEF_SECONDS (10).
#   scripts/fuzz.sh run [BUILD_DIR]      `make fuzz`: fuzzes each target for FUZZ_SECONDS (600).
#
# FUZZ_TARGETS (default: all) limits the targets, e.g. FUZZ_TARGETS="pickle_fuzz zip_fuzz"; FUZZ_JOBS
# (default: the number of cores) how many run at once.
# New inputs go to BUILD_DIR/fuzz-scratch/<target>/ (never to the committed corpus); crashes to
# fuzz/crashes/<target>/ (git-ignored): minimise one with `<binary> -minimize_crash=1 <file>` and
# commit it to fuzz/regressions/<target>/. Fails on any crash, leak, timeout or out-of-memory, and
# prints a table: target, executions, crashes. BUILD_DIR defaults to build-fuzz.
set -uo pipefail
MODE=${1:-replay}
BUILD=${2:-build-fuzz}
SECONDS_PER_TARGET=${FUZZ_SECONDS:-600}
[ "$MODE" = replay ] && SECONDS_PER_TARGET=${FUZZ_BRIEF_SECONDS:-10}
ALL_TARGETS="pickle_fuzz zip_fuzz gzip_fuzz safetensors_fuzz index_fuzz manifest_fuzz journal_fuzz
             metadata_fuzz codec_fuzz collate_fuzz cache_fuzz s3_xml_fuzz aws_ini_fuzz
             cache_state_fuzz upload_journal_fuzz object_url_fuzz loader_state_fuzz"
TARGETS=${FUZZ_TARGETS:-$ALL_TARGETS}
cd "$(dirname "$0")/.." || exit 1

case $MODE in replay|run) ;; *) echo "usage: $0 replay|run [BUILD_DIR]" >&2; exit 2;; esac

# Largest input each target mutates to: a few times its largest real seed, so executions stay
# fast (the larger hostile seeds are still replayed whole).
max_len() {
  case $1 in
    pickle_fuzz) echo 4096;; zip_fuzz|safetensors_fuzz|index_fuzz|manifest_fuzz) echo 8192;;
    journal_fuzz|metadata_fuzz|codec_fuzz) echo 8192;; gzip_fuzz|cache_fuzz) echo 16384;;
    cache_state_fuzz) echo 256;; s3_xml_fuzz|aws_ini_fuzz|upload_journal_fuzz|object_url_fuzz) echo 4096;;
    loader_state_fuzz) echo 1024;;
    *) echo 8192;;
  esac
}

if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found; run 'make deps' (installs clang and libclang-rt-14-dev)" >&2
  exit 1
fi
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
    clang++ -x c++ -fsanitize=fuzzer,address,undefined - -o /dev/null 2>/dev/null; then
  echo "fuzz: clang++ cannot link libFuzzer; run 'make deps' (libclang-rt-14-dev)" >&2
  exit 1
fi

# Only what the fuzzers need: no tests, benchmarks, LibTorch or Python.
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DLIBSHARD_BUILD_FUZZERS=ON \
    -DLIBSHARD_BUILD_TESTS=OFF -DLIBSHARD_BUILD_BENCH=OFF -DLIBSHARD_BUILD_TORCH=OFF \
    -DLIBSHARD_BUILD_PYTHON=OFF >/dev/null || exit 1
fi
build_targets=(); for t in $TARGETS; do build_targets+=(--target "$t"); done
cmake --build "$BUILD" -j"$(nproc)" "${build_targets[@]}" || exit 1

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
LIMITS=(-rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10)
# One target: replays, then fuzzes; prints its progress and writes its table row to
# $ROWS/<target>.row. The targets run FUZZ_JOBS at a time (default: one per core; each libFuzzer
# process uses one), each one's output printed whole, in the targets' order, once all are done.
fuzz_one() {  # fuzz_one TARGET
  local t=$1 bin crashes scratch status inputs existing f before execs log rc after
  bin=$BUILD/fuzz/$t
  crashes=fuzz/crashes/$t
  scratch=$BUILD/fuzz-scratch/$t
  mkdir -p "$crashes" "$scratch"
  [ "$MODE" = replay ] && { rm -rf "$scratch"; mkdir -p "$scratch"; }
  status=ok
  if [ "$MODE" = replay ]; then
    inputs=(fuzz/corpus/"$t"/* fuzz/regressions/"$t"/*)
    existing=(); for f in "${inputs[@]}"; do [ -f "$f" ] && existing+=("$f"); done
    echo "=== $t: replaying ${#existing[@]} inputs"
    if ! "$bin" "${LIMITS[@]}" -runs=1 "${existing[@]}" >"$scratch.replay.log" 2>&1; then
      tail -n 40 "$scratch.replay.log"; status=FAILED-replay
    fi
  fi
  before=$(find "$crashes" -type f | wc -l)
  execs=0
  if [ "$status" = ok ]; then
    echo "=== $t: fuzzing for ${SECONDS_PER_TARGET} s"
    log=$scratch.log
    "$bin" "${LIMITS[@]}" -max_len="$(max_len "$t")" -max_total_time="$SECONDS_PER_TARGET" \
      -print_final_stats=1 -artifact_prefix="$crashes/" "$scratch" "fuzz/corpus/$t" >"$log" 2>&1
    rc=$?
    execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' |
            tail -1)
    if [ $rc -ne 0 ]; then
      grep -E 'ERROR|SUMMARY|Test unit written|==[0-9]+==' "$log" | head -n 20
      status=FAILED
    fi
  fi
  after=$(find "$crashes" -type f | wc -l)
  printf '%-18s %12s %8s  %s\n' "$t" "${execs:-?}" "$((after - before))" "$status" >"$ROWS/$t.row"
}

ROWS=$BUILD/fuzz-rows
rm -rf "$ROWS"; mkdir -p "$ROWS"
JOBS=${FUZZ_JOBS:-$(nproc)}
for t in $TARGETS; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  fuzz_one "$t" >"$ROWS/$t.out" 2>&1 &
done
wait
failed=0
rows=()
for t in $TARGETS; do
  cat "$ROWS/$t.out"
  row=$(cat "$ROWS/$t.row" 2>/dev/null) || row=$(printf '%-18s %12s %8s  %s' "$t" "?" "?" "FAILED")
  rows+=("$row")
  [[ $row == *" ok" ]] || failed=$((failed + 1))
done

echo
printf '%-18s %12s %8s  %s\n' target executions crashes result
for r in "${rows[@]}"; do echo "$r"; done
if [ $failed -ne 0 ]; then
  echo "fuzz: $failed target(s) failed; reproducers in fuzz/crashes/<target>/" >&2
  exit 1
fi
echo "fuzz: all targets ok"
