#!/usr/bin/env bash
# make demo: build an EAGLE-3-like directory of real torch.save files, pack it, stream it, and
# print the loader beside the torch.load DataLoader.
set -euo pipefail
BUILD=${1:-build}
PY=${2:-python3}
DIR=${3:-demo_data}
case $BUILD in /*) BUILD_DIR=$BUILD ;; *) BUILD_DIR=$PWD/$BUILD ;; esac  # relative or absolute
CLI="$BUILD_DIR/converters/libshard"
export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"

# The dump's size (make demo's defaults; CI runs a small one).
SAMPLES=${DEMO_SAMPLES:-64}
HIDDEN=${DEMO_HIDDEN:-1024}
MIN_LEN=${DEMO_MIN_LEN:-256}
MAX_LEN=${DEMO_MAX_LEN:-1024}

echo "== 1. an EAGLE-3-like dump: $SAMPLES samples of torch.save dicts (input_ids, loss_mask, hidden states bf16)"
rm -rf "$DIR"
$PY examples/make_eagle3_data.py "$DIR/src" --samples "$SAMPLES" --hidden "$HIDDEN" \
  --min-len "$MIN_LEN" --max-len "$MAX_LEN"

echo; echo "== 2. libshard pack"
"$CLI" pack "$DIR/src" -o "$DIR/packed" --shard-size 64MiB

echo; echo "== 3. libshard info"
"$CLI" info "$DIR/packed"

echo; echo "== 4. libshard verify --against the sources (every tensor bit-exact)"
"$CLI" verify "$DIR/packed" --against "$DIR/src"

echo; echo "== 5. streaming: libshard.Loader vs torch.load DataLoader(num_workers=4)"
$PY examples/compare_loaders.py --packed "$DIR/packed" --src "$DIR/src"

echo; echo "== 6. a few training steps of a tiny draft head through libshard.Loader"
$PY examples/train_eagle3.py --data "$DIR/packed" --steps 20 --log-every 5
